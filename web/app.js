// The chat page: a conversation streamed from /v1/chat/completions with nucleus_explain on, each
// reply's tokens inspectable (inspector.js), branches continued through /v1/completions with the
// token ids up to the branch point; the conversations kept in the browser (store.js) with a list
// to switch, rename and delete them, and a first screen with the model and a few prompts.
import { renderMarkdown } from './markdown.js';
import { openInspector } from './inspector.js';
import * as store from './store.js';

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

const state = { messages: [], busy: null, inspecting: null, conv: null, model: '' };

// The first screen's prompts, for a model of any size.
const STARTERS = [
  'Tell me a short story about a cat who learns to fly.',
  'Explain how a rainbow forms, in three sentences.',
  'Write a haiku about the sea.',
  'Give me three ideas for a rainy afternoon.',
];

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
  try { $('api-key').value = sessionStorage.getItem('nucleus-key') || ''; } catch { /* storage disabled */ }
  $('api-key').addEventListener('change', () => {
    try { sessionStorage.setItem('nucleus-key', $('api-key').value); } catch { /* not kept: typed again after a reload */ }
  });
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

// A message at position `at` of the conversation (default: its end).
function newMessage(role, text = '', at = state.messages.length) {
  const m = { role, text, reasoning: '', steps: [], prompt: null, settings: null, stats: '', showTokens: false, node: null };
  state.messages.splice(at, 0, m);
  return m;
}

// "You" / "Assistant", what a branch is, and why a message is left out of the conversation.
function whoText(m) {
  let t = m.role === 'user' ? 'You' : m.branchOf != null ? `Assistant (branch at step ${m.branchOf})` : 'Assistant';
  if (m.superseded === 'branch') t += ' (replaced by the branch below)';
  else if (m.superseded) t += ' (left out: a branch above took the conversation elsewhere)';
  return t;
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

// The reasoning the server read out of the reply (reasoning_content): a collapsible block above
// the answer, open while it streams and the answer has not started, unless the reader toggled it.
function renderThinking(m) {
  const th = m.node.querySelector('.thinking');
  if (!th) return;
  th.hidden = !m.reasoning;
  th.querySelector('.thinking-body').textContent = m.reasoning || '';
  const streaming = m.node.getAttribute('aria-busy') === 'true';
  if (!m.thinkingToggled) th.open = streaming && !m.text;
  th.querySelector('summary').textContent = streaming && !m.text ? 'Thinking…' : 'Thinking';
}

function renderBody(m) {
  renderThinking(m);
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
    if (m.branchOf != null) m.node.dataset.branch = String(m.branchOf);
    const who = document.createElement('h2');
    who.className = 'who';
    const body = document.createElement('div');
    body.className = 'body';
    const stats = document.createElement('p');
    stats.className = 'stats muted';
    m.node.append(who);
    if (m.role === 'assistant') {
      const th = document.createElement('details');
      th.className = 'thinking';
      th.hidden = true;
      const summary = document.createElement('summary');
      summary.textContent = 'Thinking';
      summary.addEventListener('click', () => { m.thinkingToggled = true; });
      const tb = document.createElement('div');
      tb.className = 'thinking-body';
      th.append(summary, tb);
      m.node.append(th);
    }
    m.node.append(body, stats);
    if (m.role === 'assistant') {
      const tools = document.createElement('div');
      tools.className = 'tools';
      tools.append(
        button('Tokens', 'show-tokens', () => { m.showTokens = !m.showTokens; renderMessage(m); }, { 'aria-pressed': 'false' }),
        button('Copy', 'copy', () => copy(m.text)),
        button('Regenerate', 'regenerate', () => regenerate(m)));
      m.node.append(tools);
    }
    // in its place: before the next message that is on screen (a branch goes under its reply)
    const next = state.messages.slice(state.messages.indexOf(m) + 1).find((x) => x.node);
    $('log').insertBefore(m.node, next ? next.node : null);
    $('welcome')?.remove();
  }
  m.node.querySelector('.who').textContent = whoText(m);
  m.node.classList.toggle('superseded', !!m.superseded);
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
  const conv = state.conv;
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
      const thought = c.delta && c.delta.reasoning_content;
      if (piece) m.text += piece;
      if (thought) m.reasoning = (m.reasoning || '') + thought;
      if ((piece || thought || (x && x.steps.length)) && !tFirst) tFirst = performance.now();
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
  if (conv !== state.conv) return; // another conversation was opened meanwhile (this one was kept then)
  renderMessage(m);
  persist();
  if (!$('model-pick').hidden) showModel(); /* the picked model is loaded now, another maybe not */
}

