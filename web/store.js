// The conversations kept in the browser (localStorage, this origin's): their list, which one is
// open, and each one's messages as text. A reply's decoding records (the inspector's steps, about
// 60 bytes per candidate per token) are not kept: they would fill the browser's few megabytes in a
// few replies, so after a reload a reply has its text but no Tokens view.

const KEY = 'nucleus-conversations';
// What a message keeps: the rest (its steps, the prompt's ids, its DOM node) lives in the page.
const FIELDS = ['role', 'text', 'reasoning', 'stats', 'branchOf', 'superseded', 'stopped'];

let memory = null; // when the browser keeps nothing (storage disabled): this page's list only

function read() {
  if (memory) return memory;
  try {
    const j = JSON.parse(localStorage.getItem(KEY) || 'null');
    if (j && j.version === 1 && Array.isArray(j.conversations)) return j;
  } catch { /* unreadable or disabled: start empty */ }
  return { version: 1, current: null, conversations: [] };
}

// Write the whole list; false when the browser refused (full, or disabled).
function write(all) {
  try {
    localStorage.setItem(KEY, JSON.stringify(all));
    memory = null;
    return true;
  } catch {
    memory = all;
    return false;
  }
}

export function newId() {
  return `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
}

// The conversations, most recently changed first, and the id of the one last open.
export function listConversations() {
  const all = read();
  return { current: all.current, conversations: [...all.conversations].sort((a, b) => b.updated - a.updated) };
}

export function getConversation(id) {
  return read().conversations.find((c) => c.id === id) || null;
}

// Store conversation c ({id, title, named, messages}) with its messages' kept fields; it becomes
// the current one. false: the browser did not keep it.
export function saveConversation(c, messages) {
  const all = read();
  const kept = messages.map((m) => Object.fromEntries(FIELDS.filter((f) => m[f] !== undefined && m[f] !== null && !(f === 'reasoning' && !m[f]))
    .map((f) => [f, m[f]])));
  const record = { id: c.id, title: c.title, named: !!c.named, updated: Date.now(), messages: kept };
  const i = all.conversations.findIndex((x) => x.id === c.id);
  if (i >= 0) all.conversations[i] = record;
  else all.conversations.push(record);
  all.current = c.id;
  return write(all);
}

export function setCurrent(id) {
  const all = read();
  all.current = id;
  return write(all);
}

export function renameConversation(id, title) {
  const all = read();
  const c = all.conversations.find((x) => x.id === id);
  if (!c) return false;
  c.title = title;
  c.named = true;
  return write(all);
}

export function deleteConversation(id) {
  const all = read();
  all.conversations = all.conversations.filter((x) => x.id !== id);
  if (all.current === id) all.current = null;
  return write(all);
}
