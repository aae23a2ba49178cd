// The web page of `nucleus serve` in Debian's Chromium (playwright-core), run by tests/e2e/web.sh:
// a streamed reply, the stop button, the decoding inspector against the API's own numbers, its
// temperature slider, a branch, keyboard-only use, a phone's width, and CORS from pages on other
// origins. Screenshots go to $SHOTS.
//
// Environment: NUCLEUS_URL (a server with a chat template, --api-key NUCLEUS_KEY, --cors naming
// http://127.0.0.1:CORS_PORT), CORS_PORT, SHOTS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { chromium } from 'playwright-core';
import { renderMarkdown } from '../../web/markdown.js';

const URL_ = process.env.NUCLEUS_URL;
const KEY = process.env.NUCLEUS_KEY;
const SHOTS = process.env.SHOTS;
const CORS_PORT = Number(process.env.CORS_PORT);
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    // this sandbox: root, no GPU, no network beyond loopback (see the env notes)
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
});
after(async () => { await browser?.close(); });

// A page with the key typed into Settings, as a person would.
async function openPage(viewport = { width: 1280, height: 860 }, init = null, base = URL_) {
  const context = await browser.newContext({ viewport });
  if (init) await context.addInitScript(init);
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.errors = errors;
  await page.goto(`${base}/`);
  await page.click('#settings-toggle');
  await page.fill('#api-key', KEY);
  await page.locator('#api-key').dispatchEvent('change');
  await page.click('#settings-toggle');
  await page.waitForFunction(() => !/API key|connecting/.test(document.getElementById('model').textContent));
  errors.length = 0; // the model's name asked for before the key was typed: 401, as it should
  return page;
}

