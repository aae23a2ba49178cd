#!/usr/bin/python3
"""LoRA adapters for tests, in llama.cpp's GGUF adapter form (what convert_lora_to_gguf.py writes:
general.type "adapter", adapter.type "lora", adapter.lora.alpha, NAME.lora_a [inputs, rank] and
NAME.lora_b [rank, outputs]), and the judge's side: a base model with adapters merged into its
weights in float64 (W + scale * alpha / rank * B A, stored F32), for shared/tools/reference-forward.
Reads GGUF files with the reference's own reader; writes with synth-gguf's encoders.

  lora_gguf.py adapter BASE.gguf -o a.gguf --targets attn_q,ffn_down,output --rank 4 --alpha 8
  lora_gguf.py merge BASE.gguf -o merged.gguf a.gguf:1.0 b.gguf:0.5
Broken adapters for refusal tests: --general-type, --adapter-type, --arch-name, --extra-key KEY,
--only-a NAME (a lora_a without its lora_b), --rank-mismatch NAME, --short-b NAME (B with half the
weight's outputs), --raw-target NAME (a tensor name used as given).
"""
import argparse, importlib.machinery, importlib.util, os, struct, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("SHARED") or os.path.join(HERE, "..", "..", "..", "shared")


def load_tool(name, mod):
    path = os.path.join(SHARED, "tools", name)
    loader = importlib.machinery.SourceFileLoader(mod, path)
    m = importlib.util.module_from_spec(importlib.util.spec_from_loader(mod, loader))
    loader.exec_module(m)
    return m


ref = load_tool("reference-forward", "reference_forward")
sg = load_tool("synth-gguf", "synth_gguf")
F32, F16, Q8_0 = 0, 1, 8


