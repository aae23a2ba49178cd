#!/usr/bin/python3
"""nucleus perplexity against the exact float64 forward pass (shared/tools/reference-forward).

  perplexity_check.py ppl BIN REF MODEL TEXT CTX [STRIDE]
      the mean negative log-likelihood, the windows and the scored tokens of `nucleus perplexity`
      equal those computed here from the reference's log-probabilities, window by window
  perplexity_check.py q8_0 REF IN.gguf OUT.gguf
      OUT: IN with its F32 matrices whose rows are multiples of 32 in Q8_0, rounded as llama.cpp's
      quantize_row_q8_0 does (scale max|x| / 127 as F16, q = round(x / scale)); the rest as they were
  perplexity_check.py kld BIN REF BASE_MODEL MODEL TEXT CTX
      the mean KL divergence of MODEL from BASE_MODEL and how often both rank the same token first,
      from `nucleus perplexity --kl-divergence`, equal those computed with numpy from the
      reference's full distributions of both models

The windows are the documented scheme (README, perplexity): chunks of CTX tokens scoring positions
CTX/2 + 1 .. CTX - 1, or sliding windows STRIDE apart scoring their last STRIDE tokens (the first
all, a last one moved back to the text's end scoring what is left); the first token of a window is
BOS when the vocabulary adds one. Prints one line per failed check and "PASS FAIL" counts last.
"""
import json, math, struct, subprocess, sys, tempfile

import numpy as np

passed = failed = 0


def check(what, good, detail=""):
    global passed, failed
    if good: passed += 1
    else:
        failed += 1
        print("FAIL: %s %s" % (what, detail))


def tokens(bin_, model, text):
    ids = json.loads(subprocess.run([bin_, "tokenize", "-m", model, "-f", text, "--json"], capture_output=True,
                                    check=True).stdout)
    plain = json.loads(subprocess.run([bin_, "tokenize", "-m", model, "-f", text, "--json", "--no-bos"],
                                      capture_output=True, check=True).stdout)
    return ids, (ids[0] if len(ids) == len(plain) + 1 else None)


