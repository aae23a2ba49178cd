#!/usr/bin/python3
"""Write a GGUF of an architecture shared/tools/synth-gguf does not make (mixtures of experts,
Gemma 3) with the shapes of a real model and seeded random weights, for benchmarks (synth-gguf's
writer and weight generator are reused here).

  bench/synth_arch.py --shape qwen3-30b-a3b --layers 4 --type q8_0 -o moe.gguf

Output is deterministic for a given --seed. Never commit the files.
"""
import argparse, importlib.machinery, importlib.util, os, random, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED") or os.path.join(HERE, "..", "..", "shared")
_spec = importlib.util.spec_from_loader("synth", importlib.machinery.SourceFileLoader(
    "synth", os.path.join(SHARED, "tools", "synth-gguf")))
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

# From the models' config.json files.
SHAPES = {
    # Qwen3-30B-A3B: 128 experts, 8 used, q/k norms, head_dim 128
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_embd=2048, n_layer=48, n_head=32, n_head_kv=4, head_dim=128,
                          n_expert=128, n_used=8, n_ff_exp=768, ctx=40960, rope_theta=1000000.0, eps=1e-6,
                          vocab="vocab/qwen2/ggml-vocab-qwen2.gguf"),
    # gpt-oss-20b: 32 experts, 4 used, MXFP4 experts (--type mxfp4), biases, sinks, sliding window
    # 128 on alternate layers, YaRN (its o200k vocabulary is not in shared/: Qwen2's stands in)
    "gpt-oss-20b": dict(arch="gpt-oss", n_embd=2880, n_layer=24, n_head=64, n_head_kv=8, head_dim=64,
                        n_expert=32, n_used=4, n_ff_exp=2880, ctx=131072, rope_theta=150000.0, eps=1e-5,
                        swa=128, yarn=(32.0, 4096, 32.0, 1.0), vocab="vocab/qwen2/ggml-vocab-qwen2.gguf"),
    # Gemma 3 1B: q/k norms, norms around both blocks, GeGLU, 5 sliding layers (window 512, their
    # own rope base) per global one (its 262k vocabulary is not in shared/: Llama 2's stands in)
    "gemma3-1b": dict(arch="gemma3", n_embd=1152, n_layer=26, n_head=4, n_head_kv=1, head_dim=256, n_ff=6912,
                      ctx=32768, rope_theta=1000000.0, rope_swa=10000.0, eps=1e-6, swa=512,
                      vocab="vocab/llama-spm/ggml-vocab-llama-spm.gguf"),
    # Mixtral-8x7B: 8 experts, 2 used
    "mixtral-8x7b": dict(arch="llama", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128,
                         n_expert=8, n_used=2, n_ff_exp=14336, ctx=32768, rope_theta=1000000.0, eps=1e-5,
                         vocab="vocab/llama-spm/ggml-vocab-llama-spm.gguf"),
}


