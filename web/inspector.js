// The decoding inspector: one generated token's step (the server's nucleus_explain record), its
// candidates as bars, and the distribution recomputed live from the step's raw logits.
//
// What the recomputation knows: the top N raw logits exactly, the log-sum-exp of all n_vocab of
// them, so the mass of the other n_vocab - N ("the tail") at temperature 1. At another
// temperature the tail is taken as n_vocab - N tokens of one logit holding that mass (exact at
// T = 1; at other temperatures an estimate). Whatever drops the tail (top-k with k <= N, a min-p
// or top-p cut inside the top N) makes the result exact. Stages run in the server's order:
// temperature, top-k, top-p, min-p.

const TAIL = -1; // the token id of the tail's pseudo-candidate

// [{token, piece, p}] after the chain, plus {token: TAIL, p, n} for the tail, most probable
// first, and the stages' report [{name, param, n_before, n_after, mass}].
export function recompute(raw, s) {
  const top = raw.top;
  const nRest = raw.n_vocab - top.length;
  const tail1 = Math.max(0, 1 - top.reduce((a, t) => a + Math.exp(t.logprob), 0));
  let cands;
  if (s.temperature <= 0) { // greedy: the most likely token alone
    cands = top.length ? [{ ...top[0], p: 1 }] : [];
    return { cands, stages: [{ name: 'temperature', param: 0, n_before: raw.n_vocab, n_after: 1, mass: 1 }] };
  }
  const T = s.temperature;
  const scaled = top.map((t) => t.logit / T);
  let tailLogit = nRest > 0 && tail1 > 0 ? (raw.logsumexp + Math.log(tail1 / nRest)) / T : -Infinity;
  const m = Math.max(scaled.length ? scaled[0] : -Infinity, tailLogit);
  let z = scaled.reduce((a, x) => a + Math.exp(x - m), 0) + (nRest > 0 ? nRest * Math.exp(tailLogit - m) : 0);
  cands = top.map((t, i) => ({ token: t.token, piece: t.piece, p: Math.exp(scaled[i] - m) / z }));
  if (nRest > 0 && tail1 > 0) cands.push({ token: TAIL, piece: '(other tokens)', p: nRest * Math.exp(tailLogit - m) / z, n: nRest });
  const stages = [{ name: 'temperature', param: T, n_before: raw.n_vocab, n_after: raw.n_vocab, mass: 1 }];
  const count = (c) => c.reduce((a, x) => a + (x.token === TAIL ? x.n : 1), 0);
  const stage = (name, param, keep) => {
    const before = count(cands);
    // the tail's share is an estimate away from temperature 1
    const approx = T !== 1 && cands.some((x) => x.token === TAIL);
    const kept = keep(cands);
    const mass = kept.reduce((a, x) => a + x.p, 0);
    cands = kept.map((x) => ({ ...x, p: x.p / mass }));
    stages.push({ name, param, n_before: before, n_after: count(cands), mass, approx });
  };
  if (s.top_k > 0) stage('top-k', s.top_k, (c) => {
    const named = c.filter((x) => x.token !== TAIL).slice(0, s.top_k);
    const t = c.find((x) => x.token === TAIL);
    const more = s.top_k - named.length; // past the top N: part of the tail, in proportion
    if (t && more > 0) named.push({ ...t, p: t.p * Math.min(1, more / t.n), n: Math.min(t.n, more) });
    return named;
  });
  if (s.top_p < 1) stage('top-p', s.top_p, (c) => {
    const kept = [];
    let cum = 0;
    for (const x of c) { kept.push(x); cum += x.p; if (cum >= s.top_p) break; }
    return kept;
  });
  if (s.min_p > 0) stage('min-p', s.min_p, (c) => {
    const pmax = c[0].p; // the tail's tokens are each below the top N's
    return c.filter((x, i) => i === 0 || (x.token === TAIL ? x.p / x.n : x.p) >= s.min_p * pmax);
  });
  return { cands, stages };
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

const showPiece = (s) => JSON.stringify(s).slice(1, -1) || '∅';
const fmt = (p) => (p >= 0.001 || p === 0 ? p.toFixed(3) : p.toExponential(1));

// A slider with its label and shown value.
function slider(id, label, min, max, step, value, onInput) {
  const out = el('output', { for: id, id: `${id}-value` }, String(value));
  const input = el('input', { type: 'range', id, min, max, step, value: String(value) });
  input.addEventListener('input', () => { out.textContent = input.value; onInput(Number(input.value)); });
  return el('div', { class: 'slider' }, el('label', { for: id }, label), input, out);
}

// Fill `panel` with the inspector for `step` (a nucleus_explain step) of a message generated with
// `settings`. onBranch(token) continues the message from this step with another token.
export function openInspector(panel, step, settings, onBranch, onClose) {
  const s = {
    temperature: settings.temperature ?? 1, top_k: settings.top_k ?? 0,
    top_p: settings.top_p ?? 1, min_p: settings.min_p ?? 0,
  };
  panel.replaceChildren();
  const bars = el('ol', { class: 'bars', id: 'bars', 'aria-label': 'Candidates after the sampler chain' });
  const report = el('ul', { class: 'stages', id: 'live-stages' });
  const draw = () => {
    const { cands, stages } = recompute(step.raw, s);
    const byToken = new Map(cands.map((c) => [c.token, c.p]));
    bars.replaceChildren(...step.raw.top.slice(0, 20).map((t) => {
      const p = byToken.get(t.token) ?? 0;
      const fill = el('span', { class: 'fill' });
      fill.style.width = `${(p * 100).toFixed(2)}%`;
      const raw1 = el('span', { class: 'raw1' });
      raw1.style.width = `${(Math.exp(t.logprob) * 100).toFixed(2)}%`;
      return el('li', { class: `bar${t.token === step.token ? ' chosen' : ''}${p === 0 ? ' dropped' : ''}`,
                        'data-token': String(t.token), 'data-p': String(p) },
        el('span', { class: 'piece' }, showPiece(t.piece)),
        el('span', { class: 'track', 'aria-hidden': 'true' }, raw1, fill),
        el('span', { class: 'p' }, fmt(p)),
        el('button', { type: 'button', class: 'branch', 'data-token': String(t.token),
                       'aria-label': `Branch here with ${showPiece(t.piece)}`, onclick: () => onBranch(t) }, 'Branch'));
    }));
    report.replaceChildren(...stages.map((x) => el('li', {},
      `${x.name} ${x.param}: kept ${x.n_after} of ${x.n_before}, mass ${x.approx ? '≈' : ''}${x.mass.toFixed(3)}`)));
  };
  panel.append(
    el('div', { class: 'inspector-head' },
      el('h2', {}, `Step ${step.step}: “${showPiece(step.piece)}”`),
      el('button', { type: 'button', id: 'close-inspector', onclick: onClose }, 'Close')),
    el('p', { class: 'draw', id: 'draw' },
      `Drew ${showPiece(step.piece)} (id ${step.token}) with p ${fmt(step.p)} from ${step.n_candidates} candidates` +
      (step.eog ? ' — end of generation' : '')),
    el('h3', {}, 'What each stage did'),
    el('ul', { class: 'stages', id: 'server-stages' }, ...step.stages.map((x) => el('li', {}, x.what))),
    el('h3', {}, 'Try other settings'),
    slider('sl-temp', 'Temperature', 0, 2, 0.05, s.temperature, (v) => { s.temperature = v; draw(); }),
    slider('sl-topk', 'Top-k (0: off)', 0, 200, 1, s.top_k, (v) => { s.top_k = v; draw(); }),
    slider('sl-topp', 'Top-p', 0, 1, 0.01, s.top_p, (v) => { s.top_p = v; draw(); }),
    slider('sl-minp', 'Min-p', 0, 1, 0.01, s.min_p, (v) => { s.min_p = v; draw(); }),
    report,
    el('h3', {}, 'Candidates'),
    el('p', { class: 'muted legend' }, 'Bar: probability after these settings; pale: at temperature 1 before any cut.'),
    bars);
  draw();
  panel.hidden = false;
  panel.focus();
}