function chatMessages(upTo) {
  const out = [];
  const system = $('system').value.trim();
  if (system) out.push({ role: 'system', content: system });
  // an earlier reply's reasoning goes back as reasoning_content: the template keeps or drops it
  for (const m of state.messages.slice(0, upTo)) {
    if (m.superseded) continue;
    out.push(m.reasoning ? { role: m.role, content: m.text, reasoning_content: m.reasoning } : { role: m.role, content: m.text });
  }
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
  persist();
  const a = newMessage('assistant');
  a.settings = settings();
  await generate(a, '/v1/chat/completions', requestBody({ messages: chatMessages(state.messages.length - 1) }));
}

async function regenerate(m) {
  if (state.busy) return;
  const i = state.messages.indexOf(m);
  Object.assign(m, { text: '', reasoning: '', thinkingToggled: false, steps: [], prompt: null, stats: '', settings: settings(), showTokens: false, superseded: false,
                     stopped: false });
  for (const later of state.messages.splice(i + 1)) later.node.remove();
  await generate(m, '/v1/chat/completions', requestBody({ messages: chatMessages(i) }));
}

// Continue m from its step i with token t instead: /v1/completions with the prompt's ids, the
// tokens before step i and t, as a new reply whose text starts with the tokens up to t.
async function branch(m, i, t) {
  if (state.busy || !m.prompt) return;
  const kept = m.steps.slice(0, i);
  const at = state.messages.indexOf(m) + 1;
  // what followed the reply followed what the branch replaces: left out of the conversation
  for (const later of state.messages.slice(at)) {
    if (!later.superseded) later.superseded = 'after';
    renderMessage(later);
  }
  const b = newMessage('assistant', kept.map((s) => s.piece).join('') + t.piece, at);
  b.branchOf = i;
  // the branch takes the reply's place in the conversation, right under it; the reply stays on screen
  m.superseded = 'branch';
  renderMessage(m);
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
    state.model = !r.ok ? '' : pick.hidden ? j.data[0].id : pick.value;
    $('model').textContent = !r.ok ? `the API says ${r.status}: set the API key in Settings` : pick.hidden ? state.model : '';
  } catch { $('model').textContent = 'the server does not answer'; }
  for (const e of document.querySelectorAll('#welcome .model-name')) e.textContent = state.model || 'the model';
}

// ---- Conversations ---------------------------------------------------------------------------

// The first screen of an empty conversation: the model, and prompts to start with.
function renderWelcome() {
  if (state.messages.length) return;
  const box = document.createElement('section');
  box.id = 'welcome';
  box.className = 'welcome';
  const h = document.createElement('h2');
  const name = document.createElement('span');
  name.className = 'model-name';
  name.textContent = state.model || 'the model';
  h.append('Chat with ', name);
  const note = document.createElement('p');
  note.className = 'muted';
  note.textContent = 'Served by nucleus from this machine. Conversations are kept in this browser; ' +
                     'Tokens under a reply opens the decoding inspector.';
  const starters = document.createElement('div');
  starters.className = 'starters';
  starters.setAttribute('aria-label', 'Prompts to start with');
  for (const text of STARTERS) starters.append(button(text, 'starter', () => { if (!state.busy) send(text); }));
  box.append(h, note, starters);
  $('log').replaceChildren(box);
}

