// The APIs agents speak, through their official clients, against one router (tests/e2e/apis.sh):
// OpenAI's chat, completions and Responses (`openai`), Anthropic's Messages (`@anthropic-ai/sdk`),
// and llama.cpp's /completion, /infill, /props and /slots (fetch). The router serves:
//   stories  stories260K (no chat template: ChatML)
//   qwen3    qwen2's random weights with Qwen3's template (Hermes calls)
//   qwen35   llama3's random weights with Qwen3.5's template, whose prompt opens the reasoning
//            (thinking blocks; llama3's greedy text is not blank, so the reasoning is not either)
//   llama3   llama3's random weights
//   coder    stories260K with fill-in-the-middle tokens (tests/e2e/fim_model.py)
//   NUCLEUS_URL  the router; NUCLEUS_KEY  its API key
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const BASE = process.env.NUCLEUS_URL;
const KEY = process.env.NUCLEUS_KEY;
const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120_000 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 120_000 });

async function post(path, body, headers = {}) {
  const r = await fetch(`${BASE}${path}`, {
    method: 'POST', body: JSON.stringify(body),
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers },
  });
  return { status: r.status, json: await r.json() };
}

async function get(path) {
  const r = await fetch(`${BASE}${path}`, { headers: { authorization: `Bearer ${KEY}` } });
  return { status: r.status, json: await r.json() };
}

const WEATHER_SCHEMA = {
  type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'],
  additionalProperties: false,
};

// ---- OpenAI ---------------------------------------------------------------------------------

test('openai: chat and completions reach the model they name', async () => {
  const c = await openai.completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 8, seed: 3 });
  assert.equal(c.model, 'stories');
  assert.ok(c.choices[0].text.length > 0);
  const chat = await openai.chat.completions.create({
    model: 'llama3', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, seed: 3,
  });
  assert.equal(chat.model, 'llama3');
  assert.equal(chat.choices[0].message.role, 'assistant');
  await assert.rejects(openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.code === 'model_not_found' && /stories/.test(e.message));
});

test('openai: responses.create whole and streamed say the same', async () => {
  const req = { model: 'stories', instructions: 'Tell a story.', input: 'Once upon a time', temperature: 0,
                max_output_tokens: 12 };
  const whole = await openai.responses.create(req);
  assert.equal(whole.object, 'response');
  assert.equal(whole.model, 'stories');
  assert.equal(whole.status, 'incomplete');
  assert.deepEqual(whole.incomplete_details, { reason: 'max_output_tokens' });
  assert.ok(whole.output_text.length > 0);
  assert.equal(whole.usage.output_tokens, 12);
  assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + 12);
  assert.equal(whole.instructions, 'Tell a story.');
  const msg = whole.output.find((o) => o.type === 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');

  // the raw events: created first, then items, then the end, numbered in order
  const events = [];
  let text = '';
  for await (const ev of await openai.responses.create({ ...req, stream: true })) {
    events.push(ev);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
  }
  assert.equal(text, whole.output_text);
  assert.deepEqual(events.slice(0, 2).map((e) => e.type), ['response.created', 'response.in_progress']);
  assert.equal(events.at(-1).type, 'response.incomplete');
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  for (const t of ['response.output_item.added', 'response.content_part.added', 'response.output_text.done',
    'response.content_part.done', 'response.output_item.done'])
    assert.ok(events.some((e) => e.type === t), t);
  assert.deepEqual(events.at(-1).response.output.find((o) => o.type === 'message').content[0].text, whole.output_text);

  // the SDK's stream helper builds the same Response from the events
  const stream = openai.responses.stream({ ...req, max_output_tokens: 8 });
  const final = await stream.finalResponse();
  const again = await openai.responses.create({ ...req, max_output_tokens: 8 });
  assert.equal(final.output.find((o) => o.type === 'message').content[0].text, again.output_text);
});

