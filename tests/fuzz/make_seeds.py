#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_gguf: small valid GGUF files (v2 and v3) covering every value
type, nested and string arrays, a custom alignment and a few tensor types. They are generated at
test time (model-like files are never committed): make_seeds.py DIR writes them into DIR."""
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "."

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
          U64: "Q", I64: "q", F64: "d"}
# ggml type id: (elements per block, bytes per block)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34), "Q4_0": (2, 32, 18),
        "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack("<" + SCALAR[vtype], v)


def gguf(version, kvs, tensors, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims, type name)], data laid out in order."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    head += b"".join(gstr(k) + struct.pack("<I", t) + value(t, v) for k, t, v in kvs)
    data = b""
    for name, dims, tname in tensors:
        tid, blk, size = GGML[tname]
        n = 1
        for d in dims:
            n *= d
        data += b"\0" * ((-len(data)) % alignment)
        head += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", tid, len(data))
        data += bytes((len(data) + i) % 251 for i in range(n // blk * size))
    head += b"\0" * ((-len(head)) % alignment)
    return head + data  # the last tensor ends the file


def write(name, blob):
    assert len(blob) < 8192, name
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def main():
    os.makedirs(OUT, exist_ok=True)
    write("v3_empty.bin", gguf(3, [], []))
    write("v2_small.bin", gguf(2, [("general.architecture", STR, "llama"), ("llama.block_count", U32, 1)],
                               [("w", [4, 2], "F32"), ("blk.0.attn_norm.weight", [4], "F32")]))
    every = [("t.u8", U8, 200), ("t.i8", I8, -100), ("t.u16", U16, 60000), ("t.i16", I16, -30000),
             ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 0.5),
             ("t.bool", BOOL, True), ("t.str", STR, b"a\0b\xff\n"), ("t.u64", U64, 2**63 + 5),
             ("t.i64", I64, -2**62), ("t.f64", F64, 3.25e100),
             ("t.arr_i16", ARR, (I16, [-7, 9])), ("t.arr_f32", ARR, (F32, [1.5, -2.5])),
             ("t.arr_bool", ARR, (BOOL, [True, False])),
             ("t.nested", ARR, (ARR, [(U32, [1, 2]), (U32, [3])])),
             ("t.nested_str", ARR, (ARR, [(STR, ["x"]), (STR, [])])),
             ("general.alignment", U32, 64)]
    write("v3_every_type.bin", gguf(3, every, [("a", [32, 2], "Q8_0"), ("b", [256], "Q4_K"),
                                               ("c", [3], "F16")], alignment=64))
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(8)] + ["\u2581the", "\u2581a"]
    write("v3_vocab.bin", gguf(3, [("general.architecture", STR, "llama"),
                                   ("tokenizer.ggml.model", STR, "llama"),
                                   ("tokenizer.ggml.tokens", ARR, (STR, toks)),
                                   ("tokenizer.ggml.scores", ARR, (F32, [float(-i) for i in range(len(toks))])),
                                   ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3] + [6] * 8 + [1, 1])),
                                   ("tokenizer.ggml.bos_token_id", U32, 1),
                                   ("tokenizer.ggml.add_bos_token", BOOL, True)], []))
    write("v3_model.bin", gguf(3, [("general.architecture", STR, "llama"), ("llama.embedding_length", U32, 32),
                                   ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)],
                               [("token_embd.weight", [32, 4], "Q4_0"), ("output_norm.weight", [32], "F32"),
                                ("blk.0.ffn_down.weight", [256, 2], "Q6_K"), ("blk.0.attn_q.weight", [8, 2, 2], "BF16")]))


if __name__ == "__main__":
    main()
