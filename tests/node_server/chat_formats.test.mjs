// The chat formats of today's models through the official OpenAI client, on the servers
// tests/e2e/chat_formats.sh started: one small model served with each family's real template.
// A grammar makes even random weights write a reply in the family's own syntax (its reasoning
// markers, some text, its calls as the family's documentation shows them); the server must give
// back the reasoning as message.reasoning_content, the text as content and the calls as
// tool_calls, the same streamed as whole, and the template must take the calls back.
//   NUCLEUS_SERVERS  JSON: [{"name", "family", "template", "url"}]
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const SERVERS = JSON.parse(process.env.NUCLEUS_SERVERS);
const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

// JSON as Python's json.dumps writes it (", " and ": "), as the templates and models do.
const py = (v) => (Array.isArray(v) ? `[${v.map(py).join(', ')}]`
  : v && typeof v === 'object' ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${py(x)}`).join(', ')}}`
    : JSON.stringify(v));
// Parameters one by one: OPEN(key) value CLOSE, strings bare, other values as JSON.
const params = (args, open, close) => Object.entries(args)
  .map(([k, v]) => `${open(k)}${typeof v === 'string' ? v : JSON.stringify(v)}${close}`).join('');

// A call as Python: NAME(KEY=VALUE, ...), the values Python's literals (LFM2).
const pyLiteral = (v) => (v === true ? 'True' : v === false ? 'False' : v === null ? 'None'
  : Array.isArray(v) ? `[${v.map(pyLiteral).join(', ')}]`
  : typeof v === 'object' ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pyLiteral(x)}`).join(', ')}}`
  : JSON.stringify(v));
const pythonic = (c) => `${c.name}(${Object.entries(c.args).map(([k, v]) => `${k}=${pyLiteral(v)}`).join(', ')})`;
const DS = (s) => s.replaceAll('|', '\uff5c').replaceAll('_', '\u2581'); // DeepSeek's full-width markers
const DSML = '\uff5cDSML\uff5c';

