#!/usr/bin/python3
"""Check nucleus against shared/archs/<name>/golden.jsonl (transformers' float64 forward pass, or
for the families of 2026 llama.cpp's own F32 forward pass; the record format is in
shared/archs/README.md), for every architecture in the forms the directory holds: the GGUF
(llama.cpp's converter's, or written with llama.cpp's names) and the Hugging Face directory
where there is one; and in two forms made
from the directory here: "v4", its config.json rewritten as transformers 4 wrote them (rope_theta
and rope_scaling, rope_local_base_freq, no layer_types, num_experts), and "sharded", its weights
split into two safetensors files with a model.safetensors.index.json.

Per record and form: (1) the prompt tokenizes to prompt_ids; (2) teacher forcing
prompt_ids + ids[:-1]: every listed log-probability, after the prompt's positions
(prompt_top_logprobs) and the generated ones (top_logprobs), within 0.02 with the default KV
cache (F16; F32 for gemma4, whose unscaled attention F16 moves by up to 1.7, as it moves
llama.cpp's) and within 1e-4 with an F32 one against transformers (0.03 and 1e-3 against llama.cpp's
pass, which is F32 arithmetic, not float64: it reproduces itself to 1.6e-5 across batch shapes,
and on the gemma4 and qwen35 models, whose attention and gated norms amplify rounding, an exact
F32 pass lands up to 5e-4 from it); (3) free greedy decoding reproduces ids up to the first step
whose reference top-2 gap is below twice the default cache's tolerance. Prints the table of
largest deviations and the closing line "archs: N passed, N failed".
"""
import argparse, json, os, shutil, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from scorer import Scorer, sampled  # noqa: E402

TOL = {"default": 0.02, "f32": 1e-4}
LLAMA_CPP_TOL = {"default": 0.03, "f32": 1e-3}


def tolerances(rec):
    return LLAMA_CPP_TOL if rec.get("reference", "").startswith("llama.cpp") else TOL

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
    for cache in args.caches:
        tol = tolerances(rec)[cache]
        out = args.scorer.score(["-m", model, "--ids", ",".join(map(str, ids)), "--all", "--top", "50", "-t", args.threads] +
                                (["--cache-type", cache] if cache != "default" else []) + args.device)["top_logprobs"]
        w = 0.0
        for pos, ref in steps:
            ours = dict((t, lp) for t, lp in out[pos])
            for tok, lp in ref:
                dev = abs(ours[tok] - lp) if tok in ours else float("inf")
                w = max(w, dev)
                check(dev <= tol, "%s (%s KV cache) position %d token %d: %s vs %.6f (tolerance %g)" %
                      (where, cache, pos, tok, ours.get(tok), lp, tol))
        worst[cache] = w
    g = args.scorer.score(["-m", model, "--ids", ",".join(map(str, rec["prompt_ids"])),
                           "--greedy", str(len(rec["ids"])), "-t", args.threads] + args.device)
    n = len(rec["ids"])
    for k, step in enumerate(rec["top_logprobs"]):
        if len(step) > 1 and step[0][1] - step[1][1] < 2 * tolerances(rec)["default"]:
            n = k
            break
    check(g["ids"][:n] == rec["ids"][:n], "%s greedy: %s != %s (first %d steps)" % (where, g["ids"][:n], rec["ids"][:n], n))
    return worst


def v4_config(cfg):
    """The same model's config.json in transformers 4's style."""
    c = dict(cfg)
    rp = c.pop("rope_parameters", None)
    if rp is not None:
        if "rope_theta" not in rp:  # one dictionary per layer type (Gemma 3)
            local = rp.get("sliding_attention", {})
            if "rope_theta" in local: c["rope_local_base_freq"] = local["rope_theta"]
            rp = rp.get("full_attention", local)
        rp = dict(rp)
        c["rope_theta"] = rp.pop("rope_theta")
        if "partial_rotary_factor" in rp: c["partial_rotary_factor"] = rp.pop("partial_rotary_factor")
        if rp.get("rope_type", "default") != "default": c["rope_scaling"] = rp
    if c.get("model_type") != "gpt_oss": c.pop("layer_types", None)  # gpt-oss had them in version 4 too
    if c.get("model_type") == "qwen3_moe" and "num_local_experts" in c: c["num_experts"] = c.pop("num_local_experts")
    return c