// The events of a page's request, asked again from here with the same body (its seed makes the
// same tokens): the browser's copy of a text/event-stream body is not given back as UTF-8.
async function sseEvents(response) {
  const r = await fetch(response.url(), { method: 'POST', body: response.request().postData(),
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` } });
  const text = await r.text();
  return text.split('\n\n').map((e) => e.replace(/^data: /, '')).filter((d) => d && d !== '[DONE]').map((d) => JSON.parse(d));
}

function stepsOf(events) {
  const steps = [];
  let prompt = null;
  for (const e of events) {
    const x = e.choices?.[0]?.nucleus_explain;
    if (!x) continue;
    if (x.prompt_tokens) prompt = x.prompt_tokens;
    steps.push(...x.steps);
  }
  return { steps, prompt };
}

// Send a message; resolves with the chat response once the reply is done.
async function sendMessage(page, text, { keyboard = false } = {}) {
  const n = await page.locator('.msg.assistant').count();
  const resp = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
  if (keyboard) {
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  } else {
    await page.fill('#input', text);
    await page.click('#send');
  }
  const r = await resp;
  await page.locator('.msg.assistant').nth(n).and(page.locator('[data-done=true]')).waitFor();
  return { response: r, message: page.locator('.msg.assistant').nth(n) };
}

async function setSetting(page, name, value) {
  await page.click('#settings-toggle');
  await page.fill(`#set-${name}`, String(value));
  await page.click('#settings-toggle');
}

// The bars' probabilities by token id.
async function bars(page) {
  return page.$$eval('#bars .bar', (els) => Object.fromEntries(els.map((e) => [e.dataset.token, Number(e.dataset.p)])));
}

// The distribution of README's "Web page": softmax of the top N raw logits at temperature T with the
// tail of n_vocab - N tokens, then top-k, top-p, min-p. With top-k <= N the tail is gone: exact.
function expected(raw, T, k, p, minP) {
  assert.ok(k > 0 && k <= raw.top.length, 'this check keeps to exact cases');
  let c = raw.top.slice(0, k).map((t) => ({ token: t.token, w: Math.exp((t.logit - raw.top[0].logit) / T) }));
  const norm = () => { const z = c.reduce((a, x) => a + x.w, 0); c = c.map((x) => ({ ...x, w: x.w / z })); };
  norm();
  let cum = 0, cut = c.length;
  for (let i = 0; i < c.length; i++) { cum += c[i].w; if (cum >= p) { cut = i + 1; break; } }
  c = c.slice(0, cut); norm();
  const pmax = c[0].w;
  c = c.filter((x) => x.w >= minP * pmax); norm();
  return Object.fromEntries(c.map((x) => [String(x.token), x.w]));
}

let page, chat; // the desktop page and its first reply's steps

test('markdown: model text never becomes markup; code blocks get a copy button', () => {
  const hostile = '<script>alert(1)</script> <img src=x onerror=alert(1)> "q" \'a\' &amp;';
  const html = renderMarkdown(hostile);
  assert.ok(!/<(script|img)/i.test(html) && html.includes('&lt;script&gt;') && html.includes('&amp;amp;'));
  assert.equal(renderMarkdown('[x](javascript:alert(1))'), '<p>[x](javascript:alert(1))</p>');
  assert.equal(renderMarkdown('[x](https://a.b/c)'), '<p><a href="https://a.b/c" rel="noopener noreferrer" target="_blank">x</a></p>');
  assert.equal(renderMarkdown('**b** *i* `<c>`'), '<p><strong>b</strong> <em>i</em> <code>&lt;c&gt;</code></p>');
  assert.equal(renderMarkdown('# T\n- a\n- b\n\n1. c'), '<h3>T</h3><ul><li>a</li><li>b</li></ul><ol><li>c</li></ol>');
  const code = renderMarkdown('x\n```c\nint a = 1 < 2;\n```\ny');
  assert.equal(code, '<p>x</p><div class="code"><span class="lang">c</span><button type="button" class="copy-code">Copy code</button>' +
                     '<pre><code>int a = 1 &lt; 2;</code></pre></div><p>y</p>');
  assert.match(renderMarkdown('```\nstill streaming <b>'), /<pre><code>still streaming &lt;b&gt;<\/code><\/pre>/);
});

test('the page is served embedded, with its security headers, and 304 on a matching ETag', async () => {
  const r = await fetch(`${URL_}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/html/);
  assert.match(r.headers.get('content-security-policy'), /default-src 'none'; script-src 'self'/);
  const again = await fetch(`${URL_}/`, { headers: { 'If-None-Match': r.headers.get('etag') } });
  assert.equal(again.status, 304);
  assert.match((await fetch(`${URL_}/app.js`)).headers.get('content-type'), /^text\/javascript/);
});

test('a message streams its reply', async () => {
  page = await openPage();
  await setSetting(page, 'max_tokens', 48);
  await setSetting(page, 'seed', 7);
  const n = await page.locator('.msg.assistant').count();
  // watch the reply's text while it streams: it must be seen partial, then whole
  const seen = page.evaluate(() => new Promise((resolve) => {
    const lengths = [];
    const obs = new MutationObserver(() => {
      const m = document.querySelectorAll('.msg.assistant');
      const last = m[m.length - 1];
      if (!last) return;
      lengths.push(last.querySelector('.body').textContent.length);
      if (last.dataset.done === 'true') { obs.disconnect(); resolve(lengths); }
    });
    obs.observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true, attributes: true });
  }));
  const { response, message } = await sendMessage(page, 'Write a **short** story about a cat.');
  const lengths = await seen;
  assert.ok(n === 0);
  const partial = lengths.filter((x) => x > 0);
  assert.ok(new Set(partial).size >= 2, `the text grew in several steps: ${partial}`);
  const events = await sseEvents(response);
  chat = { ...stepsOf(events), events };
  assert.ok(chat.steps.length > 0 && chat.prompt.length > 0);
  const text = await message.locator('.body').textContent();
  assert.ok(text.length > 0);
  assert.equal(await message.locator('.thinking').isHidden(), true, 'no reasoning: no thinking block');
  assert.match(await message.locator('.stats').textContent(), /\d+ tokens · [\d.–]+ tok\/s · first token \d+ ms/);
  // Copy puts the reply's text (as the API sent it) on the clipboard
  await message.locator('.copy').click();
  const whole = chat.events.map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), whole);
  assert.deepEqual(page.errors, []);
});

test('the inspector shows the server\'s distribution, and the temperature slider recomputes it', async () => {
  const message = page.locator('.msg.assistant').first();
  await message.locator('.show-tokens').click();
  const k = Math.min(2, chat.steps.length - 1);
  await message.locator(`.tok[data-step="${k}"]`).click();
  await page.locator('#inspector:not([hidden])').waitFor();
  const step = chat.steps[k];
  assert.match(await page.locator('#inspector h2').textContent(), new RegExp(`Step ${k}`));
  // at the request's own settings the page's bars are the server's final distribution
  const b0 = await bars(page);
  for (const t of step.top) assert.ok(Math.abs(b0[t.token] - t.p) < 2e-3, `token ${t.token}: page ${b0[t.token]}, server ${t.p}`);
  assert.equal(await page.locator('#server-stages li').count(), step.stages.length);
  await page.screenshot({ path: `${SHOTS}/desktop-inspector.png` });
  // a hotter temperature: the bars change, to what the raw logits give
  await page.locator('#sl-temp').fill('1.5');
  const b1 = await bars(page);
  const want = expected(step.raw, 1.5, 40, 0.95, 0.05);
  assert.notDeepEqual(b1, b0);
  for (const [tok, p] of Object.entries(b1)) assert.ok(Math.abs(p - (want[tok] ?? 0)) < 1e-6, `token ${tok}: page ${p}, expected ${want[tok] ?? 0}`);
  await page.locator('#sl-topk').fill('5');
  const want5 = expected(step.raw, 1.5, 5, 0.95, 0.05);
  const b2 = await bars(page);
  for (const [tok, p] of Object.entries(b2)) assert.ok(Math.abs(p - (want5[tok] ?? 0)) < 1e-6, `top-k 5, token ${tok}`);
  await page.screenshot({ path: `${SHOTS}/desktop-slider.png` });
});

test('branch: another candidate, and the reply goes on from it', async () => {
  const k = Math.min(2, chat.steps.length - 1);
  const step = chat.steps[k];
  const other = step.raw.top.find((t) => t.token !== step.token && t.piece.trim());
  const req = page.waitForRequest((r) => r.url().endsWith('/v1/completions'));
  const before_ = await page.locator('.msg.assistant').count();
  await page.locator(`#bars .branch[data-token="${other.token}"]`).click();
  const body = JSON.parse((await req).postData());
  assert.deepEqual(body.prompt, [...chat.prompt, ...chat.steps.slice(0, k).map((s) => s.token), other.token]);
  const branchMsg = page.locator('.msg.assistant').nth(before_);
  await branchMsg.and(page.locator('[data-done=true]')).waitFor();
  const prefix = chat.steps.slice(0, k).map((s) => s.piece).join('') + other.piece;
  const text = await branchMsg.locator('.body').textContent();
  // the rendered text starts as the tokens do (markdown may drop a leading space)
  assert.ok(text.startsWith(prefix.trimStart().slice(0, 8)), `"${text}" starts with "${prefix}"`);
  assert.match(await branchMsg.locator('.who').textContent(), new RegExp(`branch at step ${k}`));
  await branchMsg.locator('.show-tokens').click();
  assert.equal(await branchMsg.locator(`.tok[data-step="${k}"]`).textContent(), other.piece);
  await page.screenshot({ path: `${SHOTS}/desktop-branch.png` });
});

test('after a branch the conversation goes on from it, and Regenerate redoes the last reply', async () => {
  await setSetting(page, 'max_tokens', 4);
  const req = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  const { message } = await sendMessage(page, 'And then?');
  const sent = JSON.parse((await req).postData()).messages;
  const assistants = sent.filter((m) => m.role === 'assistant');
  assert.equal(assistants.length, 1, 'only the branch, not the reply it replaced');
  assert.equal(sent[sent.length - 1].content, 'And then?');
  const n = await page.locator('.msg').count();
  const again = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await message.locator('.regenerate').click();
  assert.deepEqual(JSON.parse((await again).postData()).messages, sent);
  await page.locator('.msg.assistant').last().and(page.locator('[data-done=true]')).waitFor();
  assert.equal(await page.locator('.msg').count(), n);
});

test('a branch of an earlier reply goes under that reply, and the turns after it are left out', async () => {
  const p = await openPage();
  await setSetting(p, 'max_tokens', 6);
  await setSetting(p, 'seed', 3);
  const first = await sendMessage(p, 'Tell me about the sea.');
  await sendMessage(p, 'And the sky?');
  const events = await sseEvents(first.response);
  const { steps } = stepsOf(events);
  const k = Math.min(1, steps.length - 1);
  const other = steps[k].raw.top.find((t) => t.token !== steps[k].token && t.piece.trim());
  await first.message.locator('.show-tokens').click();
  await first.message.locator(`.tok[data-step="${k}"]`).click();
  await p.locator('#inspector:not([hidden])').waitFor();
  await p.locator(`#bars .branch[data-token="${other.token}"]`).click();
  await p.locator('.msg.assistant[data-branch]').and(p.locator('[data-done=true]')).waitFor();
  const order = await p.$$eval('#log .msg', (els) => els.map((e) =>
    `${e.classList.contains('user') ? 'user' : e.dataset.branch !== undefined ? 'branch' : 'reply'}${e.classList.contains('superseded') ? '-' : ''}`));
  assert.deepEqual(order, ['user', 'reply-', 'branch', 'user-', 'reply-']);
  const req = p.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await sendMessage(p, 'Go on.');
  const sent = JSON.parse((await req).postData()).messages.map((m) => m.role + ':' + (m.role === 'user' ? m.content : ''));
  assert.deepEqual(sent, ['user:Tell me about the sea.', 'assistant:', 'user:Go on.']);
  assert.deepEqual(p.errors, []);
  await p.close();
});

test('the first screen shows the model and prompts to start with; nothing the page asks for is missing', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const p = await context.newPage();
  const failed = [];
  p.on('response', (r) => { if (r.status() >= 400 && !r.url().includes('/v1/')) failed.push(`${r.status()} ${r.url()}`); });
  const icon = p.waitForResponse((r) => r.url().endsWith('/favicon.svg'));
  await p.goto(`${URL_}/`);
  const r = await icon;
  assert.equal(r.status(), 200);
  assert.equal(r.headers()['content-type'], 'image/svg+xml');
  await p.locator('#welcome').waitFor();
  assert.equal(await p.locator('#welcome .starter').count(), 4);
  assert.deepEqual(failed, [], 'no file of the page is missing (the favicon included)');
  await context.close();
  const q = await openPage();
  await q.waitForFunction(() => /qwen/i.test(document.querySelector('#welcome .model-name').textContent));
  assert.equal(await q.locator('#welcome .model-name').textContent(), await q.locator('#model').textContent());
  await q.close();
});

test('conversations are kept in the browser: a list to switch, rename and delete them', async () => {
  const p = await openPage();
  await setSetting(p, 'max_tokens', 6);
  // a starter prompt starts the first conversation
  const starter = await p.locator('#welcome .starter').first().textContent();
  const resp = p.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
  await p.locator('#welcome .starter').first().click();
  await resp;
  await p.locator('.msg.assistant[data-done=true]').waitFor();
  assert.equal(await p.locator('#welcome').count(), 0);
  assert.equal(await p.locator('.msg.user .body').first().textContent(), starter);
  await sendMessage(p, 'Second question');
  const firstTexts = await p.$$eval('#log .msg .body', (els) => els.map((e) => e.textContent));
  assert.equal(firstTexts.length, 4);
  assert.equal(await p.locator('#chat-list li').count(), 1);
  assert.equal(await p.locator('#chat-list li .open[aria-current]').textContent(), starter.slice(0, 47) + (starter.length > 48 ? '…' : ''));
  // a reload brings it back: text, not the decoding records
  await p.reload();
  await p.locator('#log .msg').first().waitFor();
  assert.deepEqual(await p.$$eval('#log .msg .body', (els) => els.map((e) => e.textContent)), firstTexts);
  assert.equal(await p.locator('.msg.assistant .show-tokens').first().isDisabled(), true);
  const kept = await p.evaluate(() => localStorage.getItem('nucleus-conversations'));
  assert.ok(!kept.includes('"steps"') && kept.includes('Second question'));
  await setSetting(p, 'max_tokens', 6); // the settings are the page's, not kept
  // a second conversation
  await p.click('#clear');
  await p.locator('#welcome').waitFor();
  assert.equal(await p.locator('#log .msg').count(), 0);
  await sendMessage(p, 'Another topic');
  assert.equal(await p.locator('#chat-list li').count(), 2);
  assert.equal(await p.locator('#chat-list li').first().locator('.open').textContent(), 'Another topic');
  // switch back to the first
  await p.locator('#chat-list li').nth(1).locator('.open').click();
  assert.deepEqual(await p.$$eval('#log .msg .body', (els) => els.map((e) => e.textContent)), firstTexts);
  // rename it, in place
  await p.locator('#chat-list li').nth(1).locator('.rename').click();
  await p.locator('#chat-list .rename-input').fill('Sea and sky');
  await p.keyboard.press('Enter');
  assert.deepEqual(await p.$$eval('#chat-list .open', (els) => els.map((e) => e.textContent)), ['Another topic', 'Sea and sky']);
  // the conversation goes on under its new name
  await sendMessage(p, 'Third question');
  assert.deepEqual(await p.$$eval('#chat-list .open', (els) => els.map((e) => e.textContent)), ['Sea and sky', 'Another topic']);
  // delete the other, after a confirmation
  p.once('dialog', (d) => d.accept());
  await p.locator('#chat-list li').nth(1).locator('.delete').click();
  assert.deepEqual(await p.$$eval('#chat-list .open', (els) => els.map((e) => e.textContent)), ['Sea and sky']);
  await p.reload();
  await p.locator('#log .msg').first().waitFor();
  await setSetting(p, 'max_tokens', 6);
  assert.deepEqual(await p.$$eval('#chat-list .open', (els) => els.map((e) => e.textContent)), ['Sea and sky']);
  assert.equal(await p.locator('#log .msg').count(), 6, 'the open conversation is the one last open');
  // declining the confirmation keeps it; deleting the open one leaves a new, empty one
  p.once('dialog', (d) => d.dismiss());
  await p.locator('#chat-list .delete').click();
  assert.equal(await p.locator('#chat-list li').count(), 1);
  p.once('dialog', (d) => d.accept());
  await p.locator('#chat-list .delete').click();
  assert.equal(await p.locator('#chat-list li').count(), 0);
  await p.locator('#welcome').waitFor();
  await p.screenshot({ path: `${SHOTS}/desktop-first-screen.png` });
  assert.deepEqual(p.errors, []);
  await p.close();
});

test('a browser that keeps nothing: the page says so and goes on', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  await context.addInitScript(() => {
    Storage.prototype.setItem = function () { throw new DOMException('full', 'QuotaExceededError'); };
  });
  const p = await context.newPage();
  p.errors = [];
  p.on('pageerror', (e) => p.errors.push(e.message));
  await p.goto(`${URL_}/`);
  await p.click('#settings-toggle');
  await p.fill('#api-key', KEY);
  await p.locator('#api-key').dispatchEvent('change');
  await p.fill('#set-max_tokens', '4');
  await p.click('#settings-toggle');
  await sendMessage(p, 'Hello');
  assert.match(await p.locator('#storage-note').textContent(), /did not keep the conversation/);
  assert.equal(await p.locator('#chat-list li').count(), 1, 'listed for this page all the same');
  assert.deepEqual(p.errors, []);
  await context.close();
});

test('stop ends a reply that would run on', async () => {
  await setSetting(page, 'max_tokens', 0); // no limit: until the context is full
  await page.fill('#input', 'Tell me everything.');
  await page.click('#send');
  const last = page.locator('.msg.assistant').last();
  await page.waitForFunction(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    return m && m.querySelector('.body').textContent.length > 10;
  });
  await page.click('#stop');
  await last.and(page.locator('[data-done=true]')).waitFor();
  assert.match(await last.locator('.stats').textContent(), /stopped/);
  assert.equal(await page.locator('#stop').isHidden(), true);
  assert.equal(await page.locator('#send').isEnabled(), true);
  await page.close();
});