def mxfp4_bytes(rng, n):
    """Random MXFP4 blocks: an E8M0 scale of 2^-8 (values within +-0.024), then 16 random bytes of
    E2M1 nibbles."""
    nb = n // 32
    buf = bytearray(rng.randbytes(nb * 17))
    buf[0::17] = bytes([119]) * nb
    return bytes(buf)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--type", default="q8_0", choices=["f16", "q8_0", "q4_0", "q4_k", "mxfp4"],
                    help="type of the 2-D weights; mxfp4: MXFP4 experts, Q8_0 elsewhere (as gpt-oss's release)")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    sh = dict(SHAPES[a.shape])
    if a.layers: sh["n_layer"] = a.layers
    arch, E, L, H, HKV, hd = sh["arch"], sh["n_embd"], sh["n_layer"], sh["n_head"], sh["n_head_kv"], sh["head_dim"]
    N, K, F = sh.get("n_expert", 0), sh.get("n_used", 0), sh.get("n_ff_exp", sh.get("n_ff"))
    tok_kv = synth.read_gguf_tokenizer(os.path.join(SHARED, sh["vocab"]))
    n_vocab = len([v for k, _, v, _ in tok_kv if k == "tokenizer.ggml.tokens"][0])
    U32, F32, STR = synth.T_U32, synth.T_F32, synth.T_STR
    kv = [("general.architecture", STR, arch, None),
          ("general.name", STR, "synthetic %s (random weights)" % a.shape, None),
          ("general.alignment", U32, 32, None),
          (arch + ".context_length", U32, sh["ctx"], None),
          (arch + ".embedding_length", U32, E, None),
          (arch + ".block_count", U32, L, None),
          (arch + ".feed_forward_length", U32, F, None),
          (arch + ".attention.head_count", U32, H, None),
          (arch + ".attention.head_count_kv", U32, HKV, None),
          (arch + ".attention.key_length", U32, hd, None),
          (arch + ".attention.value_length", U32, hd, None),
          (arch + ".rope.dimension_count", U32, hd, None),
          (arch + ".rope.freq_base", F32, sh["rope_theta"], None),
          (arch + ".attention.layer_norm_rms_epsilon", F32, sh["eps"], None)] + tok_kv
    if N: kv += [(arch + ".expert_feed_forward_length", U32, F, None), (arch + ".expert_count", U32, N, None),
                 (arch + ".expert_used_count", U32, K, None)]
    if sh.get("swa"): kv.append((arch + ".attention.sliding_window", U32, sh["swa"], None))
    if sh.get("rope_swa"): kv.append((arch + ".rope.freq_base_swa", F32, sh["rope_swa"], None))
    if sh.get("yarn"):
        factor, orig, fast, slow = sh["yarn"]
        kv += [(arch + ".rope.scaling.type", STR, "yarn", None), (arch + ".rope.scaling.factor", F32, factor, None),
               (arch + ".rope.scaling.original_context_length", U32, orig, None),
               (arch + ".rope.scaling.yarn_beta_fast", F32, fast, None),
               (arch + ".rope.scaling.yarn_beta_slow", F32, slow, None)]
    qx = a.type  # the experts
    qt = "q8_0" if qx == "mxfp4" else qx
    qe = "q6_k" if qt == "q4_k" else qt
    tensors = [("token_embd.weight", (E, n_vocab), qe, "emb"), ("output_norm.weight", (E,), "f32", "norm")]
    if arch != "gemma3": tensors.append(("output.weight", (E, n_vocab), qe, "emb"))  # Gemma ties them
    for i in range(L):
        p = "blk.%d." % i
        tensors += [(p + "attn_norm.weight", (E,), "f32", "norm"),
                    (p + "attn_q.weight", (E, H * hd), qt, "w"),
                    (p + "attn_k.weight", (E, HKV * hd), qt, "w"),
                    (p + "attn_v.weight", (E, HKV * hd), qt, "w"),
                    (p + "attn_output.weight", (H * hd, E), qt, "w"),
                    (p + ("post_attention_norm" if arch == "gpt-oss" else "ffn_norm") + ".weight", (E,), "f32", "norm")]
        if N:
            tensors += [(p + "ffn_gate_inp.weight", (E, N), "f32", "w"),
                        (p + "ffn_gate_exps.weight", (E, F, N), qx, "w"),
                        (p + "ffn_up_exps.weight", (E, F, N), qx, "w"),
                        (p + "ffn_down_exps.weight", (F, E, N), qx, "w")]
        else:
            tensors += [(p + "ffn_gate.weight", (E, F), qt, "w"), (p + "ffn_up.weight", (E, F), qt, "w"),
                        (p + "ffn_down.weight", (F, E), qt, "w")]
        if arch == "gemma3":
            tensors += [(p + "post_attention_norm.weight", (E,), "f32", "norm"),
                        (p + "post_ffw_norm.weight", (E,), "f32", "norm")]
        if arch == "gpt-oss":
            tensors += [(p + "attn_q.bias", (H * hd,), "f32", "w"), (p + "attn_k.bias", (HKV * hd,), "f32", "w"),
                        (p + "attn_v.bias", (HKV * hd,), "f32", "w"), (p + "attn_output.bias", (E,), "f32", "w"),
                        (p + "attn_sinks.weight", (H,), "f32", "w"), (p + "ffn_gate_inp.bias", (N,), "f32", "w"),
                        (p + "ffn_gate_exps.bias", (F, N), "f32", "w"), (p + "ffn_up_exps.bias", (F, N), "f32", "w"),
                        (p + "ffn_down_exps.bias", (E, N), "f32", "w")]
        if arch in ("qwen3moe", "gemma3"):
            tensors += [(p + "attn_q_norm.weight", (hd,), "f32", "norm"), (p + "attn_k_norm.weight", (hd,), "f32", "norm")]
    GGML = dict(synth.GGML, mxfp4=(39, 32, 17))
    align = 32
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for k, t, v, e in kv:
        header += [synth.s(k), struct.pack("<I", t), synth.enc_val(t, v, e)]
    offset, infos = 0, []
    for name, dims, typ, kind in tensors:
        if dims[0] % GGML[typ][1]:
            typ = "q8_0" if dims[0] % 32 == 0 else "f16"
        n = 1
        for d in dims: n *= d
        _, blk, bsz = GGML[typ]
        size = n // blk * bsz
        infos.append((name, typ, kind, n, size))
        header += [synth.s(name), struct.pack("<I", len(dims)), struct.pack("<%dQ" % len(dims), *dims),
                   struct.pack("<IQ", GGML[typ][0], offset)]
        offset += (size + align - 1) // align * align
    head = b"".join(header)
    rng = random.Random(a.seed)
    tmp = a.output + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % align))
        for name, typ, kind, n, size in infos:
            done = 0
            while done < n:  # in pieces: one call must stay below 2^31 random bits
                part = min(n - done, 1 << 26)
                f.write(mxfp4_bytes(rng, part) if typ == "mxfp4" else synth.tensor_bytes(rng, typ, part, kind))
                done += part
            f.write(b"\0" * ((-size) % align))
    os.replace(tmp, a.output)
    print("%s: %s %s, %d layers, %d experts (%d used), %.1f MB" % (a.output, a.shape, a.type, L, N, K,
                                                                    os.path.getsize(a.output) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
