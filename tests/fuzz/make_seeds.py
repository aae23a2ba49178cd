#!/usr/bin/env python3
"""Writes seed corpora for the fuzzers. They are generated at test time (model-like files are never
committed):
  make_seeds.py DIR                  fuzz_gguf: small valid GGUF files (v2 and v3) covering every
                                     value type, nested and string arrays, a custom alignment and a
                                     few tensor types;
  make_seeds.py --safetensors DIR    fuzz_safetensors: small valid .safetensors files (every dtype,
                                     metadata, scalars, empty tensors, rank 5, padded and unpadded);
  make_seeds.py --spm DIR            fuzz_spm_model: small SentencePiece tokenizer.model files
                                     (protobuf ModelProto: byte pieces, BPE / UNIGRAM, normalizer
                                     options, unknown fields and skipped sub-messages);
  make_seeds.py --kv DIR             fuzz_kv_file: small saved KV cache files of version 2 (F16, F32,
                                     Q8_0, Q4_0, one or several layers and cells, positions with
                                     gaps, moved cells; layer tables with layers of their own widths,
                                     layers without cells, values inside the keys (v_dim 0) and
                                     recurrent states after all the cells or fewer, several), checksummed
                                     as src/kv/kv_file.h says;
  make_seeds.py --lora DIR           fuzz_lora: LoRA adapters for stories260K (tests/tools/lora_gguf.py:
                                     F32, F16 and Q8_0 pairs, alpha or none, the output, several
                                     layers; and refused ones: a lone lora_a, another architecture,
                                     ranks that differ, B short of rows, a weight the model lacks,
                                     the embeddings)."""
import json
import os
import struct
import sys

KIND = sys.argv[1] if len(sys.argv) > 2 else "--gguf"
OUT = sys.argv[-1] if len(sys.argv) > 1 else "."

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


# ---- safetensors ------------------------------------------------------------------------------

ST_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
           "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
           "C64": 64, "F64": 64, "I64": 64, "U64": 64}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)], data laid out in order (bytes i % 251)."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * ST_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    text = json.dumps(header).encode()
    if pad:
        text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(i % 251 for i in range(off))


def main_safetensors():
    os.makedirs(OUT, exist_ok=True)
    write("st_empty.bin", safetensors([]))
    write("st_small.bin", safetensors([("model.embed_tokens.weight", "BF16", [8, 4]),
                                       ("model.norm.weight", "F32", [4])], {"format": "pt"}))
    write("st_every_dtype.bin", safetensors([("t.%s" % d, d, [4, 6]) for d in ST_BITS]))
    write("st_odd.bin", safetensors([("scalar", "F64", []), ("empty", "F16", [0, 3]), ("five", "U8", [1, 2, 1, 3, 2]),
                                     ("blk.0.mlp.experts.gate_up_proj_blocks", "U8", [2, 4, 1, 16]),
                                     ("blk.0.mlp.experts.gate_up_proj_scales", "U8", [2, 4, 1])],
                                    {"model.embed_tokens.weight": "scalar", "x": "y"}, pad=False))


# ---- SentencePiece models (protobuf) ---------------------------------------------------------------

def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def pb_int(field, v):
    return varint(field << 3) + varint(v)


def pb_bytes(field, b):
    b = b.encode() if isinstance(b, str) else b
    return varint(field << 3 | 2) + varint(len(b)) + b


def pb_float(field, f):
    return varint(field << 3 | 5) + struct.pack("<f", f)


def tiny_charsmap():
    """A precompiled charsmap mapping "A" to "a" and "B" to nothing: a darts-clone double array whose
    root (unit 0) points at 256; 256 ^ byte holds the byte's label with the leaf bit, and the unit
    at (256 ^ byte) ^ 1 the value: an offset into the NUL-separated replacements after the trie."""
    units = [0] * 324
    units[0] = 256 << 10
    for byte, value in ((0x41, 0), (0x42, 2)):
        at = 256 ^ byte
        units[at] = 1 << 10 | 1 << 8 | byte
        units[at ^ 1] = 1 << 31 | value
    trie = struct.pack("<%dI" % len(units), *units)
    return struct.pack("<I", len(trie)) + trie + b"a\0\0"


def spm_model(pieces, model_type=2, dummy_prefix=True, byte_fallback=True, extra=b"", charsmap=None, collapse=False):
    """pieces: [(text, score, type)]; type None leaves the field out (NORMAL)."""
    out = b""
    for text, score, ptype in pieces:
        body = pb_bytes(1, text) + pb_float(2, score) + (pb_int(3, ptype) if ptype is not None else b"")
        out += pb_bytes(1, body)
    trainer = pb_bytes(1, "corpus.txt") + pb_int(3, model_type) + pb_int(4, len(pieces)) + pb_int(35, byte_fallback)
    trainer += pb_int(40, 0) + pb_int(41, 1) + pb_int(42, 2) + pb_int(43, -1) + pb_bytes(31, "<start_of_turn>")
    out += pb_bytes(2, trainer)
    norm = pb_bytes(1, "identity") + pb_bytes(2, charsmap or b"\x04\0\0\0\0\0\0\0") + pb_int(3, dummy_prefix)
    norm += pb_int(4, collapse)
    out += pb_bytes(3, norm)
    return out + extra