test('keyboard only: send, open a token\'s inspector, close it', async () => {
  const p = await openPage();
  await setSetting(p, 'max_tokens', 12);
  await p.locator('body').focus();
  for (let i = 0; i < 30 && (await p.evaluate(() => document.activeElement.id)) !== 'input'; i++) await p.keyboard.press('Tab');
  assert.equal(await p.evaluate(() => document.activeElement.id), 'input');
  await sendMessage(p, 'Hello there', { keyboard: true });
  // Tab to the reply's Tokens button, Enter; Tab to the first token, Enter
  const tabTo = async (sel) => {
    for (let i = 0; i < 40; i++) {
      if (await p.evaluate((s) => document.activeElement.matches(s), sel)) return;
      await p.keyboard.press('Tab');
    }
    assert.fail(`Tab never reached ${sel}`);
  };
  await tabTo('.show-tokens');
  await p.keyboard.press('Enter');
  await tabTo('.tok');
  await p.keyboard.press('Enter');
  await p.locator('#inspector:not([hidden])').waitFor();
  assert.ok(await p.evaluate(() => document.getElementById('inspector').contains(document.activeElement)));
  await p.keyboard.press('Tab');
  const visible = await p.evaluate(() => getComputedStyle(document.activeElement).outlineStyle !== 'none');
  assert.ok(visible, 'focus is visible');
  await p.keyboard.press('Escape');
  assert.equal(await p.locator('#inspector').isHidden(), true);
  assert.ok(await p.evaluate(() => document.activeElement.classList.contains('tok')), 'focus back on the token');
  await p.close();
});