def q8_0(x):
    """Rows of x (float64, length a multiple of 32) as Q8_0 blocks, as ggml rounds them."""
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0)
    q = np.round(b * inv[:, None]).astype(np.int8)
    out = np.zeros((len(b), 34), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def encode(x, typ):
    """A 2-D float64 array [rows][ne0] in the GGUF type typ."""
    if typ == F32: return x.astype(np.float32).tobytes()
    if typ == F16: return x.astype(np.float16).tobytes()
    if typ == Q8_0: return q8_0(x)
    raise ValueError(typ)


def write_gguf(path, kv_bytes, n_kv, tensors, align=32):
    """kv_bytes: the encoded key/value pairs; tensors: [(name, dims in ggml order, type, bytes)]."""
    info, data, off = [], [], 0
    for name, dims, typ, raw in tensors:
        off = (off + align - 1) // align * align
        info.append(sg.s(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
                    + struct.pack("<IQ", typ, off))
        data.append((off, raw))
        off += len(raw)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv) + kv_bytes + b"".join(info)
    pad = (len(head) + align - 1) // align * align - len(head)
    with open(path, "wb") as f:
        f.write(head + b"\0" * pad)
        at = 0
        for o, raw in data:
            f.write(b"\0" * (o - at) + raw)
            at = o + len(raw)


def kv(key, typ, val, elem=None):
    return sg.s(key) + struct.pack("<I", typ) + sg.enc_val(typ, val, elem)


def cmd_adapter(a):
    base = ref.GGUF(a.base)
    rng = np.random.default_rng(a.seed)
    arch = a.arch_name or base.kv["general.architecture"]
    pairs = [kv("general.architecture", sg.T_STR, arch), kv("general.type", sg.T_STR, a.general_type),
             kv("general.name", sg.T_STR, "test adapter"), kv("adapter.type", sg.T_STR, a.adapter_type)]
    if a.alpha is not None: pairs.append(kv("adapter.lora.alpha", sg.T_F32, a.alpha))
    for k in a.extra_key: pairs.append(kv(k, sg.T_U32, 1))
    typ = {"f32": F32, "f16": F16, "q8_0": Q8_0}[a.type]
    wanted = []
    for t in a.targets.split(","):
        if t.endswith(".weight"): wanted.append(t); continue
        for name in base.tensors:  # every layer's tensor of this kind, or a whole name's
            if name == t + ".weight" or (name.startswith("blk.") and name.split(".", 2)[2] == t + ".weight"):
                wanted.append(name)
    wanted += a.raw_target
    tensors = []
    for name in wanted:
        dims = base.tensors[name][0] if name in base.tensors else (64, 64)
        cols, rows = dims[0], dims[1]
        r = a.rank
        A = rng.uniform(-1, 1, (r, cols)) * a.amp / np.sqrt(cols)
        B = rng.uniform(-1, 1, (rows, r)) * a.amp / np.sqrt(r)
        if typ == F16:  # the values the file holds, exactly
            A, B = A.astype(np.float16).astype(np.float64), B.astype(np.float16).astype(np.float64)
        tensors.append((name + ".lora_a", (cols, r + (name in a.rank_mismatch)), typ,
                        encode(np.concatenate([A, A[:1]]) if name in a.rank_mismatch else A, typ)))
        if name in a.short_b:
            B = B[:rows // 2]
        if name not in a.only_a:
            tensors.append((name + ".lora_b", (r, len(B)), typ, encode(B, typ)))
    write_gguf(a.o, b"".join(pairs), len(pairs), tensors)


def skip_value(buf, pos, typ):
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if typ == 8: return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
    if typ == 9:
        et, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if et in sizes: return pos + n * sizes[et]
        for _ in range(n): pos = skip_value(buf, pos, et)
        return pos
    return pos + sizes[typ]


def cmd_merge(a):
    base = ref.GGUF(a.base)
    buf = base.buf
    n_kv = struct.unpack_from("<Q", buf, 16)[0]
    pos = 24
    for _ in range(n_kv):
        pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
        typ = struct.unpack_from("<I", buf, pos)[0]
        pos = skip_value(buf, pos + 4, typ)
    kv_bytes = bytes(buf[24:pos])
    delta = {}
    for spec in a.adapters:
        path, scale = spec.rsplit(":", 1)
        ad = ref.GGUF(path)
        alpha = ad.kv.get("adapter.lora.alpha", 0.0)
        for name in ad.tensors:
            if not name.endswith(".lora_a"): continue
            w = name[:-7]
            A, B = ad.tensor(w + ".lora_a"), ad.tensor(w + ".lora_b")  # [rank][cols], [rows][rank]
            rank = A.shape[0]
            s = float(scale) * (alpha / rank if alpha else 1.0)
            delta[w] = delta.get(w, 0) + s * (B @ A)
    tensors = []
    for name, (dims, typ, off) in base.tensors.items():
        x = base.tensor(name)
        if name in delta: x = x + delta[name]
        tensors.append((name, dims, F32, x.astype(np.float32).tobytes()))
    write_gguf(a.o, kv_bytes, n_kv, tensors, base.kv.get("general.alignment", 32))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("adapter")
    p.add_argument("base"); p.add_argument("-o", required=True)
    p.add_argument("--targets", default="attn_q,attn_v")
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--alpha", type=float)
    p.add_argument("--amp", type=float, default=0.5, help="size of the values")
    p.add_argument("--type", default="f32", choices=["f32", "f16", "q8_0"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--general-type", default="adapter")
    p.add_argument("--adapter-type", default="lora")
    p.add_argument("--arch-name")
    p.add_argument("--extra-key", action="append", default=[])
    p.add_argument("--only-a", action="append", default=[])
    p.add_argument("--rank-mismatch", action="append", default=[])
    p.add_argument("--short-b", action="append", default=[])
    p.add_argument("--raw-target", action="append", default=[])
    m = sub.add_parser("merge")
    m.add_argument("base"); m.add_argument("-o", required=True)
    m.add_argument("adapters", nargs="+", help="ADAPTER.gguf:SCALE")
    a = ap.parse_args()
    cmd_adapter(a) if a.cmd == "adapter" else cmd_merge(a)


if __name__ == "__main__":
    main()