def spm_pieces(n_normal, with_bytes=True):
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("<start_of_turn>", 0.0, 4)]
    if with_bytes:
        pieces += [("<0x%02X>" % b, 0.0, 6) for b in range(256)]
    words = ["\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "\u2581the", "th", "e", "\u2581t", "he",
             "\u2581\u2581", "\u00e9", "\u4f60", "\u2581w", "or", "ld", "\u2581wor", "\u2581world", "H", "el", "lo"]
    pieces += [(w, -float(i), None if i % 2 else 1) for i, w in enumerate(words[:n_normal])]
    return pieces


def main_spm():
    os.makedirs(OUT, exist_ok=True)
    write("spm_bpe.bin", spm_model(spm_pieces(23)))
    write("spm_unigram_no_prefix.bin", spm_model(spm_pieces(23), model_type=1, dummy_prefix=False))
    write("spm_no_bytes.bin", spm_model(spm_pieces(12, with_bytes=False), byte_fallback=False))
    write("spm_charsmap.bin", spm_model(spm_pieces(23, with_bytes=False), charsmap=tiny_charsmap(), collapse=True))
    # skipped parts: self_test_data, denormalizer_spec, an extension field, a fixed64 field
    extra = pb_bytes(4, pb_bytes(1, pb_bytes(1, "x") + pb_bytes(2, "y"))) + pb_bytes(5, pb_bytes(1, "n"))
    extra += pb_int(200, 5) + varint(201 << 3 | 1) + b"\0" * 8
    write("spm_extras.bin", spm_model(spm_pieces(8, with_bytes=False), extra=extra))


# ---- saved KV cache files (src/kv/kv_file.h) -------------------------------------------------------

M64 = (1 << 64) - 1


def nc_hash(b):
    """src/common.c's nc_hasher over the bytes b."""
    def word(h, w):
        h = ((h ^ w) * 0x9E3779B97F4A7C15) & M64
        return h ^ (h >> 32)
    h, full = 0x6E636B7663616368, len(b) // 8 * 8
    for i in range(0, full, 8):
        h = word(h, int.from_bytes(b[i:i + 8], "little"))
    h = word(word(h, int.from_bytes(b[full:] + bytes(8 - (len(b) - full)), "little")), len(b))
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & M64
    return h ^ (h >> 31)


# ggml type ids of the cache rows (T_: GGUF's value types above are named F32 and the like)
T_F32, T_F16, T_Q4_0, T_Q8_0 = 0, 1, 2, 8


def kv_row(t, xs):
    """A row of floats as a cache of type t keeps it (quantised rows: GGML's blocks, scale first)."""
    if t in (T_F32, T_F16):
        return struct.pack("<%d%s" % (len(xs), "f" if t == T_F32 else "e"), *xs)
    out = b""
    for b in range(0, len(xs), 32):
        blk = xs[b:b + 32]
        amax = max(abs(x) for x in blk)
        if t == T_Q8_0:
            d = amax / 127
            out += struct.pack("<e", d) + bytes((round(x / d) if d else 0) & 0xFF for x in blk)
        else:
            d = amax / -8
            q = [min(15, max(0, int(x / d + 8.5))) if d else 8 for x in blk]
            out += struct.pack("<e", d) + bytes(q[i] | q[i + 16] << 4 for i in range(16))
    return out


def kv_file(layers, tk, tv, tokens, positions, arch=b"llama", name=b"seed", n_exact=None, states=None):
    """layers: [(k_dim, v_dim, state)] (k_dim 0: no cells; v_dim 0 with keys: values inside the keys,
    kept in F32 where the keys are F16); states: the positions of the states saved (default: one
    after every cell when there is state)."""
    n_cells = len(tokens)
    n_exact = n_cells if n_exact is None else n_exact
    n_state = sum(st for _, _, st in layers)
    states = ([n_cells] if n_state else []) if states is None else states
    key_type = lambda v: T_F32 if v == 0 and tk == T_F16 else tk
    keys = lambda layer, cell, n, v: kv_row(key_type(v), [layer + cell / 8 + d / 64 for d in range(n)]) if n else b""
    values = lambda layer, cell, n: kv_row(tv, [-layer - cell / 16 - d / 32 for d in range(n)]) if n else b""
    cell_bytes = sum(len(keys(0, 0, k, v)) + len(values(0, 0, v)) for k, v, _ in layers)
    head = b"NCKV" + struct.pack("<IQ", 2, 0x0123456789ABCDEF) + arch.ljust(32, b"\0") + name.ljust(64, b"\0")
    head += struct.pack("<8I", len(layers), len(states), tk, tv, cell_bytes, n_state, n_cells, n_exact)
    head += b"".join(struct.pack("<3I", k, v, st) for k, v, st in layers)
    body = struct.pack("<%di" % n_cells, *tokens) + struct.pack("<%di" % n_cells, *positions)
    for layer, (k, v, _) in enumerate(layers):
        for cell in range(n_cells if k else 0):
            body += keys(layer, cell, k, v) + values(layer, cell, v)
    for pos in states:
        body += struct.pack("<I%df" % n_state, pos, *[(pos + i) / 7 - 1 for i in range(n_state)])
    data = head + body
    return data + struct.pack("<Q", nc_hash(data))


