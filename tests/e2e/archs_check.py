#!/usr/bin/python3
"""Check nucleus against shared/archs/<name>/golden.jsonl (transformers' float64 forward pass; the
record format is in shared/archs/README.md), for every architecture in both forms the directory
holds: the GGUF llama.cpp's converter made and the Hugging Face directory.

Per record and form: (1) the prompt tokenizes to prompt_ids; (2) teacher forcing
prompt_ids + ids[:-1]: every listed log-probability, after the prompt's positions
(prompt_top_logprobs) and the generated ones (top_logprobs), within 0.02 with the default F16 KV
cache and within 1e-4 with an F32 one; (3) free greedy decoding reproduces ids up to the first
step whose reference top-2 gap is below 0.04. Prints the table of largest deviations and the
closing line "archs: N passed, N failed".
"""
import argparse, json, os, subprocess, sys

TOL = {"f16": 0.02, "f32": 1e-4}

# Tokenizations of the GGUF form that cannot equal transformers' (prompt_ids): the file's own
# vocabulary differs from the checkpoint's tokenizer, and llama.cpp's result on the same file is
# the reference instead (tests/data).
GGUF_TOKENS = {"gemma2": "gemma2_gguf_llamacpp_tokens.json"}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:4]), r.returncode, r.stderr.strip()[-400:]))
    return r.stdout


def expected_tokens(rec, arch, form):
    if form == "gguf" and arch in GGUF_TOKENS:
        path = os.path.join(os.path.dirname(__file__), "..", "data", GGUF_TOKENS[arch])
        return json.load(open(path))["tokens"][rec["prompt"]]
    return rec["prompt_ids"]


def check_form(args, rec, arch, form, model, where, check):
    """Largest deviation per cache type for one record and one model form."""
    got = json.loads(run([args.nucleus, "tokenize", "-m", model, "-p", rec["prompt"], "--json"]))
    want = expected_tokens(rec, arch, form)
    check(got == want, "%s tokenize: %s != %s" % (where, got, want))
    n_prompt = len(rec["prompt_ids"])
    ids = rec["prompt_ids"] + rec["ids"][:-1]
    steps = list(enumerate(rec["prompt_top_logprobs"])) + \
        [(n_prompt - 1 + k, s) for k, s in enumerate(rec["top_logprobs"])]
    worst = {}
    for cache, tol in TOL.items():
        out = json.loads(run([args.nucleus, "score", "-m", model, "--ids", ",".join(map(str, ids)), "--all",
                              "--top", "50", "-t", args.threads, "--cache-type", cache]))["top_logprobs"]
        w = 0.0
        for pos, ref in steps:
            ours = dict((t, lp) for t, lp in out[pos])
            for tok, lp in ref:
                dev = abs(ours[tok] - lp) if tok in ours else float("inf")
                w = max(w, dev)
                check(dev <= tol, "%s (%s KV cache) position %d token %d: %s vs %.6f (tolerance %g)" %
                      (where, cache, pos, tok, ours.get(tok), lp, tol))
        worst[cache] = w
    g = json.loads(run([args.nucleus, "score", "-m", model, "--ids", ",".join(map(str, rec["prompt_ids"])),
                        "--greedy", str(len(rec["ids"])), "-t", args.threads]))
    n = len(rec["ids"])
    for k, step in enumerate(rec["top_logprobs"]):
        if len(step) > 1 and step[0][1] - step[1][1] < 2 * TOL["f16"]:
            n = k
            break
    check(g["ids"][:n] == rec["ids"][:n], "%s greedy: %s != %s (first %d steps)" % (where, g["ids"][:n], rec["ids"][:n], n))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--forms", default="gguf")
    args = ap.parse_args()
    passed = failed = 0

    def check(ok, msg):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL: " + msg)

    root = os.path.join(args.shared, "archs")
    print("| architecture | form | largest deviation, F16 KV cache (tolerance 0.02) | F32 KV cache (1e-4) |")
    print("|---|---|---|---|")
    for arch in sorted(os.listdir(root)):
        path = os.path.join(root, arch, "golden.jsonl")
        if not os.path.exists(path):
            continue
        records = [json.loads(line) for line in open(path)]
        for form in args.forms.split(","):
            worst = {"f16": 0.0, "f32": 0.0}
            try:
                for i, rec in enumerate(records):
                    model = os.path.join(args.shared, rec["file"] if form == "gguf" else rec["hf_dir"])
                    w = check_form(args, rec, arch, form, model, "%s %s record %d" % (arch, form, i), check)
                    worst = {c: max(worst[c], w[c]) for c in worst}
                print("| %s | %s | %.2g | %.2g |" % (arch, form, worst["f16"], worst["f32"]))
            except RuntimeError as e:
                check(False, "%s %s: %s" % (arch, form, e))
    print("archs: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
