// End-to-end tests of `nucleus serve` through the official OpenAI client (and plain fetch where
// the client hides what is checked). Started by tests/e2e/server.sh, which passes:
//   NUCLEUS_URL       the server under test (stories260K, --parallel 8, --max-queue 4, --api-key)
//   NUCLEUS_KEY       its API key
//   NUCLEUS_CHAT_URL  a second server on a synthetic Qwen2.5 model (byte-level BPE, the Qwen2 chat template)
// Tests run one after the other: several of them measure the server's state (slots, queue).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const BASE = process.env.NUCLEUS_URL;
const KEY = process.env.NUCLEUS_KEY;
const CHAT_BASE = process.env.NUCLEUS_CHAT_URL;
const PROMPT = 'Once upon a time';

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120_000 });
const chatClient = new OpenAI({ baseURL: `${CHAT_BASE}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const MODEL = 'stories260K';

async function raw(path, { method = 'POST', body, key = KEY, base = BASE, headers = {}, signal } = {}) {
  const h = { ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  if (body !== undefined && typeof body !== 'string') {
    body = JSON.stringify(body);
    h['content-type'] = 'application/json';
  }
  return fetch(`${base}${path}`, { method, body, headers: h, signal });
}

async function metric(name, base = BASE) {
  const res = await raw('/metrics', { method: 'GET', base });
  const text = await res.text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  assert.ok(line, `metric ${name} missing`);
  return Number(line.split(' ')[1]);
}

async function until(cond, ms = 5000) {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

// Stream a completion (or chat) and gather the text of every choice, finish reasons and usage.
async function collect(stream, chat) {
  const text = {}, finish = {}, roles = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const piece = chat ? c.delta?.content ?? '' : c.text;
      text[c.index] = (text[c.index] ?? '') + piece;
      if (chat && c.delta?.role) roles[c.index] = c.delta.role;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks, roles };
}

function completion(extra = {}) {
  return client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, seed: 1, ...extra });
}

test('health and models', async () => {
  const res = await raw('/health', { method: 'GET', key: null });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: 'ok' });
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, MODEL);
  assert.equal(models.data[0].object, 'model');
});

test('completion, not streamed', async () => {
  const r = await completion({ max_tokens: 16, ignore_eos: true });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].logprobs, null);
  assert.equal(r.usage.completion_tokens, 16);
  assert.ok(r.usage.prompt_tokens >= 4);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 16);
});

test('completion streamed: same text as not streamed, usage last', async () => {
  const whole = await completion({ seed: 11, max_tokens: 30 });
  const s = await collect(
    await completion({ seed: 11, max_tokens: 30, stream: true, stream_options: { include_usage: true } }),
    false,
  );
  assert.equal(s.text[0], whole.choices[0].text);
  assert.equal(s.finish[0], whole.choices[0].finish_reason);
  assert.deepEqual(s.usage, whole.usage);
  assert.ok(s.chunks >= 3);
});

test('chat, not streamed and streamed (ChatML fallback on a model without a template)', async () => {
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 20, seed: 3 };
  const r = await client.chat.completions.create(params);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  const s = await collect(await client.chat.completions.create({ ...params, stream: true }), true);
  assert.equal(s.roles[0], 'assistant');
  assert.equal(s.text[0], r.choices[0].message.content);
  assert.equal(s.finish[0], r.choices[0].finish_reason);
  assert.equal(s.usage, null);
});

test('chat content as an array of text parts', async () => {
  const a = await client.chat.completions.create({
    model: MODEL, seed: 9, max_tokens: 12,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: 'there' }] }],
  });
  const b = await client.chat.completions.create({
    model: MODEL, seed: 9, max_tokens: 12,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi\nthere' }],
  });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
});

test('n > 1: distinct choices, each reproducible', async () => {
  const r = await completion({ n: 3, seed: 5, max_tokens: 20, ignore_eos: true });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.ok(new Set(r.choices.map((c) => c.text)).size >= 2, 'choices should differ');
  assert.equal(r.usage.completion_tokens, 60);
  const s = await collect(await completion({ n: 3, seed: 5, max_tokens: 20, ignore_eos: true, stream: true }), false);
  for (const c of r.choices) assert.equal(s.text[c.index], c.text);
  // choice i draws with seed + i: choice 1 of seed 5 is choice 0 of seed 6
  const single = await completion({ seed: 6, max_tokens: 20, ignore_eos: true });
  assert.equal(single.choices[0].text, r.choices[1].text);
});

test('prompt as an array of prompts and as token ids', async () => {
  const r = await completion({ prompt: [PROMPT, 'The dog'], n: 2, max_tokens: 8, ignore_eos: true });
  assert.equal(r.choices.length, 4);
  const first = await completion({ max_tokens: 8, ignore_eos: true });
  assert.equal(r.choices[0].text, first.choices[0].text);
  const tok = await (await raw('/tokenize', { body: { content: PROMPT, add_special: true } })).json();
  const byIds = await completion({ prompt: tok.tokens, max_tokens: 8, ignore_eos: true });
  assert.equal(byIds.choices[0].text, first.choices[0].text);
});

test('stop strings end the text before them', async () => {
  const base = await completion({ seed: 21, max_tokens: 60, ignore_eos: true });
  const text = base.choices[0].text;
  assert.ok(text.length > 20, text);
  const stop = text.slice(12, 15);
  const cut = text.indexOf(stop);
  const r = await completion({ seed: 21, max_tokens: 60, ignore_eos: true, stop: [stop, 'zzzzqqq'] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.choices[0].text, text.slice(0, cut));
  const s = await collect(await completion({ seed: 21, max_tokens: 60, ignore_eos: true, stop, stream: true }), false);
  assert.equal(s.text[0], text.slice(0, cut));
  assert.equal(s.finish[0], 'stop');
});

test('logprobs, completions shape', async () => {
  const r = await completion({ logprobs: 3, max_tokens: 12, ignore_eos: true, seed: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 12);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  assert.equal(lp.token_logprobs.length, 12);
  assert.equal(lp.top_logprobs.length, 12);
  let offset = 0;
  for (let i = 0; i < 12; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    assert.ok(top.every((v) => v <= 0));
    assert.ok(Math.max(...top) >= lp.token_logprobs[i] - 1e-6);
    assert.equal(lp.text_offset[i], offset);
    offset += lp.tokens[i].length;
  }
});

test('logprobs, chat shape and streamed', async () => {
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Hello' }], logprobs: true, top_logprobs: 2, max_tokens: 10, seed: 4, ignore_eos: true };
  const r = await client.chat.completions.create(params);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 10);
  assert.equal(content.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
    assert.equal(e.top_logprobs.length, 2);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const tokens = [];
  for await (const chunk of stream) for (const c of chunk.choices) for (const e of c.logprobs?.content ?? []) tokens.push(e.token);
  assert.deepEqual(tokens, content.map((e) => e.token));
});

test('seed: same seed same text, other seeds differ, temperature 0 ignores the seed', async () => {
  const a = await completion({ seed: 77, max_tokens: 30, ignore_eos: true });
  const b = await completion({ seed: 77, max_tokens: 30, ignore_eos: true });
  assert.equal(a.choices[0].text, b.choices[0].text);
  const others = await Promise.all([78, 79, 80].map((seed) => completion({ seed, max_tokens: 30, ignore_eos: true })));
  assert.ok(others.some((o) => o.choices[0].text !== a.choices[0].text));
  const g1 = await completion({ seed: 1, temperature: 0, max_tokens: 20 });
  const g2 = await completion({ seed: 2, temperature: 0, max_tokens: 20 });
  assert.equal(g1.choices[0].text, g2.choices[0].text);
});

test('logit_bias steers the draw; -100 bans a token', async () => {
  const [id] = (await (await raw('/tokenize', { body: { content: ' dog' } })).json()).tokens.slice(-1);
  const piece = (await (await raw('/detokenize', { body: { tokens: [id] } })).json()).content;
  const forced = await completion({ max_tokens: 6, ignore_eos: true, logit_bias: { [id]: 100 }, logprobs: 0 });
  assert.deepEqual(forced.choices[0].logprobs.tokens, Array(6).fill(piece));
  const free = await completion({ seed: 31, max_tokens: 30, ignore_eos: true, temperature: 0 });
  const text = free.choices[0].text;
  const [first] = (await (await raw('/tokenize', { body: { content: text } })).json()).tokens;
  const banned = await completion({ seed: 31, max_tokens: 30, ignore_eos: true, temperature: 0, logit_bias: { [first]: -100 } });
  assert.notEqual(banned.choices[0].text, text);
});

test('epsilon_cutoff, eta_cutoff, dynatemp_range / dynatemp_exponent', async () => {
  const greedy = await completion({ temperature: 0, max_tokens: 20, ignore_eos: true });
  // nothing but the most likely token reaches a cutoff of .999: greedy, whatever the seed
  const eps = await completion({ seed: 5, epsilon_cutoff: 0.999, max_tokens: 20, ignore_eos: true });
  assert.equal(eps.choices[0].text, greedy.choices[0].text);
  const params = { seed: 6, eta_cutoff: 0.02, dynatemp_range: 0.5, dynatemp_exponent: 2, max_tokens: 20, ignore_eos: true };
  const a = await completion(params);
  const b = await completion(params);
  assert.equal(a.choices[0].text, b.choices[0].text);
  await expectError(completion({ epsilon_cutoff: 1 }), 400, 'epsilon_cutoff');
  await expectError(completion({ eta_cutoff: -0.1 }), 400, 'eta_cutoff');
  await expectError(completion({ dynatemp_range: -1 }), 400, 'dynatemp_range');
});

test('beam search (use_beam_search, best_of, length_penalty)', async () => {
  const params = { max_tokens: 12, use_beam_search: true, best_of: 3, n: 2, length_penalty: 1.0 };
  const a = await completion(params);
  const b = await completion({ ...params, seed: 999 });
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text)); // no randomness
  assert.notEqual(a.choices[0].text, a.choices[1].text);
  await expectError(completion({ ...params, stream: true }), 400, 'stream');
  await expectError(completion({ best_of: 3 }), 400, 'best_of');
  // early_stopping "never" and diverse beam search (num_beam_groups, diversity_penalty)
  const ends = { prompt: 'Once', max_tokens: 30, use_beam_search: true, best_of: 2, length_penalty: 3, logit_bias: { 2: 23 } };
  const heuristic = await completion(ends);
  const never = await completion({ ...ends, early_stopping: 'never' });
  assert.equal(heuristic.choices[0].finish_reason, 'stop');
  assert.equal(never.choices[0].finish_reason, 'length');
  const diverse = await completion({ prompt: 'He saw a big', max_tokens: 4, use_beam_search: true, best_of: 2, n: 2,
    num_beam_groups: 2, diversity_penalty: 100 });
  const first = diverse.choices.map((c) => c.text.trim().split(' ')[0]);
  assert.notEqual(first[0], first[1]);
  await expectError(completion({ ...params, num_beam_groups: 2 }), 400, 'num_beam_groups');
  await expectError(completion({ ...params, early_stopping: 'sometimes' }), 400, 'early_stopping');
});

test('contrastive search (penalty_alpha with top_k), streamed or not', async () => {
  const greedy = await completion({ temperature: 0, max_tokens: 20, ignore_eos: true });
  const zero = await completion({ penalty_alpha: 0, top_k: 4, max_tokens: 20, ignore_eos: true });
  assert.equal(zero.choices[0].text, greedy.choices[0].text); // alpha 0 is greedy
  const params = { penalty_alpha: 0.6, top_k: 4, max_tokens: 16, ignore_eos: true };
  const a = await completion(params);
  assert.notEqual(a.choices[0].text, greedy.choices[0].text.slice(0, a.choices[0].text.length));
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 16);
  const streamed = await collect(await completion({ ...params, stream: true }), false);
  assert.equal(streamed.text[0], a.choices[0].text);
  await expectError(completion({ penalty_alpha: 0.6 }), 400, 'top_k');
  await expectError(completion({ penalty_alpha: 0.6, top_k: 4, n: 2 }), 400, 'n');
});

test('a long prompt (several prefill chunks) gives the same tokens alone and among others', async () => {
  const prompt = 'Once upon a time there was a dog named Max. '.repeat(50);
  const probe = { prompt, seed: 42, max_tokens: 24, ignore_eos: true };
  const alone = await completion(probe);
  assert.ok(alone.usage.prompt_tokens > 512, `${alone.usage.prompt_tokens} prompt tokens`);
  const crowd = [0, 1, 2].map((i) => completion({ prompt: `${prompt} ${i}`, seed: i, max_tokens: 40, ignore_eos: true }));
  const [together] = await Promise.all([completion(probe), ...crowd]);
  assert.equal(together.choices[0].text, alone.choices[0].text);
});

test('hostile bodies get 400s and the server goes on', async () => {
  const bodies = ['', 'null', '[]', '{"prompt":', '{"prompt":"x"}}', '{"prompt":"\\ud800"}', '\u0000\u0001',
    '{"prompt":"x","max_tokens":1e400}', '{"prompt":"x","n":-0}', `{"a":${'['.repeat(5000)}`,
    '{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}', '{"prompt":[[1,2],[3,"x"]]}',
    '{"tokens":[1,2,3.5]}', '{"content":["x"]}', '{"prompt":"x","logit_bias":{"1e3":1}}'];
  for (const path of ['/v1/completions', '/v1/chat/completions', '/tokenize', '/detokenize']) {
    for (const body of bodies) {
      const res = await raw(path, { body, headers: { 'content-type': 'application/json' } });
      const json = await res.json();
      if (res.status === 200) continue; // e.g. '{"prompt":"\ud800"}' is a valid completion request
      assert.equal(res.status, 400, `${path} ${body.slice(0, 40)}`);
      assert.equal(json.error.type, 'invalid_request_error');
    }
  }
  const bad = Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0xc3, 0x22, 0x7d]);
  const res = await raw('/v1/completions', { body: bad, headers: { 'content-type': 'application/json' } });
  assert.ok([200, 400].includes(res.status));
  await res.json(); // whatever it is, it is valid JSON
  assert.equal((await raw('/health', { method: 'GET' })).status, 200);
});

async function expectError(promise, status, param) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, status, e.message);
    if (param !== undefined) assert.equal(e.error?.param ?? e.param, param);
    return true;
  });
}

test('400 names the invalid field', async () => {
  await expectError(completion({ temperature: 5 }), 400, 'temperature');
  await expectError(completion({ top_p: -1 }), 400, 'top_p');
  await expectError(completion({ n: 99 }), 400, 'n');
  await assert.rejects(completion({ n: 99 }), /--parallel 8/); // names the flag that would let it in
  await expectError(completion({ max_tokens: 0 }), 400, 'max_tokens');
  await expectError(completion({ logit_bias: { 99999: 1 } }), 400, 'logit_bias');
  await expectError(completion({ stop: [1, 2] }), 400, 'stop');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [] }), 400, 'messages');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'robot', content: 'x' }] }), 400, 'messages[0].role');
  await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], top_logprobs: 3 }), 400, 'top_logprobs');
  const long = 'Once upon a time there was a dog. '.repeat(600);
  await expectError(completion({ prompt: long }), 400, 'prompt');
  const res = await raw('/v1/completions', { body: '{"prompt": "x",' , headers: { 'content-type': 'application/json' } });
  assert.equal(res.status, 400);
  const body = await res.json();
  assert.equal(body.error.type, 'invalid_request_error');
  assert.ok('message' in body.error && 'param' in body.error && 'code' in body.error);
  assert.equal(body.error.param, null);
});

test('401 without the right API key', async () => {
  const bad = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await expectError(bad.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2 }), 401);
  const res = await raw('/v1/models', { method: 'GET', key: null });
  assert.equal(res.status, 401);
  assert.equal((await res.json()).error.code, 'invalid_api_key');
  assert.equal((await raw('/metrics', { method: 'GET', key: 'nope' })).status, 401);
  // an unknown path is not told apart from a known one without the key
  assert.equal((await raw('/v1/nothing', { method: 'GET', key: null })).status, 401);
});

test('404, 405, 413', async () => {
  const nf = await raw('/v1/nothing', { method: 'GET' });
  assert.equal(nf.status, 404);
  assert.equal((await nf.json()).error.type, 'invalid_request_error');
  const na = await raw('/v1/completions', { method: 'GET' });
  assert.equal(na.status, 405);
  assert.equal(na.headers.get('allow'), 'POST');
  await na.json();
  const big = JSON.stringify({ prompt: 'x'.repeat(5 << 20) });
  const tl = await raw('/v1/completions', { body: big, headers: { 'content-type': 'application/json' } });
  assert.equal(tl.status, 413);
  assert.equal((await tl.json()).error.code, 'request_too_large');
});

test('tokenize and detokenize', async () => {
  const t = await (await raw('/tokenize', { body: { content: PROMPT } })).json();
  assert.ok(Array.isArray(t.tokens) && t.tokens.length >= 4);
  const d = await (await raw('/detokenize', { body: { tokens: t.tokens } })).json();
  assert.equal(d.content.trim(), PROMPT);
  assert.equal((await raw('/detokenize', { body: { tokens: [1e9] } })).status, 400);
});

test('8 concurrent clients; the same seed gives the same tokens alone and among 7 others', async () => {
  const probe = { seed: 1234, max_tokens: 48, ignore_eos: true, logprobs: 1 };
  const alone = await completion(probe);
  const others = [];
  for (let i = 0; i < 7; i++) {
    const p = completion({ seed: 500 + i, max_tokens: 20 + 9 * i, ignore_eos: true, prompt: `Story ${i}: the cat`, stream: i % 2 === 0 })
      .then((r) => (r.choices ? r : collect(r, false)));
    others.push(p);
    if (i === 3) await new Promise((r) => setTimeout(r, 30)); // some are mid-decode when the probe joins
  }
  const together = completion(probe);
  const results = await Promise.all([together, ...others]);
  assert.equal(results[0].choices[0].text, alone.choices[0].text);
  assert.deepEqual(results[0].choices[0].logprobs.tokens, alone.choices[0].logprobs.tokens);
  for (const r of results.slice(1)) assert.ok(r.choices ? r.choices[0].text.length > 0 : r.text[0].length > 0);
  assert.ok(await until(async () => (await metric('nucleus_slots_busy')) === 0));
});

test('503 with Retry-After past the queue', async () => {
  const ctl = new AbortController();
  const body = { prompt: PROMPT, max_tokens: 3000, ignore_eos: true, stream: true };
  const responses = await Promise.all(
    Array.from({ length: 16 }, () => raw('/v1/completions', { body, signal: ctl.signal }).catch((e) => e)),
  );
  const statuses = responses.map((r) => r.status);
  const busy = responses.filter((r) => r.status === 503);
  assert.equal(statuses.filter((s) => s === 200).length, 12, statuses.join(','));
  assert.equal(busy.length, 4);
  assert.equal(busy[0].headers.get('retry-after'), '1');
  assert.equal((await busy[0].json()).error.type, 'server_error');
  ctl.abort();
  assert.ok(await until(async () => (await metric('nucleus_slots_busy')) === 0 && (await metric('nucleus_queue_length')) === 0),
    'slots should be freed once the clients are gone');
});

test('a client that disconnects frees its slot at once', async () => {
  for (const stream of [true, false]) {
    const ctl = new AbortController();
    const res = raw('/v1/completions', { body: { prompt: PROMPT, max_tokens: 3000, ignore_eos: true, stream }, signal: ctl.signal });
    assert.ok(await until(async () => (await metric('nucleus_slots_busy')) === 1));
    if (stream) {
      const reader = (await res).body.getReader();
      await reader.read();
    }
    ctl.abort();
    await res.catch(() => {});
    // 3000 tokens take seconds: the slot must be back well before
    assert.ok(await until(async () => (await metric('nucleus_slots_busy')) === 0, 1000), `slot not freed (stream ${stream})`);
  }
  const t0 = Date.now();
  const r = await completion({ max_tokens: 8 });
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(Date.now() - t0 < 5000);
});

// 12 connections fill every slot and queue place (--parallel 8 --max-queue 4): a client asking again
// right after its reply must be admitted though the engine has not yet freed its finished slot
test('load: 200 requests over 12 connections, none refused, then the server still answers', async () => {
  let next = 0, ok = 0;
  async function worker(w) {
    while (next < 200) {
      const i = next++;
      const r = i % 4 === 3
        ? await collect(await completion({ seed: i, max_tokens: 6, stream: true }), false)
        : await completion({ seed: i, max_tokens: 6, prompt: `${PROMPT} ${w}` });
      if (r.choices ? r.choices.length === 1 : r.text[0] !== undefined) ok++;
    }
  }
  await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));
  assert.equal(ok, 200);
  assert.equal((await raw('/health', { method: 'GET' })).status, 200);
  const r = await completion({ max_tokens: 4 });
  assert.equal(r.choices.length, 1);
});

test('metrics', async () => {
  const text = await (await raw('/metrics', { method: 'GET' })).text();
  for (const name of ['nucleus_requests_total{endpoint="/v1/completions"}', 'nucleus_prompt_tokens_total',
    'nucleus_generated_tokens_total', 'nucleus_queue_length', 'nucleus_slots_busy',
    'nucleus_time_to_first_token_seconds_bucket{le="+Inf"}', 'nucleus_time_per_output_token_seconds_count'])
    assert.ok(text.includes(name), name);
  assert.ok((await metric('nucleus_generated_tokens_total')) > 1000);
  assert.ok((await metric('nucleus_time_to_first_token_seconds_count')) > 200);
});

test('chat template of the model (Qwen2 ChatML from the GGUF) and byte-level BPE streaming', async () => {
  const messages = [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: 'Héllo wörld ✓' }];
  const r = await chatClient.chat.completions.create({ model: 'x', messages, max_tokens: 16, seed: 8, ignore_eos: true });
  const rendered = '<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nHéllo wörld ✓<|im_end|>\n<|im_start|>assistant\n';
  const tokens = async (content) =>
    (await (await raw('/tokenize', { base: CHAT_BASE, key: null, body: { content } })).json()).tokens;
  assert.equal(r.usage.prompt_tokens, (await tokens(rendered)).length);
  assert.equal(r.usage.completion_tokens, 16);
  const s = await collect(await chatClient.chat.completions.create({ model: 'x', messages, max_tokens: 16, seed: 8, ignore_eos: true, stream: true }), true);
  assert.equal(s.text[0], r.choices[0].message.content);
  // without a system message the template adds its own, which ChatML would not
  const u = await chatClient.chat.completions.create({ model: 'x', messages: messages.slice(1), max_tokens: 1 });
  const withDefault = '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHéllo wörld ✓<|im_end|>\n<|im_start|>assistant\n';
  assert.equal(u.usage.prompt_tokens, (await tokens(withDefault)).length);
});