test('a phone\'s width: nothing wider than the screen, the inspector usable', async () => {
  const p = await openPage({ width: 390, height: 844 });
  await setSetting(p, 'max_tokens', 16);
  const { message } = await sendMessage(p, 'Hi');
  assert.ok(await p.evaluate(() => document.documentElement.scrollWidth <= 390));
  await p.screenshot({ path: `${SHOTS}/phone-chat.png` });
  await message.locator('.show-tokens').click();
  await message.locator('.tok').first().click();
  await p.locator('#inspector:not([hidden])').waitFor();
  const box = await p.locator('#inspector').boundingBox();
  assert.ok(box.width <= 390 && box.x >= 0);
  assert.ok(await p.locator('#sl-temp').isVisible());
  assert.ok(await p.evaluate(() => document.documentElement.scrollWidth <= 390));
  await p.screenshot({ path: `${SHOTS}/phone-inspector.png` });
  await p.close();
});

// A page on another origin that calls the API with fetch (a POST with the key: a preflight).
function originServer(port) {
  const html = `<!doctype html><title>other origin</title><script>
    window.callApi = async () => {
      try {
        const r = await fetch(${JSON.stringify(URL_)} + '/v1/completions', { method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ${KEY}' },
          body: JSON.stringify({ prompt: 'Hello', max_tokens: 2 }) });
        return 'status ' + r.status + ' ' + (await r.json()).object;
      } catch (e) { return 'failed: ' + e.message; }
    };</script>`;
  const srv = http.createServer((req, res) => { res.writeHead(200, { 'Content-Type': 'text/html' }); res.end(html); });
  return new Promise((resolve) => srv.listen(port, '127.0.0.1', () => resolve(srv)));
}