test('openai: a Responses tool round trip, whole and streamed', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA }];
  const input = [{ role: 'user', content: 'What is the weather in Oslo?' }];
  const r = await openai.responses.create({ model: 'qwen3', input, tools, tool_choice: 'required', temperature: 0,
                                            max_output_tokens: 200 });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  // the call and its output go back as items
  const next = await openai.responses.create({
    model: 'qwen3', tools, max_output_tokens: 8, temperature: 0,
    input: [...input, call, { type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' }],
  });
  assert.ok(['completed', 'incomplete'].includes(next.status));
  // streamed: the call's arguments come as deltas, then done, and end as the whole one's
  const events = [];
  for await (const ev of await openai.responses.create({ model: 'qwen3', input, tools, tool_choice: 'required',
                                                        temperature: 0, max_output_tokens: 200, stream: true }))
    events.push(ev);
  const done = events.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(done.arguments, call.arguments);
  assert.equal(done.name, 'get_weather');
  const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  assert.equal(deltas, call.arguments);
  // and the chat API's round trip on the same router
  const chat = await openai.chat.completions.create({
    model: 'qwen3', messages: input, tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER_SCHEMA } }],
    tool_choice: 'required', temperature: 0, max_tokens: 200,
  });
  const tc = chat.choices[0].message.tool_calls[0];
  assert.equal(tc.function.name, 'get_weather');
  const back = await openai.chat.completions.create({
    model: 'qwen3', max_tokens: 4, messages: [...input, chat.choices[0].message,
      { role: 'tool', tool_call_id: tc.id, content: 'clear' }],
  });
  assert.equal(back.choices.length, 1);
});

test('openai: Responses reasoning items and refusals', async () => {
  const r = await openai.responses.create({ model: 'qwen35', input: 'Think.', max_output_tokens: 24, temperature: 0 });
  assert.equal(r.output[0].type, 'reasoning');
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.ok(r.output[0].content[0].text.length > 0);
  // an earlier turn's reasoning goes back with it
  const next = await openai.responses.create({
    model: 'qwen35', max_output_tokens: 4,
    input: [{ role: 'user', content: 'Think.' }, r.output[0],
      { role: 'assistant', content: [{ type: 'output_text', text: 'Done.' }] }, { role: 'user', content: 'Again.' }],
  });
  assert.equal(next.object, 'response');
  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', previous_response_id: 'resp_1' }),
    (e) => e.status === 400 && e.param === 'previous_response_id' && /stateless/.test(e.message));
  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', store: true }),
    (e) => e.status === 400 && e.param === 'store');
  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', tools: [{ type: 'web_search' }] }),
    (e) => e.status === 400 && e.param === 'tools[0]');
  await assert.rejects(openai.responses.create({ model: 'stories', input: 'x', frobnicate: 1 }),
    (e) => e.status === 400 && e.param === 'frobnicate');
  // text.format json_schema holds the output to the schema
  const j = await openai.responses.create({
    model: 'stories', input: 'A city:', max_output_tokens: 40, temperature: 0,
    text: { format: { type: 'json_schema', name: 'city', schema: { type: 'object', properties: { name: { type: 'string', maxLength: 8 } }, required: ['name'] } } },
  });
  assert.equal(typeof JSON.parse(j.output_text).name, 'string');
});

// ---- Anthropic ------------------------------------------------------------------------------