// How each family writes its reasoning and its calls. text: what separates a text from the calls
// (undefined: the format has no text before calls); lead: what a text opens with; one: one call
// per reply; ids: the template renders the calls' ids back; reasons: it renders an earlier turn's
// reasoning back.
const FAMILIES = {
  qwen3: { think: ['<think>\n', '\n</think>\n\n'], call: (c) => `<tool_call>\n{"name": "${c.name}", "arguments": ${py(c.args)}}\n</tool_call>`,
           sep: '\n', text: '\n\n', reasons: true },
  'qwen3.5': { think: ['<think>\n', '\n</think>\n\n'],
               call: (c) => `<tool_call>\n<function=${c.name}>\n${params(c.args, (k) => `<parameter=${k}>\n`, '\n</parameter>\n')}</function>\n</tool_call>`,
               sep: '\n', text: '\n\n', reasons: true },
  'deepseek-v3.2': { think: ['<think>', '</think>'], open: `\n\n<${DSML}function_calls>\n`, close: `</${DSML}function_calls>`,
                     call: (c) => `<${DSML}invoke name="${c.name}">\n${params(c.args, (k) => `<${DSML}parameter name="${k}" string="${k === 'city'}">`, `</${DSML}parameter>\n`)}</${DSML}invoke>\n`,
                     text: '' },
  'kimi-k2': { open: '<|tool_calls_section_begin|>', close: '<|tool_calls_section_end|>', text: '',
               call: (c, i) => `<|tool_call_begin|>functions.${c.name}:${i}<|tool_call_argument_begin|>${py(c.args)}<|tool_call_end|>` },
  'glm-4.6': { think: ['<think>', '</think>\n'], sep: '\n', text: '\n', reasons: true,
               call: (c) => `<tool_call>${c.name}\n${params(c.args, (k) => `<arg_key>${k}</arg_key>\n<arg_value>`, '</arg_value>\n')}</tool_call>` },
  'minimax-m2': { think: ['<think>\n', '\n</think>\n\n'], open: '<minimax:tool_call>\n', close: '</minimax:tool_call>', text: '\n\n',
                  call: (c) => `<invoke name="${c.name}">\n${params(c.args, (k) => `<parameter name="${k}">`, '</parameter>\n')}</invoke>\n`,
                  reasons: true },
  'seed-oss': { think: ['<seed:think>', '</seed:think>\n'], sep: '\n', text: '\n\n', reasons: true,
                call: (c) => `<seed:tool_call>\n<function=${c.name}>\n${params(c.args, (k) => `<parameter=${k}>`, '</parameter>\n')}</function>\n</seed:tool_call>` },
  'gpt-oss': { harmony: true, one: true, reasons: true },
  magistral: { think: ['[THINK]', '[/THINK]'], text: '', short: true, call: (c) => `[TOOL_CALLS]${c.name}[ARGS]${py(c.args)}` },
  'mistral-small-3.2': { text: '', ids: true, short: true, call: (c) => `[TOOL_CALLS]${c.name}[CALL_ID]a1b2c3d4e[ARGS]${py(c.args)}` },
  'functionary-v3.1': { text: '', call: (c) => `<function=${c.name}>${py(c.args)}</function>` },
  'command-r7b': { open: '<|START_ACTION|>[', close: ']<|END_ACTION|>', sep: ', ',
                   call: (c) => `{"tool_name": "${c.name}", "parameters": ${py(c.args)}}` },
  'nemotron-v2': { think: ['<think>\n', '\n</think>\n\n'], open: '<TOOLCALL>[', close: ']</TOOLCALL>', sep: ', ', text: '\n',
                   call: (c) => `{"name": "${c.name}", "arguments": ${py(c.args)}}` },
  'granite-3.3': { open: '<|tool_call|>[', close: ']', sep: ', ', text: '', call: (c) => `{"name": "${c.name}", "arguments": ${py(c.args)}}` },
  apertus: { open: '<|tools_prefix|>[', close: ']<|tools_suffix|>', sep: ', ', text: '', call: (c) => `{"${c.name}": ${py(c.args)}}` },
  llama3: { one: true, call: (c) => `{"name": "${c.name}", "parameters": ${py(c.args)}}` },
  'gigachat-3': { one: true, text: '', call: (c) => `<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "${c.name}", "arguments": ${py(c.args)}}` },
  'command-r-plus': { open: 'Action:\n```json\n[\n    ', close: '\n]```', sep: ',\n    ', text: '\n',
                      call: (c) => `{"tool_name": "${c.name}", "parameters": ${py(c.args)}}` },
  lfm2: { open: '<|tool_call_start|>[', close: ']<|tool_call_end|>', sep: ', ', text: '', call: pythonic },
  'lfm2.5': { think: ['<think>', '</think>\n'], open: '<|tool_call_start|>[', close: ']<|tool_call_end|>', sep: ', ', text: '\n',
              call: pythonic },
  // the prompt ends with ">>>": a text opens with the recipient "all\n", the first call with its name
  'functionary-v3.2': { lead: 'all\n', text: '>>>', sep: '>>>', call: (c) => `${c.name}\n${py(c.args)}` },
  'solar-open': { open: '<|tool_calls|>', close: '<|calls|>', text: '', ids: true,
                  call: (c, i) => `<|tool_call:begin|>call_${i}<|tool_call:name|>${c.name}<|tool_call:args|>${py(c.args)}<|tool_call:end|>` },
};

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    // (Command R+'s template renders every parameter's description, and fails without one)
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'The city' },
                                                days: { type: 'integer', description: 'How many days' } },
                  required: ['city'] },
  },
};
const CLOCK = { type: 'function', function: { name: 'now', description: 'The time', parameters: { type: 'object', properties: {} } } };
const TOOLS = [WEATHER, CLOCK];
const CALLS = [{ name: 'get_weather', args: { city: 'Oslo', days: 2 } }, { name: 'now', args: {} }];
const USER = [{ role: 'user', content: 'What is the weather in Oslo?' }];