test('CORS: a page on the origin --cors names may call the API, a page on another may not', async () => {
  const allowed = await originServer(CORS_PORT);
  const other = await originServer(0);
  try {
    const p = await browser.newPage();
    await p.goto(`http://127.0.0.1:${CORS_PORT}/`);
    assert.equal(await p.evaluate(() => window.callApi()), 'status 200 text_completion');
    await p.goto(`http://127.0.0.1:${other.address().port}/`);
    assert.match(await p.evaluate(() => window.callApi()), /^failed: /);
    await p.close();
  } finally {
    allowed.close();
    other.close();
  }
});

// The server's stream of a reasoning model's reply (its deltas as chat_formats.sh checks them),
// given to the page's fetch event by event with a pause between them, as a server streams.
function slowStream(events) {
  const real = window.fetch;
  window.sentBodies = [];
  window.fetch = async (url, opts) => {
    if (!String(url).endsWith('/v1/chat/completions')) return real(url, opts);
    window.sentBodies.push(JSON.parse(opts.body));
    const enc = new TextEncoder();
    const body = new ReadableStream({
      async start(c) {
        for (const e of events) { c.enqueue(enc.encode(e)); await new Promise((r) => setTimeout(r, 120)); }
        c.close();
      },
    });
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  };
}

// The real Qwen3 and gpt-oss templates served: the page's request is given a grammar on its way (the
// synthetic model writes the family's reasoning markers, then an answer), the server splits the reply
for (const [name, base, text] of [
  ['Qwen3', process.env.NUCLEUS_URL_QWEN3, '<think>\nTwo and two make four.\n</think>\n\nIt is four.'],
  ['gpt-oss', process.env.NUCLEUS_URL_HARMONY,
   '<|channel|>analysis<|message|>Two and two make four.<|end|><|start|>assistant<|channel|>final<|message|>It is four.'],
]) {
  test(`${name}'s template served: its reasoning in the thinking block, its answer in the reply`, async () => {
    const p = await openPage(undefined, null, base);
    await p.route('**/v1/chat/completions', (route) => {
      const body = JSON.parse(route.request().postData());
      route.continue({ postData: JSON.stringify({ ...body, grammar: `root ::= ${JSON.stringify(text)}`, max_tokens: 256 }) });
    });
    const { message } = await sendMessage(p, 'What is two and two?');
    assert.equal(await message.locator('.thinking').isVisible(), true);
    assert.equal(await message.locator('.thinking-body').textContent(), 'Two and two make four.');
    assert.equal((await message.locator('.body').textContent()).trim(), 'It is four.');
    assert.deepEqual(p.errors, []);
    await p.context().close();
  });
}