test('anthropic: messages.create whole and streamed, usage and countTokens', async () => {
  const req = { model: 'stories', max_tokens: 16, temperature: 0,
                system: [{ type: 'text', text: 'You tell stories.', cache_control: { type: 'ephemeral' } }],
                messages: [{ role: 'user', content: 'Once upon a time' }] };
  const whole = await anthropic.messages.create(req);
  assert.equal(whole.type, 'message');
  assert.equal(whole.role, 'assistant');
  assert.equal(whole.model, 'stories');
  assert.match(whole.id, /^msg_/);
  assert.equal(whole.content[0].type, 'text');
  assert.ok(['max_tokens', 'end_turn'].includes(whole.stop_reason));
  const count = await anthropic.messages.countTokens({ model: 'stories', system: req.system, messages: req.messages });
  assert.equal(count.input_tokens, whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
  assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 16);

  const stream = anthropic.messages.stream(req);
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.equal(text, whole.content[0].text);
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);

  // the raw events in Anthropic's order
  const types = [];
  for await (const ev of await anthropic.messages.create({ ...req, stream: true })) types.push(ev.type);
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  assert.ok(types.includes('content_block_start') && types.includes('content_block_delta') && types.includes('content_block_stop'));

  // stop_sequences: the greedy text cut where one of its words starts
  const word = whole.content[0].text.trim().split(/\s+/).find((w, i) => i > 0 && w.length > 2);
  if (word) {
    const cut = await anthropic.messages.create({ ...req, stop_sequences: [word] });
    assert.equal(cut.stop_reason, 'stop_sequence');
    assert.equal(cut.stop_sequence, word);
    assert.equal(cut.content[0].text, whole.content[0].text.slice(0, whole.content[0].text.indexOf(word)));
  }
});

test('anthropic: a tool use round trip, whole and streamed', async () => {
  const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_SCHEMA }];
  const messages = [{ role: 'user', content: 'What is the weather in Oslo?' }];
  const r = await anthropic.messages.create({ model: 'qwen3', max_tokens: 200, temperature: 0, tools, messages,
                                             tool_choice: { type: 'tool', name: 'get_weather' } });
  assert.equal(r.stop_reason, 'tool_use');
  const use = r.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(r.content));
  assert.equal(use.name, 'get_weather');
  assert.equal(typeof use.input.city, 'string');
  const back = await anthropic.messages.create({
    model: 'qwen3', max_tokens: 8, tools, messages: [...messages, { role: 'assistant', content: r.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Clear, 21 degrees' }] }],
  });
  assert.equal(back.type, 'message');
  // streamed: the input arrives as JSON deltas the SDK assembles into the same object
  const final = await anthropic.messages.stream({ model: 'qwen3', max_tokens: 200, temperature: 0, tools, messages,
                                                  tool_choice: { type: 'any' } }).finalMessage();
  const streamed = final.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(streamed.input, use.input);
  assert.equal(final.stop_reason, 'tool_use');
});

test('anthropic: thinking blocks on a reasoning template', async () => {
  const req = { model: 'qwen35', max_tokens: 24, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
                messages: [{ role: 'user', content: 'Think about it.' }] };
  const r = await anthropic.messages.create(req);
  assert.equal(r.content[0].type, 'thinking');
  assert.ok(r.content[0].thinking.length > 0);
  assert.equal(typeof r.content[0].signature, 'string');
  let thinking = '';
  const stream = anthropic.messages.stream(req);
  stream.on('thinking', (t) => { thinking += t; });
  const final = await stream.finalMessage();
  assert.equal(final.content[0].type, 'thinking');
  assert.equal(final.content[0].thinking, thinking);
  assert.deepEqual(final.content, r.content); // greedy: the stream says what the whole Message said
  // the thinking block goes back in the next turn
  const next = await anthropic.messages.create({
    model: 'qwen35', max_tokens: 4,
    messages: [...req.messages, { role: 'assistant', content: final.content.filter((b) => b.type !== 'text' || b.text) },
      { role: 'user', content: 'And now?' }],
  });
  assert.equal(next.type, 'message');
});

