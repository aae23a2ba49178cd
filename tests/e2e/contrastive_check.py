#!/usr/bin/python3
"""Contrastive search (Su et al. 2022, transformers' penalty_alpha / top_k) recomputed in float64
with shared/tools/reference-forward's model, step by step, against `nucleus run --explain=json`'s
records: the candidates (top-k of the softmax), their probabilities, the largest cosine between
each candidate's final hidden state (after the final norm) and every earlier token's, and the
chosen token.

  contrastive_check.py REFERENCE_FORWARD MODEL.gguf ALPHA K PROMPT_IDS < explain.jsonl
"""
import importlib.machinery, importlib.util, json, sys
import numpy as np

ref_path, model_path, alpha, k, ids = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
loader = importlib.machinery.SourceFileLoader("reference_forward", ref_path)
spec = importlib.util.spec_from_loader("reference_forward", loader)
ref = importlib.util.module_from_spec(spec)
loader.exec_module(ref)
m = ref.Model(model_path)
out_w = m.out


def run(tokens):
    """Logits of the last position and the final hidden states of every position."""
    m.out = np.eye(m.n_embd)  # the output projection's input: rms(x) * norm
    hidden = m.logits(tokens)
    m.out = out_w
    return hidden[-1] @ out_w.T, hidden


steps = [json.loads(line) for line in sys.stdin if line.startswith("{")]
tokens = [int(t) for t in ids.split(",")]
assert steps, "no explain records"
worst_p = worst_cos = 0.0
for n, step in enumerate(steps):
    logits, ctx = run(tokens)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    cand = np.argsort(-p, kind="stable")[:k]  # most probable first, lower id first on ties
    unit = lambda v: v / np.linalg.norm(v)
    ctx_unit = np.array([unit(h) for h in ctx])
    scores, coss = [], []
    for v in cand:
        _, hid = run(tokens + [int(v)])
        cos = float(np.max(ctx_unit @ unit(hid[-1])))
        coss.append(cos)
        scores.append((1 - alpha) * p[v] - alpha * cos)
    chosen = int(cand[int(np.argmax(scores))])
    got = {int(s["what"].split("candidate ")[1].split()[0]): s
           for s in step["stages"] if s["name"] == "contrastive" and "candidate " in s["what"]}
    # the same candidates (their order may differ only where float32 and float64 disagree on a tie)
    assert sorted(got) == sorted(int(v) for v in cand), (n, list(got), list(cand))
    for v, cos in zip(cand, coss):
        worst_p = max(worst_p, abs(got[int(v)]["mass"] - p[v]))
        worst_cos = max(worst_cos, abs(got[int(v)]["param"] - cos))
    near = sorted(scores, reverse=True)
    assert step["token"] == chosen or near[0] - near[1] < 1e-3, (n, step["token"], chosen, scores)
    tokens.append(step["token"])  # the engine's text goes on, so its next step is checked
assert worst_p < 2e-3 and worst_cos < 2e-3, (worst_p, worst_cos)
print("contrastive: %d steps match the float64 reference (largest deviation: p %.2e, cosine %.2e)"
      % (len(steps), worst_p, worst_cos))
