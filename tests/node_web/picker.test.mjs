// The web page's model picker in Debian's Chromium (playwright-core), run by tests/e2e/router.sh:
// a router's models listed with their status, the one picked named by the page's requests and
// loaded for them; a server of one model shows its name and no picker.
//   NUCLEUS_URL  a router (no API key);  NUCLEUS_SINGLE_URL  a server of one model (-m)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

let browser;
before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
});
after(async () => { await browser?.close(); });

test('a router: the picker lists the models, and the page asks for the one picked', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${process.env.NUCLEUS_URL}/`);
  await page.waitForSelector('#model-pick:not([hidden]) option', { state: 'attached' });
  const options = await page.$$eval('#model-pick option', (os) => os.map((o) => [o.value, o.textContent]));
  assert.deepEqual(options.map((o) => o[0]), ['broken', 'llama3', 'qwen2', 'stories']);
  assert.ok(options.every(([id, label]) => label === id || label.startsWith(`${id} (`)), JSON.stringify(options));
  await page.selectOption('#model-pick', 'llama3');
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.fill('#input', 'Hello');
  await page.press('#input', 'Enter');
  const body = JSON.parse((await sent).postData());
  assert.equal(body.model, 'llama3');
  await page.waitForSelector('.msg[data-done="true"], [data-done="true"]');
  // the statuses are read again after a reply: llama3 is loaded now
  await page.waitForFunction(() => [...document.querySelectorAll('#model-pick option')].some((o) => o.textContent === 'llama3'));
  assert.equal(await page.$eval('#model-pick', (s) => s.value), 'llama3');
  assert.deepEqual(errors, []);
  await page.close();
});

test('one model: its name, no picker', async () => {
  const page = await browser.newPage();
  await page.goto(`${process.env.NUCLEUS_SINGLE_URL}/`);
  await page.waitForFunction(() => !/connecting/.test(document.getElementById('model').textContent));
  assert.equal(await page.$eval('#model', (e) => e.textContent), 'stories260K');
  assert.equal(await page.$eval('#model-pick', (e) => e.hidden), true);
  await page.close();
});