def main_kv():
    os.makedirs(OUT, exist_ok=True)
    write("kv_one.bin", kv_file([(4, 4, 0)], T_F16, T_F16, [1], [0]))
    write("kv_f16.bin", kv_file([(8, 8, 0)] * 2, T_F16, T_F16, [1, 403, 407, 261, 378], [0, 1, 2, 3, 4]))
    write("kv_f32.bin", kv_file([(4, 4, 0)] * 3, T_F32, T_F32, [7, 9, 11], [0, 1, 2], arch=b"qwen2", name=b"other"))
    write("kv_gaps.bin", kv_file([(16, 16, 0)], T_F16, T_F32, [5, 6, 7, 8], [0, 3, 4, 100], n_exact=1))
    write("kv_q8_0.bin", kv_file([(64, 64, 0)] * 2, T_Q8_0, T_Q8_0, [1, 2, 3], [0, 1, 2]))
    write("kv_q4_0.bin", kv_file([(32, 32, 0)], T_Q4_0, T_F16, [4, 5], [0, 7]))
    # layers of their own widths, and one that keeps no cells (a layer reading another's cache)
    write("kv_shapes.bin", kv_file([(8, 8, 0), (0, 0, 0), (16, 4, 0)], T_F16, T_F16, [1, 2, 3], [0, 1, 2]))
    # values inside the keys (multi-head latent attention): v_dim 0
    write("kv_latent.bin", kv_file([(80, 0, 0), (8, 8, 0)], T_F16, T_F16, [3, 1, 4], [0, 1, 2], arch=b"deepseek2"))
    write("kv_latent_q8_0.bin", kv_file([(64, 0, 0)], T_Q8_0, T_Q4_0, [9, 8], [0, 1], arch=b"deepseek2"))
    # recurrent states: beside attention layers, after every cell or fewer (checkpoints'), several, alone
    write("kv_state.bin", kv_file([(8, 8, 0), (0, 0, 6), (0, 0, 3)], T_F16, T_F16, [1, 2, 3, 4], [0, 1, 2, 3],
                                  arch=b"jamba"))
    write("kv_state_behind.bin", kv_file([(0, 0, 5), (8, 8, 0)], T_F32, T_F16, [5, 6, 7, 8, 9], [0, 1, 2, 3, 4],
                                         arch=b"qwen3next", states=[2]))
    write("kv_states.bin", kv_file([(8, 8, 0), (0, 0, 3)], T_F16, T_F16, [1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5],
                                   arch=b"qwen35", states=[2, 5, 6]))
    write("kv_state_only.bin", kv_file([(0, 0, 4), (0, 0, 4)], T_F16, T_F16, [1, 2, 3], [0, 1, 2], arch=b"mamba"))


def main_lora():
    import subprocess
    os.makedirs(OUT, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    tool = os.path.join(here, "..", "tools", "lora_gguf.py")
    shared = os.environ.get("SHARED") or os.path.join(here, "..", "..", "..", "shared")
    base = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
    variants = {
        "f32": ["--targets", "attn_q,attn_v", "--alpha", "8"],
        "f16_out": ["--targets", "output,ffn_down", "--type", "f16"],
        "q8_0": ["--targets", "ffn_gate,attn_output", "--type", "q8_0", "--rank", "32"],
        "one": ["--targets", "blk.3.attn_k.weight", "--rank", "1"],
        "lone_a": ["--only-a", "blk.0.attn_q.weight"],
        "arch": ["--arch-name", "qwen2"],
        "ranks": ["--rank-mismatch", "blk.1.attn_v.weight"],
        "short_b": ["--short-b", "blk.2.attn_q.weight"],
        "missing": ["--targets", "attn_q", "--raw-target", "blk.7.ffn_up.weight"],
        "embd": ["--targets", "token_embd"],
    }
    for name, args in variants.items():
        subprocess.run(["/usr/bin/python3", tool, "adapter", base, "-o", os.path.join(OUT, "lora_%s.gguf" % name)] + args,
                       check=True)


if __name__ == "__main__":
    {"--gguf": main, "--safetensors": main_safetensors, "--spm": main_spm, "--kv": main_kv, "--lora": main_lora}[KIND]()
