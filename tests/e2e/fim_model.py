#!/usr/bin/env python3
"""A copy of a GGUF model whose last vocabulary entries become fill-in-the-middle control tokens
(<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|repo_name|>, <|file_sep|>, as Qwen2.5-Coder
writes them): no shared model has them, and /infill needs them (tests/e2e/apis.sh).

usage: fim_model.py IN.gguf OUT.gguf"""
import struct
import sys

MARKERS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"]
T_STR, T_ARR, T_I32 = 8, 9, 5
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def main(src, dst):
    data = open(src, "rb").read()
    pos = 0

    def r(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v

    def rs():
        nonlocal pos
        (n,) = r("Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def rv(t):
        if t == T_STR:
            return rs()
        if t == T_ARR:
            at, n = r("IQ")
            return (at, [rv(at) for _ in range(n)])
        return r(SCALAR[t])[0]

    assert data[:4] == b"GGUF"
    pos = 4
    (version,) = r("I")
    n_tensors, n_kv = r("QQ")
    kv = []
    for _ in range(n_kv):
        k = rs()
        (t,) = r("I")
        kv.append([k, t, rv(t)])
    infos_start = pos
    for _ in range(n_tensors):
        rs()
        (nd,) = r("I")
        r("%dQ" % nd)
        r("IQ")
    infos = data[infos_start:pos]
    align = next((v for k, t, v in kv if k == b"general.alignment"), 32)
    data_start = (pos + align - 1) // align * align

    tokens = next(v for k, t, v in kv if k == b"tokenizer.ggml.tokens")[1]
    types = next(v for k, t, v in kv if k == b"tokenizer.ggml.token_type")[1]
    for i, m in enumerate(MARKERS):
        at = len(tokens) - len(MARKERS) + i
        tokens[at] = m.encode()
        types[at] = 3  # control

    def enc(t, v):
        if t == T_STR:
            return struct.pack("<Q", len(v)) + v
        if t == T_ARR:
            at, items = v
            return struct.pack("<IQ", at, len(items)) + b"".join(enc(at, x) for x in items)
        return struct.pack("<" + SCALAR[t], v)

    out = [b"GGUF", struct.pack("<IQQ", version, n_tensors, n_kv)]
    for k, t, v in kv:
        out += [struct.pack("<Q", len(k)) + k, struct.pack("<I", t), enc(t, v)]
    out.append(infos)
    head = b"".join(out)
    head += b"\0" * ((len(head) + align - 1) // align * align - len(head))
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
