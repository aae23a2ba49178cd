// The chat page: a conversation streamed from /v1/chat/completions with nucleus_explain on, each
// reply's tokens inspectable (inspector.js), branches continued through /v1/completions with the
// token ids up to the branch point.
import { renderMarkdown } from './markdown.js';
import { openInspector } from './inspector.js';

const $ = (id) => document.getElementById(id);
const EXPLAIN_TOP_N = 100;

// Every sampler the server accepts: [request field, label, default, kind, min, max, step].
const SAMPLERS = [
  ['temperature', 'Temperature', 0.8, 'number', 0, 5, 0.05],
  ['top_k', 'Top-k (0: off)', 40, 'number', 0, 1000, 1],
  ['top_p', 'Top-p', 0.95, 'number', 0, 1, 0.01],
  ['min_p', 'Min-p', 0.05, 'number', 0, 1, 0.01],
  ['typical_p', 'Typical-p', 1, 'number', 0, 1, 0.01],
  ['epsilon_cutoff', 'Epsilon cutoff', 0, 'number', 0, 0.99, 0.0001],
  ['eta_cutoff', 'Eta cutoff', 0, 'number', 0, 0.99, 0.0001],
  ['dynatemp_range', 'Dynamic temperature range', 0, 'number', 0, 5, 0.05],
  ['dynatemp_exponent', 'Dynamic temperature exponent', 1, 'number', 0, 10, 0.1],
  ['top_n_sigma', 'Top-n-sigma (0: off)', 0, 'number', 0, 100, 0.1],
  ['min_keep', 'Min tokens kept by truncation', 0, 'number', 0, 1000, 1],
  ['xtc_probability', 'XTC probability', 0, 'number', 0, 1, 0.01],
  ['xtc_threshold', 'XTC threshold', 0.1, 'number', 0, 1, 0.01],
  ['mirostat', 'Mirostat (0: off, 1, 2)', 0, 'number', 0, 2, 1],
  ['mirostat_tau', 'Mirostat target entropy (tau)', 5, 'number', 0, 100, 0.1],
  ['mirostat_eta', 'Mirostat learning rate (eta)', 0.1, 'number', 0, 1, 0.01],
  ['repetition_penalty', 'Repetition penalty', 1, 'number', 0.1, 10, 0.05],
  ['repeat_last_n', 'Penalty window (-1: all)', 64, 'number', -1, 100000, 1],
  ['presence_penalty', 'Presence penalty', 0, 'number', -2, 2, 0.1],
  ['frequency_penalty', 'Frequency penalty', 0, 'number', -2, 2, 0.1],
  ['no_repeat_ngram_size', 'No-repeat n-gram size', 0, 'number', 0, 100, 1],
  ['dry_multiplier', 'DRY multiplier (0: off)', 0, 'number', 0, 100, 0.1],
  ['dry_base', 'DRY base', 1.75, 'number', 1, 100, 0.05],
  ['dry_allowed_length', 'DRY allowed length', 2, 'number', 1, 1000, 1],
  ['dry_penalty_last_n', 'DRY window (-1: all)', -1, 'number', -1, 100000, 1],
  ['dry_sequence_breakers', 'DRY sequence breakers (one per line; empty: the defaults)', '', 'lines', 64],
  ['samplers', 'Stage order (e.g. top_k;temperature; empty: the default)', '', 'text'],
  ['min_tokens', 'Min tokens', 0, 'number', 0, 100000, 1],
  ['max_tokens', 'Max tokens (0: no limit)', 256, 'number', 0, 100000, 1],
  ['seed', 'Seed (empty: random)', '', 'number', 0, 2 ** 53, 1],
  ['stop', 'Stop strings (one per line)', '', 'lines', 16],
  ['ignore_eos', 'Ignore end of generation', false, 'checkbox'],
];

const state = { messages: [], busy: null, inspecting: null };