test('anthropic: errors in Anthropic\'s shape, x-api-key', async () => {
  await assert.rejects(anthropic.messages.create({ model: 'stories', max_tokens: 4, messages: [{ role: 'user', content: 'x' }],
                                                   frobnicate: true }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.type === 'error' && e.error.error.type === 'invalid_request_error' &&
      /frobnicate/.test(e.error.error.message));
  await assert.rejects(anthropic.messages.create({ model: 'nope', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
  await assert.rejects(anthropic.messages.create({ model: 'stories', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && /max_tokens/.test(e.error.error.message));
  const wrong = new Anthropic({ baseURL: BASE, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.messages.create({ model: 'stories', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
  await assert.rejects(anthropic.messages.create({ model: 'stories', max_tokens: 4,
                                                   messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'x' } }] }] }),
    (e) => e.status === 400 && /image/.test(e.error.error.message));
  // the key as x-api-key, by hand
  const r = await fetch(`${BASE}/v1/messages/count_tokens`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'Hi' }] }) });
  assert.equal(r.status, 200);
});

// ---- llama.cpp's endpoints ------------------------------------------------------------------

test('llama.cpp: /completion whole and streamed, /props, /slots', async () => {
  const body = { model: 'stories', prompt: 'Once upon a time', n_predict: 10, seed: 7, return_tokens: true, n_probs: 2 };
  const whole = await post('/completion', body);
  assert.equal(whole.status, 200);
  const w = whole.json;
  assert.equal(w.stop, true);
  assert.equal(w.stop_type, 'limit');
  assert.equal(w.tokens.length, 10);
  assert.equal(w.tokens_predicted, 10);
  assert.equal(w.completion_probabilities.length, 10);
  assert.equal(w.completion_probabilities[0].top_logprobs.length, 2);
  assert.equal(w.generation_settings.temperature.toFixed(2), '0.80'); // llama.cpp's defaults
  assert.equal(w.generation_settings.top_k, 40);
  const r = await fetch(`${BASE}/completion`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ ...body, stream: true }) });
  const events = (await r.text()).split('\n\n').filter((x) => x.startsWith('data: ')).map((x) => JSON.parse(x.slice(6)));
  assert.equal(events.map((e) => e.content).join(''), w.content);
  assert.deepEqual(events.flatMap((e) => e.tokens ?? []), w.tokens);
  assert.ok(events.slice(0, -1).every((e) => e.stop === false));
  assert.equal(events.at(-1).stop, true);
  assert.equal(events.at(-1).stop_type, 'limit');
  // a stop word and response_fields
  const word = w.content.trim().split(/\s+/)[1];
  const cut = await post('/completion', { ...body, stop: [word], response_fields: ['content', 'stop_type', 'stopping_word', 'timings/predicted_n'] });
  assert.deepEqual(Object.keys(cut.json).sort(), ['content', 'stop_type', 'stopping_word', 'timings/predicted_n']);
  assert.equal(cut.json.stop_type, 'word');
  assert.equal(cut.json.stopping_word, word);
  assert.equal(cut.json.content, w.content.slice(0, w.content.indexOf(word)));
  // n_indent: a line less indented than it ends the reply before that line's text
  const ind = await post('/completion', { model: 'stories', prompt: 'x', n_indent: 2, n_predict: 30,
                                          grammar: 'root ::= "a\\n" "  b\\n" "c" [a-z]*' });
  assert.equal(ind.json.content, 'a\n  b\n');
  assert.equal(ind.json.stop_type, 'limit');
  const props = await get('/props?model=stories');
  assert.equal(props.status, 200);
  assert.equal(props.json.model, 'stories');
  assert.ok(props.json.default_generation_settings.n_ctx > 0);
  assert.equal(props.json.total_slots, 2);
  assert.match(props.json.model_path, /stories260K\.gguf$/);
  const slots = await get('/slots?model=stories');
  assert.equal(slots.json.length, 2);
  assert.ok(slots.json.every((s) => s.is_processing === false && typeof s.n_ctx === 'number'));
  const refused = await post('/completion', { model: 'stories', prompt: 'x', n_keep: 5 });
  assert.equal(refused.status, 400);
  assert.equal(refused.json.error.param, 'n_keep');
});