// A GBNF grammar whose only sentence is text.
const literal = (text) => `root ::= ${JSON.stringify(text).replace(/\\u([0-9a-fA-F]{4})/g, (m) => m)}`;

async function post(s, path, body) {
  const r = await fetch(`${s.url}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                              body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

// The prompt the server renders; whether it opened the reasoning (the reply starts inside it).
async function opened(s, f, extra = {}) {
  const r = await post(s, '/apply-template', { messages: USER, tools: TOOLS, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return f.think ? r.body.prompt.trimEnd().endsWith(f.think[0].trim()) : false;
}

// The reply the grammar makes the model write: reasoning, a text, the calls.
function reply(f, isOpen, { reasoning = true, text = true, n } = {}) {
  const calls = CALLS.slice(0, n ?? (f.one ? 1 : 2));
  if (f.harmony) {
    return `${reasoning ? '<|channel|>analysis<|message|>Cold there.<|end|><|start|>assistant' : ''}` +
      `<|channel|>commentary to=functions.${calls[0].name} <|constrain|>json<|message|>${py(calls[0].args)}`;
  }
  let out = '';
  if (f.think && reasoning) out += `${isOpen ? '' : f.think[0]}Cold there.${f.think[1]}`;
  if (text && f.text !== undefined) out += `${f.lead ?? ''}Let me see.${f.text}`;
  return out + (f.open ?? '') + calls.map((c, i) => f.call(c, i)).join(f.sep ?? '') + (f.close ?? '');
}

// A streamed chat gathered as the OpenAI client's users gather it.
async function gather(stream) {
  let content = '', reasoning = '', finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? '';
    reasoning += c.delta?.reasoning_content ?? '';
    for (const d of c.delta?.tool_calls ?? []) {
      const call = (calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (d.id) call.id = d.id;
      if (d.function?.name) call.function.name += d.function.name;
      if (d.function?.arguments) call.function.arguments += d.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, reasoning, calls, finish };
}

const named = (calls) => calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]);

for (const s of SERVERS.filter((x) => !x.name.endsWith('_budget'))) {
  const f = FAMILIES[s.family];
  const ai = client(s);

  test(`${s.name} (${s.template}): reasoning, text and calls, whole and streamed; the calls fed back`, async () => {
    const isOpen = await opened(s, f);
    const text = reply(f, isOpen);
    const body = { model: 'm', messages: USER, tools: TOOLS, seed: 1, max_tokens: 1500, grammar: literal(text) };
    const r = await ai.chat.completions.create(body);
    const m = r.choices[0].message;
    const st = await gather(await ai.chat.completions.create({ ...body, stream: true }));
    const want = CALLS.slice(0, f.one ? 1 : 2).map((c) => [c.name, c.args]);
    const wantText = f.text !== undefined && !f.harmony ? 'Let me see.' : null;
    const wantReasoning = f.think || f.harmony ? 'Cold there.' : undefined;
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
    assert.equal(m.content, wantText, JSON.stringify(m));
    assert.equal(m.reasoning_content, wantReasoning, JSON.stringify(m));
    assert.deepEqual(named(m.tool_calls), want);
    for (const c of m.tool_calls) assert.match(c.id, f.short ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
    assert.equal(st.finish, 'tool_calls');
    assert.equal(st.content, wantText ?? '');
    assert.equal(st.reasoning, wantReasoning ?? '');
    assert.deepEqual(named(st.calls), want);

    // the calls and their results go back through the template, with their ids
    const back = [...USER, { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content,
                             tool_calls: m.tool_calls },
                  ...m.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, name: c.function.name, content: '-3 C' }))];
    const p = await post(s, '/apply-template', { messages: back, tools: TOOLS });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.match(p.body.prompt, /Oslo/);
    assert.match(p.body.prompt, /-3 C/);
    if (f.ids) assert.ok(p.body.prompt.includes(m.tool_calls[0].id), `the id ${m.tool_calls[0].id} is not in ${p.body.prompt}`);
    if (f.reasons) assert.match(p.body.prompt, /Cold there\./);
    const f2 = await ai.chat.completions.create({ model: 'm', messages: back, tools: TOOLS, seed: 2, max_tokens: 4 });
    assert.ok(['stop', 'length', 'tool_calls'].includes(f2.choices[0].finish_reason));
  });

  if (f.think || f.harmony) {
    test(`${s.name}: reasoning alone, cut inside it, and kept in the content with reasoning_format none`, async () => {
      const isOpen = await opened(s, f);
      const prefix = f.harmony ? '<|channel|>analysis<|message|>' : isOpen ? '' : f.think[0];
      const close = f.harmony ? '<|end|><|start|>assistant<|channel|>final<|message|>' : f.think[1];
      const body = { model: 'm', messages: USER, seed: 1, max_tokens: 400, grammar: literal(`${prefix}Cold there.${close}Wear a coat.`) };
      for (const stream of [false, true]) {
        const r = stream ? await gather(await ai.chat.completions.create({ ...body, stream: true }))
                         : (await ai.chat.completions.create(body)).choices[0].message;
        assert.equal(r.reasoning_content ?? r.reasoning, 'Cold there.', JSON.stringify(r));
        assert.equal(r.content, 'Wear a coat.');
      }
      // cut by max_tokens inside the reasoning: all of it is reasoning
      const cut = await ai.chat.completions.create({ ...body, grammar: literal(`${prefix}${'Cold there. '.repeat(40)}`), max_tokens: 30 });
      assert.equal(cut.choices[0].finish_reason, 'length');
      assert.match(cut.choices[0].message.reasoning_content ?? '', /^Cold/, JSON.stringify(cut.choices[0].message));
      assert.equal(cut.choices[0].message.content, '');
      const none = await ai.chat.completions.create({ ...body, reasoning_format: 'none' });
      assert.equal(none.choices[0].message.reasoning_content, undefined);
      assert.equal(none.choices[0].message.content, `${prefix}Cold there.${close}Wear a coat.`);
    });
  }
}

const by = (name) => SERVERS.find((x) => x.name === name);

const PICK = [{ type: 'function', function: { name: 'pick', description: 'Pick one',
                                               parameters: { type: 'object', properties: { n: { enum: [1, 2] } },
                                                             required: ['n'], additionalProperties: false } } }];

test('a reply cut by max_tokens inside its calls keeps the complete ones (tool_choice required, parallel)', async () => {
  const s = by('qwen3');
  const ai = client(s);
  // min_tokens holds the end back until the grammar has no more calls to offer: the most calls
  const whole = await ai.chat.completions.create({ model: 'm', messages: USER, tools: PICK, tool_choice: 'required', seed: 1,
                                                   max_tokens: 2000, min_tokens: 2000 });
  const n = whole.choices[0].message.tool_calls?.length;
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.equal(n, 8, JSON.stringify(whole.choices[0].message));
  // the same reply cut inside its last call
  const body = { model: 'm', messages: USER, tools: PICK, tool_choice: 'required', seed: 1, min_tokens: 2000,
                 max_tokens: whole.usage.completion_tokens - 3 };
  const cut = await ai.chat.completions.create(body);
  const c = cut.choices[0];
  assert.equal(c.finish_reason, 'length');
  assert.equal(c.message.tool_calls.length, n - 1, JSON.stringify(c.message));
  assert.deepEqual(named(c.message.tool_calls), named(whole.choices[0].message.tool_calls).slice(0, n - 1));
  assert.match(c.message.content, /^<tool_call>\n\{"name": "pick", "arguments": \{/, "the cut call is kept as content");
  const st = await gather(await ai.chat.completions.create({ ...body, stream: true }));
  assert.equal(st.finish, 'length');
  assert.deepEqual(named(st.calls), named(c.message.tool_calls));
  assert.equal(st.content, c.message.content);
});

// (with its parameter's description, which Command R+'s template renders)
const PICK_DESCRIBED = { type: 'function', function: { ...PICK[0].function, parameters: {
  ...PICK[0].function.parameters, properties: { n: { enum: [1, 2], description: 'Which one' } } } } };

test('tool_choice required and named in the syntaxes of GigaChat 3, Command R+, LFM2 and Functionary v3.2', async () => {
  for (const name of ['gigachat3', 'commandrplus', 'lfm2', 'functionary32']) {
    const ai = client(by(name));
    for (const tool_choice of ['required', { type: 'function', function: { name: 'pick' } }]) {
      const body = { model: 'm', messages: USER, tools: [PICK_DESCRIBED, CLOCK], tool_choice, seed: 1, max_tokens: 1500 };
      const r = await ai.chat.completions.create(body);
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls', `${name}: ${JSON.stringify(m)}`);
      assert.ok(m.tool_calls.length >= 1);
      if (typeof tool_choice === 'object') assert.ok(m.tool_calls.every((c) => c.function.name === 'pick'), JSON.stringify(m));
      for (const c of m.tool_calls) {
        const args = JSON.parse(c.function.arguments);
        if (c.function.name === 'pick') assert.ok([1, 2].includes(args.n), `${name}: ${c.function.arguments}`);
      }
      const st = await gather(await ai.chat.completions.create({ ...body, stream: true }));
      assert.equal(st.finish, 'tool_calls');
      assert.deepEqual(named(st.calls), named(m.tool_calls));
    }
  }
  // Functionary v3.2 without tools: its prompt still ends with ">>>", the text's "all\n" is dropped
  const ai = client(by('functionary32'));
  const body = { model: 'm', messages: USER, seed: 1, max_tokens: 50, grammar: literal('all\nWear a coat.') };
  const r = await ai.chat.completions.create(body);
  assert.equal(r.choices[0].message.content, 'Wear a coat.');
  assert.equal((await gather(await ai.chat.completions.create({ ...body, stream: true }))).content, 'Wear a coat.');
});

test('--reasoning-budget: the reasoning ends after its budget of tokens; required calls come after it', async () => {
  const s = by('qwen35_budget');
  const ai = client(s);
  for (const seed of [1, 2, 3]) {
    const r = await ai.chat.completions.create({ model: 'm', messages: USER, seed, max_tokens: 40, logprobs: true,
                                                 reasoning_format: 'none' });
    const toks = r.choices[0].logprobs.content.map((t) => t.token);
    const text = toks.join('');
    const end = text.indexOf('</think>');
    assert.ok(end >= 0, `no </think> in ${JSON.stringify(text)}`);
    let before = 0;
    for (let i = 0, at = 0; i < toks.length && at + toks[i].length <= end; at += toks[i].length, i++) before++;
    assert.ok(before <= 5, `${before} tokens of reasoning: ${JSON.stringify(text)}`);
  }
  const r = await ai.chat.completions.create({ model: 'm', messages: USER, tools: PICK, tool_choice: 'required', seed: 4,
                                               max_tokens: 1500, parallel_tool_calls: false });
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
  assert.ok(r.choices[0].message.tool_calls.length >= 1);
});

test('chat_template_kwargs, reasoning_effort and POST /apply-template', async () => {
  const q = by('qwen35');
  let p = await post(q, '/apply-template', { messages: USER, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(p.status, 200);
  assert.ok(p.body.prompt.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n'), p.body.prompt);
  p = await post(q, '/apply-template', { messages: USER });
  assert.ok(p.body.prompt.endsWith('<|im_start|>assistant\n<think>\n'), p.body.prompt);
  assert.ok(p.body.prompt.includes('What is the weather in Oslo?'));
  // thinking off: the reply has no reasoning to split out
  const r = await client(q).chat.completions.create({ model: 'm', messages: USER, seed: 1, max_tokens: 30,
                                                      chat_template_kwargs: { enable_thinking: false },
                                                      grammar: literal('Wear a coat.') });
  assert.equal(r.choices[0].message.content, 'Wear a coat.');
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  const g = by('gptoss');
  p = await post(g, '/apply-template', { messages: USER, reasoning_effort: 'high' });
  assert.match(p.body.prompt, /Reasoning: high/);
  p = await post(g, '/apply-template', { messages: USER });
  assert.match(p.body.prompt, /Reasoning: medium/);
  // earlier reasoning goes back as gpt-oss's "thinking"
  p = await post(g, '/apply-template', { messages: [...USER, { role: 'assistant', content: 'Coat.', reasoning_content: 'It is cold.' },
                                                    { role: 'user', content: 'And?' }] });
  assert.equal(p.status, 200, JSON.stringify(p.body));
  for (const [body, re] of [[{ messages: USER, chat_template_kwargs: { tools: [] } }, /chat_template_kwargs/],
                            [{ messages: USER, reasoning_effort: 'extreme' }, /reasoning_effort/],
                            [{ messages: USER, reasoning_format: 'deepseek-legacy' }, /reasoning_format/],
                            [{ messages: [{ role: 'user', content: 'q', reasoning_content: 'r' }] }, /reasoning_content/]]) {
    const e = await post(q, '/apply-template', body);
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.match(e.body.error.message, re);
  }
});

test('fields other servers\' clients send are taken with their meaning', async () => {
  const s = by('qwen3');
  const ai = client(s);
  const r = await ai.chat.completions.create({
    model: 'm', messages: USER, seed: 1, metadata: { team: 'a' }, store: false, service_tier: 'auto', user: 'u-1',
    n_predict: 5, n_probs: 2, id_slot: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].logprobs.content.length, 5);
  assert.equal(r.choices[0].logprobs.content[0].top_logprobs.length, 2);
  // cache_prompt false: the prompt is computed again
  const again = { model: 'm', messages: USER, seed: 1, max_tokens: 2 };
  await ai.chat.completions.create(again);
  const cached = await ai.chat.completions.create(again);
  assert.ok(cached.usage.prompt_tokens_details.cached_tokens > 0);
  const fresh = await ai.chat.completions.create({ ...again, cache_prompt: false });
  assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  // t_max_predict_ms: past it, the reply ends once it has a newline
  const t = await ai.chat.completions.create({ model: 'm', messages: USER, seed: 1, max_tokens: 1000, t_max_predict_ms: 1,
                                               reasoning_format: 'none', grammar: `root ::= "a\\n" [a-z]{900}` });
  assert.equal(t.choices[0].finish_reason, 'length');
  assert.ok(t.usage.completion_tokens < 900, `${t.usage.completion_tokens} tokens`);
  for (const [extra, re] of [[{ store: true }, /store/], [{ service_tier: 'flex' }, /service_tier/], [{ id_slot: 1 }, /id_slot/],
                             [{ n_predict: 3, max_tokens: 3 }, /n_predict/], [{ metadata: { a: 1 } }, /metadata/],
                             [{ no_such_field: 1 }, /no_such_field/]]) {
    await assert.rejects(ai.chat.completions.create({ model: 'm', messages: USER, ...extra }),
                         (e) => e.status === 400 && re.test(e.message), JSON.stringify(extra));
  }
});

// response_format schemas as the libraries people use write them: bounds, patterns, formats.
// Pydantic 2's model_json_schema() of a model with Field(ge=0, le=130), Field(gt=0, lt=10),
// constr(pattern=...), EmailStr, HttpUrl, date, datetime | None, UUID, Literal, IPv4Address.
const PYDANTIC = {
  $defs: { Address: { properties: { city: { pattern: '^[A-Z][a-z]{1,12}$', title: 'City', type: 'string' },
                                    zip: { pattern: '^\\d{4}$', title: 'Zip', type: 'string' } },
                      required: ['city', 'zip'], title: 'Address', type: 'object' } },
  properties: {
    name: { maxLength: 12, title: 'Name', type: 'string' },
    age: { maximum: 130, minimum: 0, title: 'Age', type: 'integer' },
    score: { exclusiveMaximum: 10, exclusiveMinimum: 0, title: 'Score', type: 'number' },
    email: { format: 'email', title: 'Email', type: 'string' },
    site: { format: 'uri', maxLength: 2083, minLength: 1, title: 'Site', type: 'string' },
    born: { format: 'date', title: 'Born', type: 'string' },
    seen: { anyOf: [{ format: 'date-time', type: 'string' }, { type: 'null' }], default: null, title: 'Seen' },
    id: { format: 'uuid', title: 'Id', type: 'string' },
    role: { enum: ['admin', 'user'], title: 'Role', type: 'string' },
    ip: { format: 'ipv4', title: 'Ip', type: 'string' },
    address: { $ref: '#/$defs/Address' },
    tags: { items: { maxLength: 8, type: 'string' }, maxItems: 3, minItems: 1, title: 'Tags', type: 'array' },
  },
  required: ['name', 'age', 'score', 'email', 'site', 'born', 'id', 'role', 'ip', 'address', 'tags'],
  title: 'Person', type: 'object',
};
// What the openai package's zodResponseFormat (zod-to-json-schema) writes for z.object({ name:
// z.string().min(1).max(12), age: z.number().int().min(0).max(130), score: z.number().positive().lt(10),
// email: z.string().email(), site: z.string().url(), code: z.string().regex(/^[A-Z]{3}-\d{2}$/),
// kind: z.enum(['a', 'b']), when: z.string().datetime(), host: z.string().ip({ version: 'v6' }) }),
// with an object of optional keys bounded by minProperties / maxProperties beside them
const ZOD = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 130 },
    score: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 10 },
    email: { type: 'string', format: 'email' },
    site: { type: 'string', format: 'uri' },
    code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
    kind: { type: 'string', enum: ['a', 'b'] },
    when: { type: 'string', format: 'date-time' },
    host: { type: 'string', format: 'ipv6' },
    extra: { type: 'object', properties: { x: { type: 'integer', minimum: -5, maximum: 5 }, y: { type: 'boolean' },
                                           z: { type: 'null' } },
             additionalProperties: false, minProperties: 1, maxProperties: 2 },
  },
  required: ['name', 'age', 'score', 'email', 'site', 'code', 'kind', 'when', 'host', 'extra'],
  additionalProperties: false,
  $schema: 'http://json-schema.org/draft-07/schema#',
};

test('response_format with pydantic\'s and zod\'s schemas: every reply valid under ajv, whole and streamed', async () => {
  const ai = client(by('qwen3'));
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  for (const [name, schema] of [['pydantic', PYDANTIC], ['zod', ZOD]]) {
    const check = ajv.compile(schema);
    const rf = { type: 'json_schema', json_schema: { name, strict: true, schema } };
    for (const stream of [false, true, false]) {
      const seed = stream ? 3 : name.length + (stream ? 0 : 1);
      const body = { model: 'm', messages: [{ role: 'user', content: 'A person as JSON.' }], response_format: rf, seed,
                     max_tokens: 3000 };
      const r = stream ? await gather(await ai.chat.completions.create({ ...body, stream: true }))
                       : (await ai.chat.completions.create(body)).choices[0];
      const text = stream ? r.content : r.message.content;
      assert.equal(stream ? r.finish : r.finish_reason, 'stop', `${name}: ${text}`);
      const v = JSON.parse(text);
      assert.ok(check(v), `${name}: ${text} fails: ${ajv.errorsText(check.errors)}`);
    }
  }
  // a regular expression nucleus cannot write is refused by name (zod 4's own email pattern)
  await assert.rejects(ai.chat.completions.create({
    model: 'm', messages: USER, max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string',
      pattern: "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$" } } } }),
  (e) => e.status === 400 && /lookahead/.test(e.message));
});