def link_dir(src, dst, skip):
    os.makedirs(dst)
    for f in os.listdir(src):
        if f not in skip: os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(dst, f))


def make_v4(src, dst):
    link_dir(src, dst, ["config.json"])
    json.dump(v4_config(json.load(open(os.path.join(src, "config.json")))), open(os.path.join(dst, "config.json"), "w"))


def make_sharded(src, dst):
    """Two shards, each tensor in one of them, and the index that maps names to shards."""
    link_dir(src, dst, ["model.safetensors"])
    data = open(os.path.join(src, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    names = sorted(k for k in header if k != "__metadata__")
    weight_map = {}
    for part, chunk in enumerate((names[::2], names[1::2])):
        fname = "model-%05d-of-00002.safetensors" % (part + 1)
        h, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
        for k in chunk:
            b, e = header[k]["data_offsets"]
            blobs.append(data[8 + n + b:8 + n + e])
            h[k] = dict(header[k], data_offsets=[off, off + e - b])
            off += e - b
            weight_map[k] = fname
        hj = json.dumps(h).encode()
        hj += b" " * (-len(hj) % 8)
        open(os.path.join(dst, fname), "wb").write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))


def model_of(args, rec, arch, form, tmp):
    if form == "gguf": return os.path.join(args.shared, rec["file"])
    hf = os.path.join(args.shared, rec["hf_dir"])
    if form == "hf": return hf
    dst = os.path.join(tmp, arch + "-" + form)
    if not os.path.exists(dst): (make_v4 if form == "v4" else make_sharded)(hf, dst)
    return dst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--forms", default="gguf,hf,v4,sharded", help="any of gguf,hf,v4,sharded")
    ap.add_argument("--only", default="", help="architectures (comma-separated folder names of shared/archs)")
    ap.add_argument("--sample", action="store_true",
                    help="only the records of each architecture that differ in what they exercise: the first, and "
                         "each one at least twice as long as every one before it (tests/lib/scorer.py: sampled)")
    ap.add_argument("--device", default="", help="nucleus --device (cuda: the GPU keeps an f16 cache, so only the default is checked)")
    args = ap.parse_args()
    args.caches = ["default"] if args.device else list(TOL)
    args.device = ["--device", args.device] if args.device else []
    args.scorer = Scorer(args.nucleus)
    passed = failed = 0

    def check(ok, msg):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL: " + msg)

    tmp = tempfile.mkdtemp()
    root = os.path.join(args.shared, "archs")
    print("| architecture | form | %s |" % " | ".join("largest deviation, %s KV cache (tolerance %g, %g)" %
                                                   (c.upper(), TOL[c], LLAMA_CPP_TOL[c]) for c in args.caches))
    print("|---|---|%s" % ("---|" * len(args.caches)))
    for arch in sorted(os.listdir(root)):
        path = os.path.join(root, arch, "golden.jsonl")
        if not os.path.exists(path) or (args.only and arch not in args.only.split(",")):
            continue
        records = [json.loads(line) for line in open(path)]
        if args.sample: records = [records[i] for i in sampled(records)]
        # A family whose records name no Hugging Face directory (a GGUF file only) has the GGUF form only.
        for form in [f for f in args.forms.split(",") if f == "gguf" or all("hf_dir" in r for r in records)]:
            worst = dict((c, 0.0) for c in args.caches)
            try:
                for i, rec in enumerate(records):
                    model = model_of(args, rec, arch, form, tmp)
                    w = check_form(args, rec, arch, form, model, "%s %s record %d" % (arch, form, i), check)
                    worst = {c: max(worst[c], w[c]) for c in worst}
                print("| %s | %s | %s |" % (arch, form, " | ".join("%.2g" % worst[c] for c in args.caches)))
            except RuntimeError as e:
                check(False, "%s %s: %s" % (arch, form, e))
    shutil.rmtree(tmp)
    try:
        args.scorer.close()
    except RuntimeError as e:
        check(False, str(e))
    print("archs: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
