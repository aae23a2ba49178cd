#!/usr/bin/python3
"""Write tiny llama/qwen2 GGUF models (seeded random weights, the stories260K tokenizer) for
tests that need shapes or types the shared models lack (BF16, MQA, partial rotary, rope_freqs)
and broken variants (missing or misshapen tensors, unknown architectures or types).
Reuses the encoding helpers of shared/tools/synth-gguf.

  tiny_gguf.py -o m.gguf --arch qwen2 --type bf16 --heads 4 --kv-heads 1
  tiny_gguf.py -o bad.gguf --omit blk.0.ffn_up.weight
"""
import argparse, importlib.machinery, importlib.util, os, random, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED") or os.path.join(HERE, "..", "..", "..", "shared")


def load_synth():
    path = os.path.join(SHARED, "tools", "synth-gguf")
    loader = importlib.machinery.SourceFileLoader("synth_gguf", path)
    spec = importlib.util.spec_from_loader("synth_gguf", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def bf16_bytes(rng, n, scale):
    vals = [(rng.random() * 2 - 1) * scale for _ in range(n)]
    raw = struct.pack("<%df" % n, *vals)
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))  # top halves (truncation)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", required=True)
    ap.add_argument("--arch", default="llama")
    ap.add_argument("--arch-name", help="write this general.architecture instead (for refusal tests)")
    ap.add_argument("--type", default="f32", choices=["f32", "f16", "bf16", "q8_0", "q4_0"])
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ff", type=int, default=96)
    ap.add_argument("--rot", type=int, help="rope.dimension_count (default: head dim)")
    ap.add_argument("--rope-freqs", action="store_true", help="add a rope_freqs tensor (Llama 3 scaling)")
    ap.add_argument("--theta", type=float, default=10000.0)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--omit", action="append", default=[], help="leave out this tensor")
    ap.add_argument("--reshape", action="append", default=[], help="NAME=d0,d1: write other dims for NAME")
    ap.add_argument("--bad-type", help="NAME: store this tensor as IQ2_XXS (a type nucleus refuses)")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    sg = load_synth()
    rng = random.Random(a.seed)
    tok_kv = sg.read_gguf_tokenizer(os.path.join(SHARED, "models", "stories260K", "stories260K.gguf"))
    V = len([v for k, _, v, _ in tok_kv if k == "tokenizer.ggml.tokens"][0])
    E, H, HKV, FF = a.embd, a.heads, a.kv_heads, a.ff
    hd = E // H
    rot = a.rot or hd
    arch = a.arch
    kv = [("general.architecture", sg.T_STR, a.arch_name or arch, None),
          ("general.name", sg.T_STR, "tiny test model", None),
          (arch + ".context_length", sg.T_U32, 256, None),
          (arch + ".embedding_length", sg.T_U32, E, None),
          (arch + ".block_count", sg.T_U32, a.layers, None),
          (arch + ".feed_forward_length", sg.T_U32, FF, None),
          (arch + ".attention.head_count", sg.T_U32, H, None),
          (arch + ".attention.head_count_kv", sg.T_U32, HKV, None),
          (arch + ".rope.dimension_count", sg.T_U32, rot, None),
          (arch + ".rope.freq_base", sg.T_F32, a.theta, None),
          (arch + ".attention.layer_norm_rms_epsilon", sg.T_F32, 1e-5, None)] + tok_kv
    t = a.type
    tensors = [("token_embd.weight", (E, V), t, "emb"), ("output_norm.weight", (E,), "f32", "norm")]
    if not a.tied: tensors.append(("output.weight", (E, V), t, "emb"))
    if a.rope_freqs: tensors.append(("rope_freqs.weight", (rot // 2,), "f32", tuple(1.0 + 0.5 * i for i in range(rot // 2))))
    for i in range(a.layers):
        p = "blk.%d." % i
        tensors += [(p + "attn_norm.weight", (E,), "f32", "norm"), (p + "attn_q.weight", (E, E), t, "w"),
                    (p + "attn_k.weight", (E, hd * HKV), t, "w"), (p + "attn_v.weight", (E, hd * HKV), t, "w"),
                    (p + "attn_output.weight", (E, E), t, "w"), (p + "ffn_norm.weight", (E,), "f32", "norm"),
                    (p + "ffn_gate.weight", (E, FF), t, "w"), (p + "ffn_up.weight", (E, FF), t, "w"),
                    (p + "ffn_down.weight", (FF, E), t, "w")]
        if arch == "qwen2":
            tensors += [(p + "attn_q.bias", (E,), "f32", "w"), (p + "attn_k.bias", (hd * HKV,), "f32", "w"),
                        (p + "attn_v.bias", (hd * HKV,), "f32", "w")]
    reshape = dict((r.split("=")[0], tuple(int(x) for x in r.split("=")[1].split(","))) for r in a.reshape)
    tensors = [(n, reshape.get(n, d), ty, k) for n, d, ty, k in tensors if n not in a.omit]

    types = dict(sg.GGML, bf16=(30, 1, 2), iq2_xxs=(16, 256, 66))
    align = 32
    header = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for k, ty, v, e in kv: header += [sg.s(k), struct.pack("<I", ty), sg.enc_val(ty, v, e)]
    blobs, offset = [], 0
    for name, dims, ty, kind in tensors:
        n = 1
        for d in dims: n *= d
        if name == a.bad_type:
            ty = "iq2_xxs"
            data = bytes(rng.getrandbits(8) for _ in range(n // 256 * 66))
        elif ty == "bf16":
            data = bf16_bytes(rng, n, 0.2 if kind == "emb" else 0.1)
        elif ty == "f32" and kind == "norm":
            data = struct.pack("<%df" % n, *[1.0 + 0.1 * (rng.random() - 0.5) for _ in range(n)])
        else:
            data = sg.tensor_bytes(rng, ty, n, kind)
        header += [sg.s(name), struct.pack("<I", len(dims)), struct.pack("<%dQ" % len(dims), *dims),
                   struct.pack("<IQ", types[ty][0], offset)]
        blobs.append(data)
        offset += (len(data) + align - 1) // align * align
    head = b"".join(header)
    with open(a.o, "wb") as f:
        f.write(head + b"\0" * ((-len(head)) % align))
        for b in blobs: f.write(b + b"\0" * ((-len(b)) % align))
    return 0


if __name__ == "__main__":
    sys.exit(main())