function buildSettings() {
  const box = $('samplers');
  for (const [name, label, def, kind, min, max, step] of SAMPLERS) {
    const id = `set-${name}`;
    if (kind === 'checkbox') {
      const l = document.createElement('label');
      l.className = 'check';
      l.innerHTML = `<input type="checkbox" id="${id}"> `;
      l.append(label);
      box.append(l);
      continue;
    }
    const l = document.createElement('label');
    l.htmlFor = id;
    l.textContent = label;
    const input = document.createElement(kind === 'lines' ? 'textarea' : 'input');
    input.id = id;
    if (kind === 'number') Object.assign(input, { type: 'number', min, max, step });
    if (kind === 'lines') input.rows = 2;
    input.value = String(def);
    box.append(l, input);
  }
  $('api-key').value = sessionStorage.getItem('nucleus-key') || '';
  $('api-key').addEventListener('change', () => sessionStorage.setItem('nucleus-key', $('api-key').value));
}

// The request's sampling fields from the panel (empty fields are left to the server).
function settings() {
  const out = {};
  for (const [name, , , kind, most] of SAMPLERS) {
    const input = $(`set-${name}`);
    if (kind === 'checkbox') { if (input.checked) out[name] = true; continue; }
    if (kind === 'lines') {
      const lines = input.value.split('\n').filter((x) => x.length);
      if (lines.length) out[name] = lines.slice(0, most);
      continue;
    }
    if (input.value === '') continue;
    if (kind === 'text') { out[name] = input.value; continue; }
    const v = Number(input.value);
    if (name === 'max_tokens' && v === 0) continue;
    out[name] = v;
  }
  return out;
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api-key').value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// POST body to path and call onEvent with every server-sent event's JSON; resolves at [DONE].
async function stream(path, body, signal, onEvent) {
  const r = await fetch(path, { method: 'POST', headers: headers(), body: JSON.stringify(body), signal });
  if (!r.ok) {
    let msg = `${r.status}`;
    try { msg += `: ${(await r.json()).error.message}`; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        onEvent(j);
      }
    }
  }
}

// ---- Messages ------------------------------------------------------------------------------

function newMessage(role, text = '') {
  const m = { role, text, steps: [], prompt: null, settings: null, stats: '', showTokens: false, node: null };
  state.messages.push(m);
  return m;
}

function button(label, cls, onClick, extra = {}) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = cls;
  b.textContent = label;
  b.addEventListener('click', onClick);
  for (const [k, v] of Object.entries(extra)) b.setAttribute(k, v);
  return b;
}

// A token's colour: its probability in the distribution it was drawn from, red (unlikely) to
// green (likely).
function tokenButton(m, step, i) {
  const b = button(step.eog ? '⏎' : step.piece || '∅', 'tok', () => inspect(m, i, b),
                   { 'data-step': String(i), 'aria-label': `token ${i}: ${JSON.stringify(step.piece)}, p ${step.p.toFixed(3)}` });
  b.style.backgroundColor = `hsl(${Math.round(120 * step.p)}, 70%, 85%)`;
  return b;
}

function renderBody(m) {
  const body = m.node.querySelector('.body');
  if (m.role === 'assistant' && m.showTokens) {
    body.classList.add('tokens');
    body.replaceChildren(...m.steps.map((s, i) => tokenButton(m, s, i)));
  } else {
    body.classList.remove('tokens');
    if (m.role === 'assistant') body.innerHTML = renderMarkdown(m.text); // escaped by the renderer
    else body.textContent = m.text;
  }
  m.node.querySelector('.stats').textContent = m.stats;
}

function renderMessage(m) {
  if (!m.node) {
    m.node = document.createElement('article');
    m.node.className = `msg ${m.role}`;
    const who = document.createElement('h2');
    who.className = 'who';
    who.textContent = m.role === 'user' ? 'You' : m.branchOf != null ? `Assistant (branch at step ${m.branchOf})` : 'Assistant';
    const body = document.createElement('div');
    body.className = 'body';
    const stats = document.createElement('p');
    stats.className = 'stats muted';
    m.node.append(who, body, stats);
    if (m.role === 'assistant') {
      const tools = document.createElement('div');
      tools.className = 'tools';
      tools.append(
        button('Tokens', 'show-tokens', () => { m.showTokens = !m.showTokens; renderMessage(m); }, { 'aria-pressed': 'false' }),
        button('Copy', 'copy', () => copy(m.text)),
        button('Regenerate', 'regenerate', () => regenerate(m)));
      m.node.append(tools);
    }
    $('log').append(m.node);
  }
  const t = m.node.querySelector('.show-tokens');
  if (t) { t.setAttribute('aria-pressed', String(m.showTokens)); t.disabled = !m.steps.length; }
  renderBody(m);
}