// A title from the first thing said, until the user gives one.
function autoTitle() {
  const first = state.messages.find((m) => m.role === 'user');
  const t = first ? first.text.replace(/\s+/g, ' ').trim() : '';
  return t.length > 48 ? `${t.slice(0, 47)}…` : t;
}

// Keep the open conversation (once it has a message) and redraw the list.
function persist() {
  if (!state.messages.length) return;
  if (!state.conv.named) state.conv.title = autoTitle();
  const ok = store.saveConversation(state.conv, state.messages);
  const note = $('storage-note');
  note.hidden = ok;
  note.textContent = ok ? '' : 'This browser did not keep the conversation (its storage is full or disabled).';
  renderChatList();
}

// Open conversation `id` (null: a new, empty one); the open one is kept first.
function openConversation(id) {
  if (state.busy) state.busy.abort();
  persist();
  closeInspector();
  const c = id ? store.getConversation(id) : null;
  state.conv = c ? { id: c.id, title: c.title, named: c.named } : { id: store.newId(), title: '', named: false };
  state.messages = (c ? c.messages : []).map((x) => ({ ...x, steps: [], prompt: null, settings: null, showTokens: false, node: null }));
  $('log').replaceChildren();
  for (const m of state.messages) {
    renderMessage(m);
    m.node.dataset.done = 'true';
  }
  renderWelcome();
  if (c) store.setCurrent(c.id);
  renderChatList();
}

function renameInPlace(li, c) {
  const input = document.createElement('input');
  input.type = 'text';
  input.className = 'rename-input';
  input.value = c.title;
  input.setAttribute('aria-label', 'New name');
  let done = false;
  const finish = (commit) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (commit && title) {
      store.renameConversation(c.id, title);
      if (state.conv.id === c.id) Object.assign(state.conv, { title, named: true });
    }
    renderChatList();
    $('chat-list').querySelector(`[data-id="${c.id}"] .open`)?.focus();
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); finish(true); }
    if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); finish(false); }
  });
  input.addEventListener('blur', () => finish(true));
  li.querySelector('.open').replaceWith(input);
  input.focus();
  input.select();
}

function renderChatList() {
  const { conversations } = store.listConversations();
  $('chat-list').replaceChildren(...conversations.map((c) => {
    const li = document.createElement('li');
    li.dataset.id = c.id;
    const title = c.title || 'New chat';
    const open = button(title, 'open', () => { if (c.id !== state.conv.id) openConversation(c.id); });
    if (c.id === state.conv.id) open.setAttribute('aria-current', 'true');
    open.title = title;
    li.append(open,
      button('✎', 'rename', () => renameInPlace(li, c), { 'aria-label': `Rename “${title}”`, title: 'Rename' }),
      button('✕', 'delete', () => {
        if (!window.confirm(`Delete the conversation “${title}”?`)) return;
        store.deleteConversation(c.id);
        if (c.id === state.conv.id) {
          state.messages = []; // nothing left to keep
          const rest = store.listConversations().conversations;
          openConversation(rest.length ? rest[0].id : null);
        } else renderChatList();
      }, { 'aria-label': `Delete “${title}”`, title: 'Delete' }));
    return li;
  }));
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
  $('clear').addEventListener('click', () => openConversation(null));
  const toggle = (button_, panel) => {
    panel.hidden = !panel.hidden;
    button_.setAttribute('aria-expanded', String(!panel.hidden));
  };
  $('chats-toggle').addEventListener('click', () => toggle($('chats-toggle'), $('chats')));
  // the list beside the chat where there is room; behind its button on a narrow screen
  if (window.matchMedia('(min-width: 1100px)').matches) toggle($('chats-toggle'), $('chats'));
  $('api-key').addEventListener('change', showModel);
  $('model-pick').addEventListener('change', showModel); // the first screen names the model picked
  $('log').addEventListener('click', (e) => {
    const b = e.target.closest('.copy-code');
    if (b) copy(b.parentElement.querySelector('code').textContent);
  });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('inspector').hidden) closeInspector(); });
  const { current } = store.listConversations();
  openConversation(current && store.getConversation(current) ? current : null);
  showModel();
}

init();