test('a reply\'s reasoning (reasoning_content) shows in a collapsible thinking block, streamed, and goes back', async () => {
  const deltas = [{ role: 'assistant' }, { reasoning_content: 'Two and two' }, { reasoning_content: ' make four.' },
                  { content: 'It is ' }, { content: '**four**.' }];
  const events = deltas.map((d, i) => `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 0,
    model: 'm', choices: [{ index: 0, delta: d, finish_reason: i === deltas.length - 1 ? 'stop' : null }] })}\n\n`);
  events.push('data: [DONE]\n\n');
  const p = await openPage(undefined, { content: `(${slowStream})(${JSON.stringify(events)})` });
  // the block as the deltas arrive: open with the reasoning alone, then the answer under it
  const seen = p.evaluate(() => new Promise((resolve) => {
    const states = [];
    const obs = new MutationObserver(() => {
      const m = [...document.querySelectorAll('.msg.assistant')].pop();
      const th = m?.querySelector('.thinking');
      if (!th) return;
      states.push({ hidden: th.hidden, open: th.open, thinking: th.querySelector('.thinking-body').textContent,
                    body: m.querySelector('.body').textContent });
      if (m.dataset.done === 'true') { obs.disconnect(); resolve(states); }
    });
    obs.observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true, attributes: true });
  }));
  const send = async (text) => {
    const n = await p.locator('.msg.assistant').count();
    await p.fill('#input', text);
    await p.click('#send');
    const m = p.locator('.msg.assistant').nth(n);
    await m.and(p.locator('[data-done=true]')).waitFor();
    return m;
  };
  const message = await send('What is two and two?');
  const states = await seen;
  assert.ok(states.some((s) => !s.hidden && s.open && s.thinking === 'Two and two' && !s.body),
            `the reasoning streamed alone first, open: ${JSON.stringify(states)}`);
  assert.ok(states.some((s) => s.thinking === 'Two and two make four.' && s.body.trim() === 'It is'),
            `then the answer under it: ${JSON.stringify(states)}`);
  const th = message.locator('.thinking');
  assert.equal(await th.isVisible(), true);
  assert.equal(await th.evaluate((e) => e.open), false, 'collapsed once the answer came');
  assert.equal(await message.locator('.thinking-body').textContent(), 'Two and two make four.');
  assert.equal(await message.locator('.body strong').textContent(), 'four');
  assert.ok(!(await message.locator('.body').textContent()).includes('Two and two'));
  await th.locator('summary').click();
  assert.equal(await th.evaluate((e) => e.open), true);
  assert.equal(await message.locator('.thinking-body').isVisible(), true);
  // Copy takes the answer alone; the next turn gives the reasoning back as reasoning_content
  await message.locator('.copy').click();
  assert.equal(await p.evaluate(() => navigator.clipboard.readText()), 'It is **four**.');
  await send('And three and three?');
  const bodies = await p.evaluate(() => window.sentBodies);
  assert.deepEqual(bodies[1].messages.find((m) => m.role === 'assistant'),
                   { role: 'assistant', content: 'It is **four**.', reasoning_content: 'Two and two make four.' });
  assert.deepEqual(p.errors, []);
  // kept in the browser: after a reload the block is there, collapsed
  await p.reload();
  const again = p.locator('.msg.assistant').first();
  await again.waitFor();
  assert.equal(await again.locator('.thinking-body').textContent(), 'Two and two make four.');
  assert.equal(await again.locator('.thinking').evaluate((e) => e.open), false);
  await p.close();
});