async function copy(text) {
  try { await navigator.clipboard.writeText(text); } catch { /* no clipboard: nothing to do */ }
}

// ---- Generation ----------------------------------------------------------------------------

function setBusy(controller) {
  state.busy = controller;
  $('send').disabled = !!controller;
  $('stop').hidden = !controller;
  for (const b of document.querySelectorAll('.regenerate, .branch')) b.disabled = !!controller;
}

// Run a request that streams into assistant message m: text, steps, time to first token, tokens/s.
async function generate(m, path, body) {
  const controller = new AbortController();
  setBusy(controller);
  const t0 = performance.now();
  let tFirst = 0, nTokens = 0, pending = false;
  const redraw = () => { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; renderMessage(m); }); } };
  renderMessage(m);
  m.node.setAttribute('aria-busy', 'true');
  try {
    await stream(path, body, controller.signal, (j) => {
      const c = j.choices && j.choices[0];
      if (!c) return;
      const piece = c.delta ? c.delta.content : c.text;
      const x = c.nucleus_explain;
      if (x && x.prompt_tokens) m.prompt = x.prompt_tokens;
      if (x && x.steps.length) { m.steps.push(...x.steps); nTokens += x.steps.length; }
      if (piece) m.text += piece;
      if ((piece || (x && x.steps.length)) && !tFirst) tFirst = performance.now();
      if (c.finish_reason) m.finish = c.finish_reason;
      const dt = (performance.now() - tFirst) / 1000;
      m.stats = `${nTokens} tokens · ${dt > 0 && nTokens > 1 ? ((nTokens - 1) / dt).toFixed(1) : '–'} tok/s · ` +
                `first token ${tFirst ? Math.round(tFirst - t0) : '–'} ms`;
      redraw();
    });
  } catch (e) {
    m.stats += controller.signal.aborted ? ' · stopped' : ` · error: ${e.message}`;
    if (controller.signal.aborted) m.stopped = true;
  }
  m.node.setAttribute('aria-busy', 'false');
  m.node.dataset.done = 'true';
  setBusy(null);
  renderMessage(m);
  if (!$('model-pick').hidden) showModel(); /* the picked model is loaded now, another maybe not */
}

function chatMessages(upTo) {
  const out = [];
  const system = $('system').value.trim();
  if (system) out.push({ role: 'system', content: system });
  for (const m of state.messages.slice(0, upTo)) if (!m.superseded) out.push({ role: m.role, content: m.text });
  return out;
}

function requestBody(extra) {
  const s = settings();
  const body = { ...s, stream: true, ...extra };
  if (!$('model-pick').hidden) body.model = $('model-pick').value;
  if ($('explain').checked) body.nucleus_explain = { top_n: EXPLAIN_TOP_N };
  return body;
}

async function send(text) {
  const u = newMessage('user', text);
  renderMessage(u);
  const a = newMessage('assistant');
  a.settings = settings();
  await generate(a, '/v1/chat/completions', requestBody({ messages: chatMessages(state.messages.length - 1) }));
}

async function regenerate(m) {
  if (state.busy) return;
  const i = state.messages.indexOf(m);
  Object.assign(m, { text: '', steps: [], prompt: null, stats: '', settings: settings(), showTokens: false, superseded: false });
  m.node.classList.remove('superseded');
  m.node.querySelector('.who').textContent = m.branchOf != null ? `Assistant (branch at step ${m.branchOf})` : 'Assistant';
  for (const later of state.messages.splice(i + 1)) later.node.remove();
  await generate(m, '/v1/chat/completions', requestBody({ messages: chatMessages(i) }));
}

