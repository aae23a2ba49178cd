// Structured output and tool calling through the official OpenAI client, on every server that
// tests/e2e/structured.sh started (one per shared model, random weights included, and three with
// tool-taking chat templates of each call format). The judge of every output is an independent
// JSON Schema validator (ajv): a grammar makes even random weights produce valid output.
//   NUCLEUS_SERVERS  JSON: [{"name", "url", "no_braces", "format"}]; no_braces: the vocabulary has no
//                    token holding '{' (TinyStories-656K): JSON is impossible, and must be refused as
//                    such; format: the call format of the server's template (hermes, llama3, mistral)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';

const SERVERS = JSON.parse(process.env.NUCLEUS_SERVERS);
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

const client = (s) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 });
const USER = [{ role: 'user', content: 'Describe a person as JSON.' }];
const MAX = 400;
const MAX_CALLS = 1500; // up to 8 parallel calls of a character-level vocabulary

// Bounded so that a random model's output ends well within MAX tokens.
const PERSON = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 8 },
    admin: { type: 'boolean' },
    role: { enum: ['owner', 'guest', 42, null] },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 3 },
    home: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 6 }, zip: { const: '0150' } },
      required: ['zip'],
      additionalProperties: false,
    },
    born: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/day' }] },
  },
  required: ['name', 'admin', 'role', 'tags', 'home'],
  additionalProperties: false,
  $defs: { day: { type: 'string', format: 'date' } },
};

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['C', 'F'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const CLOCK = {
  type: 'function',
  function: { name: 'now', parameters: { type: 'object', properties: {}, additionalProperties: false } },
};
const TOOL_SCHEMAS = { get_weather: WEATHER.function.parameters, now: CLOCK.function.parameters };

function valid(schema, value, what) {
  const check = ajv.compile(schema);
  assert.ok(check(value), `${what}: ${JSON.stringify(value)} fails its schema: ${ajv.errorsText(check.errors)}`);
}

function parsed(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON: ${JSON.stringify(text)}`);
  }
}

// Call ids: OpenAI's shape; Mistral's templates take only 9 letters and digits.
function checkCalls(calls, what, only, format) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, `${what}: no tool calls`);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, format === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/);
    assert.ok(c.function.name in TOOL_SCHEMAS, `${what}: unknown tool ${c.function.name}`);
    if (only) assert.equal(c.function.name, only);
    valid(TOOL_SCHEMAS[c.function.name], parsed(c.function.arguments, what), `${what} arguments`);
  }
}

// A streamed chat gathered as the OpenAI client's users gather it: content, and tool calls by index.
async function gather(stream) {
  let content = '', finish = null;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? '';
    for (const d of c.delta?.tool_calls ?? []) {
      const call = (calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (d.id) call.id = d.id;
      if (d.function?.name) call.function.name += d.function.name;
      if (d.function?.arguments) call.function.arguments += d.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, calls, finish };
}

for (const s of SERVERS.filter((x) => x.no_braces)) {
  test(`${s.name}: a vocabulary that cannot write '{' is told so, not given an empty reply`, async () => {
    const ai = client(s);
    const cases = [{ response_format: { type: 'json_object' } }, { tools: [WEATHER], tool_choice: 'required' }];
    for (const extra of cases)
      await assert.rejects(ai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 60, ...extra }),
                           (e) => e.status === 400 && /no token of the model's vocabulary/.test(e.message),
                           JSON.stringify(extra));
    const g = await ai.completions.create({ model: 'm', prompt: 'Once', seed: 1, max_tokens: 20,
                                           grammar: 'root ::= " " [a-z]{2,6} ("." | "!")' });
    assert.match(g.choices[0].text, /^ [a-z]{2,6}[.!]$/);
  });
}

for (const s of SERVERS.filter((x) => !x.no_braces)) {
  const ai = client(s);

  test(`${s.name}: response_format json_schema, whole and streamed`, async () => {
    const rf = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: PERSON } };
    for (const seed of [1, 2]) {
      const r = await ai.chat.completions.create({ model: 'm', messages: USER, response_format: rf, seed, max_tokens: MAX });
      assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: ${r.choices[0].message.content}`);
      valid(PERSON, parsed(r.choices[0].message.content, `seed ${seed}`), `seed ${seed}`);
    }
    const st = await gather(await ai.chat.completions.create({ model: 'm', messages: USER, response_format: rf, seed: 3,
                                                               max_tokens: MAX, stream: true }));
    assert.equal(st.finish, 'stop');
    valid(PERSON, parsed(st.content, 'streamed'), 'streamed');
  });

  test(`${s.name}: json_object, and llama.cpp's json_schema and grammar on completions`, async () => {
    const r = await ai.chat.completions.create({ model: 'm', messages: USER, response_format: { type: 'json_object' },
                                                 seed: 4, max_tokens: MAX });
    if (r.choices[0].finish_reason === 'stop') {
      const v = parsed(r.choices[0].message.content, 'json_object');
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), 'json_object gave no object');
    } else {
      // any object may be longer than MAX tokens: what came must still be an object's beginning
      assert.match(r.choices[0].message.content, /^\s*\{/);
    }
    const schema = { type: 'array', items: { enum: ['x', 'y', true] }, minItems: 2, maxItems: 4 };
    const c = await ai.completions.create({ model: 'm', prompt: 'A list:', json_schema: schema, seed: 5, max_tokens: MAX });
    valid(schema, parsed(c.choices[0].text, 'json_schema'), 'json_schema');
    const g = await ai.completions.create({ model: 'm', prompt: 'Answer:', seed: 6, max_tokens: 40,
                                           grammar: 'root ::= ("yes" | "no") ", " [0-9]{1,3} "%" ("!" | "")' });
    assert.match(g.choices[0].text, /^(yes|no), [0-9]{1,3}%!?$/);
    assert.equal(g.choices[0].finish_reason, 'stop');
  });

  test(`${s.name}: tool_choice required and named, whole and streamed; calls fed back`, async () => {
    const tools = [WEATHER, CLOCK];
    const msgs = [{ role: 'user', content: 'What is the weather in Oslo?' }];
    const r = await ai.chat.completions.create({ model: 'm', messages: msgs, tools, tool_choice: 'required', seed: 7,
                                                 max_tokens: MAX_CALLS });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    checkCalls(r.choices[0].message.tool_calls, 'required', undefined, s.format);
    const st = await gather(await ai.chat.completions.create({
      model: 'm', messages: msgs, tools, seed: 8, max_tokens: MAX_CALLS, stream: true, parallel_tool_calls: false,
      tool_choice: { type: 'function', function: { name: 'get_weather' } } }));
    assert.equal(st.finish, 'tool_calls');
    assert.equal(st.calls.length, 1, 'parallel_tool_calls false made several calls');
    checkCalls(st.calls, 'named, streamed', 'get_weather', s.format);
    // the calls and their results go back to the model, which answers
    const back = [...msgs, r.choices[0].message,
                  ...r.choices[0].message.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '-3 C, snow' }))];
    const f = await ai.chat.completions.create({ model: 'm', messages: back, tools, tool_choice: 'none', seed: 9,
                                                 max_tokens: 8 });
    assert.ok(['stop', 'length'].includes(f.choices[0].finish_reason));
    assert.equal(f.choices[0].message.tool_calls, undefined);
  });

  // tool_choice auto parses what the model wrote; a grammar makes the model write a call in the
  // template's format, after some text where the format allows it
  test(`${s.name}: tool_choice auto finds the calls in the reply, whole and streamed`, async () => {
    const gbnf = {
      hermes: 'root ::= "Let me see.\\n<tool_call>\\n{\\"name\\": \\"now\\", \\"arguments\\": {}}\\n</tool_call>\\n' +
              '<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Oslo\\", \\"unit\\": \\"C\\"}}\\n</tool_call>"',
      llama3: 'root ::= "{\\"name\\": \\"get_weather\\", \\"parameters\\": {\\"city\\": \\"Oslo\\", \\"unit\\": \\"C\\"}}"',
      mistral: 'root ::= "[{\\"name\\": \\"now\\", \\"arguments\\": {}}, {\\"name\\": \\"get_weather\\", \\"arguments\\": ' +
               '{\\"city\\": \\"Oslo\\", \\"unit\\": \\"C\\"}}]"',
    }[s.format];
    const want = s.format === 'llama3' ? [['get_weather', { city: 'Oslo', unit: 'C' }]]
                                       : [['now', {}], ['get_weather', { city: 'Oslo', unit: 'C' }]];
    const body = { model: 'm', messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER, CLOCK], seed: 1,
                   max_tokens: MAX_CALLS, grammar: gbnf };
    const r = await ai.chat.completions.create(body);
    const st = await gather(await ai.chat.completions.create({ ...body, stream: true }));
    for (const [what, calls, content, finish] of [['whole', r.choices[0].message.tool_calls, r.choices[0].message.content,
                                                   r.choices[0].finish_reason], ['streamed', st.calls, st.content, st.finish]]) {
      assert.equal(finish, 'tool_calls', what);
      assert.equal(content ?? '', s.format === 'hermes' ? 'Let me see.' : '', what);
      assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), want, what);
      checkCalls(calls, what, undefined, s.format);
    }
    assert.notEqual(st.calls[0].id, r.choices[0].message.tool_calls[0].id);
    // with the same text and tool_choice none, the reply is content
    const none = await ai.chat.completions.create({ ...body, tool_choice: 'none' });
    assert.equal(none.choices[0].finish_reason, 'stop');
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.match(none.choices[0].message.content, /get_weather/);
  });

  test(`${s.name}: what is not implemented is refused, naming it`, async () => {
    const cases = [
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(a|b' } } } },
       /pattern|regular/],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', if: {} } } } }, /if/],
      [{ grammar: 'root ::= undefined-rule' }, /undefined-rule/],
      [{ store: true }, /store/],
      [{ tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } }, /nope/],
    ];
    for (const [extra, re] of cases) {
      await assert.rejects(ai.chat.completions.create({ model: 'm', messages: USER, max_tokens: 4, ...extra }),
                           (e) => e.status === 400 && re.test(e.message), JSON.stringify(extra));
    }
  });
}
