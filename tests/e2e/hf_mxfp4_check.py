#!/usr/bin/python3
"""gpt-oss as OpenAI released it on Hugging Face: experts as MXFP4 "<name>_blocks" and "<name>_scales".

From shared/archs/gptoss/hf (BF16) this writes two directories:
  mxfp4/  the experts quantised to MXFP4 (OCP MX v1.0) in the release's layout: blocks
          [experts][out][in / 32][16] with element 2i of a block in the low nibble of byte i and
          2i + 1 in the high one (transformers' convert_moe_packed_tensors), scales
          [experts][out][in / 32] as E8M0 (2^(s - 127)), and config.json's quantization_config;
  twin/   the same experts dequantised here from those definitions, as F32 in transformers'
          [experts][in][out] layout, which nucleus reads with its float path (checked against
          transformers by archs.sh).
nucleus must give the two the same log-probabilities within TOL (the MXFP4 products meet int16
activations, the twin's f32 ones), and greedy decoding must agree. A third directory packs the
nibbles in GGUF's order instead: it must miss by far more than TOL, so the check can fail.
Ends with "hf-mxfp4: N passed, N failed".
"""
import argparse, json, os, shutil, struct, subprocess, sys, tempfile

import numpy as np

TOL = 2e-3
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def read_st(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, z = t["data_offsets"]
        assert t["dtype"] == "BF16", t["dtype"]
        raw = np.frombuffer(body[a:z], dtype="<u2").astype(np.uint32) << 16
        out[name] = raw.view(np.float32).reshape(t["shape"])
    return out


def write_st(path, tensors):
    header, chunks, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    hj = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(chunks))


def quantise(w):
    """w [..., n] -> E2M1 codes [..., n] and E8M0 scales [..., n / 32]."""
    g = w.reshape(*w.shape[:-1], -1, 32).astype(np.float64)
    amax = np.abs(g).max(axis=-1)
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2 + 127, 0).clip(0, 254)
    x = g / np.exp2(e - 127)[..., None]
    codes = np.abs(np.abs(x)[..., None] - E2M1[:8]).argmin(axis=-1)
    codes = np.where((x < 0) & (codes > 0), codes + 8, codes)
    return codes.reshape(w.shape).astype(np.uint8), e.astype(np.uint8)


def dequantise(codes, scales):
    g = E2M1[codes].reshape(*codes.shape[:-1], -1, 32) * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return g.reshape(codes.shape)


def pack(codes, gguf_order):
    """codes [..., n] -> bytes [..., n / 32, 16]."""
    c = codes.reshape(*codes.shape[:-1], -1, 32)
    lo, hi = (c[..., :16], c[..., 16:]) if gguf_order else (c[..., 0::2], c[..., 1::2])
    return (lo | hi << 4).astype(np.uint8)


def make_dirs(src, tmp):
    base = read_st(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    dirs = {k: os.path.join(tmp, k) for k in ("mxfp4", "twin", "swapped")}
    tensors = {k: {} for k in dirs}
    for name, a in base.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            codes, scales = quantise(a.transpose(0, 2, 1))  # [experts][out][in]
            tensors["twin"][name] = dequantise(codes, scales).transpose(0, 2, 1).astype(np.float32)
            for k, order in (("mxfp4", False), ("swapped", True)):
                tensors[k][name + "_blocks"] = pack(codes, order)
                tensors[k][name + "_scales"] = scales
        else:
            for k in dirs:
                tensors[k][name] = a
    for k, d in dirs.items():
        os.makedirs(d)
        for f in os.listdir(src):
            if f not in ("config.json", "model.safetensors"):
                os.symlink(os.path.join(src, f), os.path.join(d, f))
        c = dict(cfg)
        if k != "twin":
            c["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
        json.dump(c, open(os.path.join(d, "config.json"), "w"))
        write_st(os.path.join(d, "model.safetensors"), tensors[k])
    return dirs


def score(args, model, ids, *extra):
    r = subprocess.run([args.nucleus, "score", "-m", model, "--ids", ",".join(map(str, ids)), "-t", "2", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("score -m %s failed (%d): %s" % (model, r.returncode, r.stderr.strip()[-400:]))
    return json.loads(r.stdout)


def deviation(a, b):
    w = 0.0
    for pa, pb in zip(a, b):
        db = dict((t, lp) for t, lp in pb)
        for t, lp in pa[:10]:
            w = max(w, abs(db[t] - lp) if t in db else float("inf"))
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--shared", required=True)
    args = ap.parse_args()
    passed = failed = 0

    def check(ok, msg):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        if not ok:
            print("FAIL: " + msg)

    tmp = tempfile.mkdtemp()
    try:
        dirs = make_dirs(os.path.join(args.shared, "archs", "gptoss", "hf"), tmp)
        for line in open(os.path.join(args.shared, "archs", "gptoss", "golden.jsonl")):
            rec = json.loads(line)
            ids = rec["prompt_ids"] + rec["ids"]
            top = {k: score(args, d, ids, "--all", "--top", "50", "--cache-type", "f32")["top_logprobs"]
                   for k, d in dirs.items()}
            dev, swapped = deviation(top["twin"], top["mxfp4"]), deviation(top["twin"], top["swapped"])
            check(dev <= TOL, "MXFP4 directory vs its dequantised twin: %.6f (tolerance %g)" % (dev, TOL))
            check(swapped > 10 * TOL, "nibbles in GGUF's order should miss, but deviate only %.6f" % swapped)
            g = [score(args, dirs[k], rec["prompt_ids"], "--greedy", "12")["ids"] for k in ("twin", "mxfp4")]
            check(g[0] == g[1], "greedy: twin %s, MXFP4 %s" % (g[0], g[1]))
            print("| %s | %.6f | %.3f |" % (rec["prompt"][:30].replace("\n", " "), dev, swapped))
    except RuntimeError as e:
        check(False, str(e))
    finally:
        shutil.rmtree(tmp)
    print("hf-mxfp4: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