// Continue m from its step i with token t instead: /v1/completions with the prompt's ids, the
// tokens before step i and t, as a new reply whose text starts with the tokens up to t.
async function branch(m, i, t) {
  if (state.busy || !m.prompt) return;
  const kept = m.steps.slice(0, i);
  const b = newMessage('assistant', kept.map((s) => s.piece).join('') + t.piece);
  b.branchOf = i;
  // the branch takes the reply's place in the conversation; the reply stays on screen
  m.superseded = true;
  m.node.classList.add('superseded');
  m.node.querySelector('.who').textContent += ' (replaced by the branch below)';
  b.settings = m.settings;
  b.steps = kept.slice();
  b.prompt = null;
  closeInspector();
  const ids = [...m.prompt, ...kept.map((s) => s.token), t.token];
  const chatPrompt = m.prompt;
  await generate(b, '/v1/completions', requestBody({ ...m.settings, prompt: ids }));
  // the branch's own prompt is the chat's plus its forced tokens: keep the chat's for later branches
  b.prompt = chatPrompt;
  b.steps.splice(i, 0, { ...forcedStep(t, i) });
  b.steps.forEach((s, k) => { s.step = k; });
  renderMessage(b);
}

// The chosen token of a branch: picked by hand, so it has no draw of its own.
function forcedStep(t, i) {
  return { step: i, token: t.token, piece: t.piece, p: 1, n_candidates: 1, eog: false, forced: true,
           stages: [{ what: 'picked by hand (branch)' }], raw: { n_vocab: 1, logsumexp: 0, token_logit: 0, top: [] } };
}

// ---- Inspector -----------------------------------------------------------------------------

function inspect(m, i, from) {
  state.inspecting = from;
  for (const b of document.querySelectorAll('.tok[aria-current]')) b.removeAttribute('aria-current');
  from.setAttribute('aria-current', 'true');
  openInspector($('inspector'), m.steps[i], m.settings || {}, (t) => branch(m, i, t), closeInspector);
  for (const b of document.querySelectorAll('.branch')) b.disabled = !!state.busy || m.steps[i].forced;
}

function closeInspector() {
  $('inspector').hidden = true;
  if (state.inspecting && state.inspecting.isConnected) state.inspecting.focus();
  state.inspecting = null;
}

// ---- Start ---------------------------------------------------------------------------------

// The model, or with several (router mode) a picker of them with their status; requests name
// the one picked, which the server loads if it has to.
async function showModel() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    const j = await r.json();
    const pick = $('model-pick');
    pick.hidden = !r.ok || j.data.length < 2;
    if (!pick.hidden) {
      const chosen = pick.value;
      pick.replaceChildren(...j.data.map((m) => {
        const o = document.createElement('option');
        o.value = m.id;
        o.textContent = m.status && m.status.value !== 'loaded' ? `${m.id} (${m.status.value})` : m.id;
        return o;
      }));
      if (j.data.some((m) => m.id === chosen)) pick.value = chosen;
    }
    $('model').textContent = !r.ok ? `the API says ${r.status}: set the API key in Settings` : pick.hidden ? j.data[0].id : '';
  } catch { $('model').textContent = 'the server does not answer'; }
}

function init() {
  buildSettings();
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('input').value.trim();
    if (!text || state.busy) return;
    $('input').value = '';
    send(text);
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); $('composer').requestSubmit(); }
  });
  $('stop').addEventListener('click', () => state.busy && state.busy.abort());
  $('settings-toggle').addEventListener('click', () => {
    const p = $('settings');
    p.hidden = !p.hidden;
    $('settings-toggle').setAttribute('aria-expanded', String(!p.hidden));
  });
  $('clear').addEventListener('click', () => {
    if (state.busy) state.busy.abort();
    state.messages = [];
    $('log').replaceChildren();
    closeInspector();
  });
  $('api-key').addEventListener('change', showModel);
  $('log').addEventListener('click', (e) => {
    const b = e.target.closest('.copy-code');
    if (b) copy(b.parentElement.querySelector('code').textContent);
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('inspector').hidden) closeInspector(); });
  showModel();
}

init();