test('llama.cpp: /infill builds the fill-in-the-middle prompt from the model\'s tokens', async () => {
  const parts = { input_prefix: 'Once upon a time, there was', input_suffix: ' She was happy.', prompt: ' a' };
  const fim = await post('/infill', { model: 'coder', ...parts, n_predict: 6, temperature: 0, return_tokens: true });
  assert.equal(fim.status, 200, JSON.stringify(fim.json));
  // the same as /completion on the layout written out:
  // BOS FIM_REP "myproject\n" FIM_SEP "filename\n" FIM_PRE prefix prompt FIM_SUF suffix FIM_MID
  const tok = async (content, special = false) =>
    (await post('/tokenize', { model: 'coder', content, parse_special: special, add_special: false })).json.tokens;
  const bos = (await post('/tokenize', { model: 'coder', content: '', add_special: true })).json.tokens;
  const [pre, suf, mid, rep, sep] = await Promise.all(['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>', '<|repo_name|>',
    '<|file_sep|>'].map((m) => tok(m, true)));
  assert.ok([pre, suf, mid, rep, sep].every((t) => t.length === 1));
  const ids = [...bos, ...rep, ...await tok('myproject\n'), ...sep, ...await tok('filename\n'), ...pre,
    ...await tok(parts.input_prefix), ...await tok(parts.prompt), ...suf, ...await tok(parts.input_suffix), ...mid];
  const plain = await post('/completion', { model: 'coder', prompt: ids, n_predict: 6, temperature: 0, return_tokens: true });
  assert.equal(fim.json.tokens_evaluated, ids.length);
  assert.deepEqual(fim.json.tokens, plain.json.tokens);
  assert.equal(fim.json.content, plain.json.content);
  // extra context as files, each after FIM_SEP and its name
  const extra = await post('/infill', { model: 'coder', ...parts, n_predict: 2, input_extra: [{ filename: 'a.txt', text: 'Tim ran.' }] });
  assert.equal(extra.status, 200);
  assert.equal(extra.json.tokens_evaluated, ids.length + 1 + (await tok('a.txt\n')).length + (await tok('Tim ran.')).length);
  // a prefix longer than the context keeps its end
  const long = await post('/infill', { model: 'coder', ...parts, input_prefix: 'a b c d '.repeat(2000), n_predict: 2 });
  assert.equal(long.status, 200);
  assert.ok(long.json.tokens_evaluated <= 2048);
  // as llama.vim sends it: its samplers (llama.cpp's infill stage), time limits, indentation, fields
  const vim = await post('/infill', {
    model: 'coder', input_prefix: 'Once upon a time,\n', input_suffix: '\nThe end.\n', input_extra: [], prompt: ' there',
    n_predict: 16, stop: [], n_indent: 0, top_k: 40, top_p: 0.99, samplers: ['top_k', 'top_p', 'infill'], stream: false,
    cache_prompt: true, t_max_prompt_ms: 500, t_max_predict_ms: 1000,
    response_fields: ['content', 'timings/prompt_n', 'timings/predicted_n', 'truncated', 'tokens_cached'],
  });
  assert.equal(vim.status, 200, JSON.stringify(vim.json));
  assert.deepEqual(Object.keys(vim.json).sort(), ['content', 'timings/predicted_n', 'timings/prompt_n', 'tokens_cached', 'truncated']);
  // t_max_prompt_ms: a prompt not processed in time ends the reply, empty
  const slow = await post('/completion', { model: 'stories', prompt: 'Once upon a time, '.repeat(300), n_predict: 8,
                                           t_max_prompt_ms: 1, cache_prompt: false });
  assert.equal(slow.json.content, '');
  assert.equal(slow.json.stop_type, 'limit');
  assert.equal(slow.json.tokens_predicted, 0);
  const none = await post('/infill', { model: 'stories', ...parts });
  assert.equal(none.status, 400);
  assert.match(none.json.error.message, /fill-in-the-middle/);
});