def windows(n, ctx, stride):
    if not stride: return [(k * ctx, ctx // 2 + 1) for k in range(n // ctx)]
    out, s = [(0, 1)], 0
    while s + stride + ctx <= n:
        s += stride
        out.append((s, ctx - stride))
    if s + ctx < n: out.append((n - ctx, ctx - (n - s - ctx)))
    return out


def reference(ref, model, ids):
    """log-probabilities (positions x vocab) after each of ids: the whole vocabulary as the top"""
    r = json.loads(subprocess.run(["/usr/bin/python3", ref, model, "--ids", ",".join(map(str, ids)), "--all", "--top",
                                   "1000000"], capture_output=True, check=True).stdout)
    lp = np.full((len(ids), len(r["top_logprobs"][0])), -np.inf)
    for i, row in enumerate(r["top_logprobs"]):
        for tid, v in row: lp[i, tid] = v
    return lp


def window_lps(ref, model, ids, bos, ctx, stride):
    """per window: (target ids, log-probability rows predicting them)"""
    out = []
    for start, lo in windows(len(ids), ctx, stride):
        w = ids[start:start + ctx - 1]
        if bos is not None: w = [bos] + w[1:]
        lp = reference(ref, model, w)
        out.append((ids[start + lo:start + ctx], lp[lo - 1:ctx - 1]))
    return out


def run(bin_, model, text, ctx, extra):
    r = subprocess.run([bin_, "perplexity", "-m", model, "-f", text, "-c", str(ctx), "--json", "--cache-type", "f32",
                        "-t", "2"] + extra, capture_output=True, text=True)
    if r.returncode:
        check("nucleus perplexity %s" % " ".join(extra), False, r.stderr)
        return None
    return json.loads(r.stdout)


def q8_0(ref, src, dst):
    from importlib.machinery import SourceFileLoader
    g = SourceFileLoader("reference_forward", ref).load_module().GGUF(src)
    n_kv = struct.unpack_from("<Q", g.buf, 16)[0]
    g.pos = 24
    for _ in range(n_kv):
        g.string()
        t, = g.unpack("I")
        g.value(t)
    infos, blobs, off = b"", [], 0
    for name, (dims, typ, _) in g.tensors.items():
        w = g.tensor(name)
        if typ == 0 and len(dims) == 2 and dims[0] % 32 == 0 and not name.endswith(("norm.weight", "attn_output.weight")):
            x = w.astype(np.float32).reshape(-1, 32)
            d = (np.abs(x).max(axis=1) / 127).astype(np.float32)
            inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0).astype(np.float32)
            q = np.rint(x * inv[:, None]).astype(np.int8)
            blob = np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()
            typ = 8
        else:
            blob = bytes(g.buf[g.data + g.tensors[name][2]:][:len(w.tobytes()) // 8 * (4 if typ == 0 else 2)])
            if typ not in (0, 1): sys.exit("q8_0: %s has type %d" % (name, typ))
        nb = name.encode()
        infos += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        infos += struct.pack("<IQ", typ, off)
        blobs.append(blob)
        off += (len(blob) + 31) // 32 * 32
    with open(dst, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(g.tensors), n_kv) + g.buf[24:g.pos] + infos)
        f.write(b"\0" * (-f.tell() % 32))
        for b in blobs: f.write(b + b"\0" * (-len(b) % 32))


def main():
    if sys.argv[1] == "q8_0": return q8_0(*sys.argv[2:5])
    mode, bin_, ref = sys.argv[1:4]
    if mode == "ppl":
        model, text, ctx = sys.argv[4], sys.argv[5], int(sys.argv[6])
        stride = int(sys.argv[7]) if len(sys.argv) > 7 else 0
        ids, bos = tokens(bin_, model, text)
        nll = [-lp[j, t] for tg, lp in window_lps(ref, model, ids, bos, ctx, stride) for j, t in enumerate(tg)]
        got = run(bin_, model, text, ctx, ["--stride", str(stride)] if stride else [])
        name = "ctx %d%s" % (ctx, " stride %d" % stride if stride else "")
        if got:
            want_n = len(windows(len(ids), ctx, stride))
            check(name + " windows", got["windows"] == want_n, "%s != %d" % (got["windows"], want_n))
            check(name + " scored", got["scored"] == len(nll), "%s != %d" % (got["scored"], len(nll)))
            if stride: check(name + " scores every token once", got["scored"] == len(ids) - 1)
            mean = float(np.mean(nll))
            check(name + " mean NLL", abs(got["nll"] - mean) < 1e-5, "nucleus %.7f, reference %.7f" % (got["nll"], mean))
            check(name + " PPL", abs(got["ppl"] / math.exp(mean) - 1) < 5e-5, "nucleus %.6f, reference %.6f" %
                  (got["ppl"], math.exp(mean)))
            sd = float(np.std(nll) / math.sqrt(len(nll) - 1)) * math.exp(mean)
            check(name + " PPL uncertainty", abs(got["ppl_err"] / sd - 1) < 1e-3, "%.6f vs %.6f" % (got["ppl_err"], sd))
    else:
        base, model, text, ctx = sys.argv[4], sys.argv[5], sys.argv[6], int(sys.argv[7])
        ids, bos = tokens(bin_, model, text)
        kl, same, nll_q, nll_b = [], 0, [], []
        for (tg, lb), (_, lq) in zip(window_lps(ref, base, ids, bos, ctx, 0), window_lps(ref, model, ids, bos, ctx, 0)):
            for j, t in enumerate(tg):
                pb = np.exp(lb[j])
                kl.append(float(np.sum(pb * (lb[j] - lq[j]))))
                same += int(np.argmax(lb[j]) == np.argmax(lq[j]))
                nll_q.append(-lq[j, t]); nll_b.append(-lb[j, t])
        with tempfile.NamedTemporaryFile(suffix=".kld") as f:
            run(bin_, base, text, ctx, ["--kl-divergence-base", f.name])
            got = run(bin_, model, text, ctx, ["--kl-divergence-base", f.name, "--kl-divergence"])
        if got:
            want = float(np.mean(kl))
            check("KLD", abs(got["kld"] - want) < 0.005 * want + 1e-8, "nucleus %.8f, numpy %.8f" % (got["kld"], want))
            check("same top", abs(got["same_top"] * len(kl) - same) <= 1, "nucleus %.6f, numpy %d of %d" %
                  (got["same_top"], same, len(kl)))
            r = float(np.mean(nll_q) - np.mean(nll_b))
            check("ln(PPL(Q)/PPL(base))", abs(got["ln_ppl_ratio"] - r) < 2e-5, "nucleus %.7f, reference %.7f" %
                  (got["ln_ppl_ratio"], r))
            check("PPL(base)", abs(got["ppl_base"] / math.exp(np.mean(nll_b)) - 1) < 5e-5)
    print(passed, failed)


main()
