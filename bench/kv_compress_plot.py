"""Plot build/kv_compress's CSV output: perplexity and KL(full || compressed) against the KV budget,
one row of panels per model (README, "KV cache compression").

Needs matplotlib (Debian: apt-get install python3-matplotlib, then run it with /usr/bin/python3);
not a dependency of the project.

    /usr/bin/python3 bench/kv_compress_plot.py OUT.png A.csv [B.csv ...]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "window": ("tab:blue", "o", "sliding window"),
    "sinks": ("tab:green", "s", "4 sinks + window"),
    "h2o": ("tab:red", "^", "H2O (heavy hitters + window B/2)"),
    "streaming": ("tab:purple", "v", "StreamingLLM (sinks, positions in cache)"),
}


def read(path):
    rows = list(csv.DictReader(open(path)))
    full = next(float(r["ppl"]) for r in rows if r["policy"] == "full")
    curves = {}
    for r in rows:
        if r["policy"] != "full":
            curves.setdefault(r["policy"], []).append((int(r["budget"]), float(r["ppl"]), float(r["kl"])))
    return rows[0]["model"].removesuffix(".gguf"), int(rows[0]["tokens"]), full, curves


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, paths = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(len(paths), 2, figsize=(11, 3.8 * len(paths)), squeeze=False)
    for (ax_ppl, ax_kl), path in zip(axes, paths):
        model, tokens, full, curves = read(path)
        for policy, pts in curves.items():
            color, marker, label = STYLE.get(policy, ("black", "x", policy))
            pts.sort()
            b = [p[0] for p in pts]
            ax_ppl.plot(b, [p[1] for p in pts], color=color, marker=marker, label=label)
            ax_kl.plot(b, [p[2] for p in pts], color=color, marker=marker, label=label)
        ax_ppl.axhline(full, color="gray", linestyle="--", label=f"full cache ({full:.2f})")
        ax_ppl.set_title(f"{model}: perplexity ({tokens} tokens)")
        ax_kl.set_title(f"{model}: KL(full || compressed), nats/token")
        ax_kl.set_yscale("log")
        for ax in (ax_ppl, ax_kl):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("KV budget (cells kept)")
            ax.grid(True, which="both", alpha=0.3)
        ax_ppl.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main()
