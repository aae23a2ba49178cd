#!/usr/bin/python3
"""The exact float64 forward pass of shared/tools/reference-forward with a quantised KV cache:
every key (after its rotation) and value is rounded through GGML's Q8_0 or Q4_0 blocks (32
elements of a head and an f16 scale, ggml's reference quantisers quantize_row_q8_0_ref /
quantize_row_q4_0_ref, computed in f32 as they are) before attention reads it; everything else is
the reference's own arithmetic. So an engine's log-probabilities with --cache-type-k / -v can be
judged against what that cache type computes exactly, apart from the small rounding of its own
float32 keys and values.

    kv_quant_reference.py MODEL --ids 1,2,3 [--top 5] --cache-type-k q8_0 --cache-type-v q4_0

prints {"ids", "top_logprobs"} at every position, as `reference-forward --all` does.
"""
import argparse, importlib.machinery, importlib.util, json, math, os, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED", os.path.join(HERE, "..", "..", "..", "shared"))


def load_reference():
    path = os.path.join(SHARED, "tools", "reference-forward")
    loader = importlib.machinery.SourceFileLoader("reference_forward", path)
    spec = importlib.util.spec_from_loader("reference_forward", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def q8_0(x):
    """Blocks of 32 along the last axis: d = max|x| / 127, q = round(x / d) (half away from zero),
    d stored as f16."""
    b = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    y = b * inv
    q = np.sign(y) * np.floor(np.abs(y) + np.float32(0.5))
    return (q * d.astype(np.float16).astype(np.float32)).reshape(x.shape).astype(np.float64)


def q4_0(x):
    """Blocks of 32 along the last axis: d = m / -8 for the element m of largest magnitude,
    q = min(15, trunc(x / d + 8.5)), value (q - 8) * d with d stored as f16."""
    b = x.astype(np.float32).reshape(-1, 32)
    m = np.take_along_axis(b, np.abs(b).argmax(axis=1)[:, None], axis=1)
    d = (m / np.float32(-8)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0)).astype(np.float32)
    q = np.minimum(np.float32(15), np.trunc(b * inv + np.float32(8.5)))
    return ((q - 8) * d.astype(np.float16).astype(np.float32)).reshape(x.shape).astype(np.float64)


def f16(x):
    return x.astype(np.float16).astype(np.float64)


ROUND = {"f32": lambda x: x, "f16": f16, "q8_0": q8_0, "q4_0": q4_0}


def logits(m, ids, round_k, round_v):
    """Model.logits of reference-forward, with keys and values rounded as the cache stores them."""
    T = len(ids); x = m.emb[ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    rep = m.n_head // m.n_head_kv
    for L in m.layers:
        h = m.rms(x, L["attn_norm"])
        q, k, v = h @ L["attn_q"].T, h @ L["attn_k"].T, h @ L["attn_v"].T
        if L["attn_q_b"] is not None: q, k, v = q + L["attn_q_b"], k + L["attn_k_b"], v + L["attn_v_b"]
        q = m.rope(q.reshape(T, m.n_head, m.hd), T)
        k = round_k(m.rope(k.reshape(T, m.n_head_kv, m.hd), T))
        v = round_v(v.reshape(T, m.n_head_kv, m.hd))
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / math.sqrt(m.hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True)); att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, m.n_embd)
        x = x + o @ L["attn_output"].T
        h = m.rms(x, L["ffn_norm"])
        g_, u = h @ L["ffn_gate"].T, h @ L["ffn_up"].T
        x = x + (g_ / (1 + np.exp(-g_)) * u) @ L["ffn_down"].T
    return m.rms(x, m.norm) @ m.out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model"); ap.add_argument("--ids", required=True)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--cache-type-k", default="f16", choices=sorted(ROUND))
    ap.add_argument("--cache-type-v", default="f16", choices=sorted(ROUND))
    a = ap.parse_args()
    ref = load_reference()
    m = ref.Model(a.model)
    ids = [int(t) for t in a.ids.split(",") if t.strip()]
    z = logits(m, ids, ROUND[a.cache_type_k], ROUND[a.cache_type_v])
    print(json.dumps({"ids": ids, "top_logprobs": [ref.top(ref.logprobs(r), a.top) for r in z]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
