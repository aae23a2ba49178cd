#!/usr/bin/python3
"""Mean KL divergence of quantised models' next-token distributions from an unquantised model's.

usage: kl_divergence.py --nucleus BIN --base BASE.gguf --text FILE [--tokens N] MODEL...

The text is tokenized with BASE's vocabulary (first N tokens, 256 by default); `nucleus score --all`
gives every position's full distribution (teacher forcing) for BASE and for each MODEL. Prints one
line per MODEL: "MODEL KL TOP1" where KL is the mean over positions of sum p_base (log p_base -
log p_model) and TOP1 the fraction of positions whose most likely token is BASE's. Plain Python
(no numpy), so CI's interpreter runs it.
"""
import argparse, json, math, subprocess, sys


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd[:4]), r.returncode, r.stderr.strip()[-400:]))
    return r.stdout


def distributions(binary, model, ids):
    out = json.loads(run([binary, "score", "-m", model, "--ids", ",".join(map(str, ids)), "--all",
                          "--top", "1048576", "-t", "2", "-c", str(len(ids) + 8)]))
    return [dict((t, lp) for t, lp in pos) for pos in out["top_logprobs"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    ids = json.loads(run([a.nucleus, "tokenize", "-m", a.base, "-f", a.text, "--json"]))[:a.tokens]
    base = distributions(a.nucleus, a.base, ids)
    for m in a.models:
        q = distributions(a.nucleus, m, ids)
        kl = top1 = 0.0
        for pb, pq in zip(base, q):
            kl += sum(math.exp(lp) * (lp - pq[t]) for t, lp in pb.items())
            top1 += max(pb, key=pb.get) == max(pq, key=pq.get)
        print("%s %.6f %.4f" % (m, kl / len(base), top1 / len(base)))


main()
