#!/usr/bin/python3
"""Split a GGUF file into N parts as llama.cpp's gguf-split writes them: the metadata in the
first, split.no / split.count / split.tensors.count in every one, the tensors shared out in file
order; named PREFIX-00001-of-0000N.gguf ... For the tests of split models (hub.sh, router.sh).

usage: gguf_split.py SRC PREFIX N
"""
import struct
import sys


def kv_int(key, fmt, vtype, v):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I" + fmt, vtype, v)


def split_kvs(no, count, tensors):
    return kv_int("split.no", "H", 2, no) + kv_int("split.count", "H", 2, count) + kv_int("split.tensors.count", "i", 5, tensors)


def split_gguf(src, prefix, n):
    """src's tensors in n parts, as llama.cpp's gguf-split writes them: the metadata in the first,
    split.no / split.count / split.tensors.count in every one."""
    b = open(src, "rb").read()
    assert b[:4] == b"GGUF"
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    at = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip_value(t, at):
        if t == 8:
            return at + 8 + struct.unpack_from("<Q", b, at)[0]
        if t == 9:
            et, cnt = struct.unpack_from("<IQ", b, at)
            at += 12
            for _ in range(cnt):
                at = skip_value(et, at)
            return at
        return at + sizes[t]
    alignment = 32
    for _ in range(n_kv):
        klen = struct.unpack_from("<Q", b, at)[0]
        key = b[at + 8:at + 8 + klen]
        t = struct.unpack_from("<I", b, at + 8 + klen)[0]
        if key == b"general.alignment":
            alignment = struct.unpack_from("<I", b, at + 12 + klen)[0]
        at = skip_value(t, at + 12 + klen)
    kv_bytes = b[24:at]
    infos = []
    for _ in range(n_tensors):
        nlen = struct.unpack_from("<Q", b, at)[0]
        name = b[at + 8:at + 8 + nlen]
        nd = struct.unpack_from("<I", b, at + 8 + nlen)[0]
        dims_at = at + 12 + nlen
        typ, off = struct.unpack_from("<IQ", b, dims_at + 8 * nd)
        infos.append((name, b[dims_at:dims_at + 8 * nd], nd, typ, off))
        at = dims_at + 8 * nd + 12
    data_at = (at + alignment - 1) // alignment * alignment
    infos.sort(key=lambda x: x[4])
    ends = [x[4] for x in infos[1:]] + [len(b) - data_at]
    chunks = [b[data_at + x[4]:data_at + e] for x, e in zip(infos, ends)]
    per = (len(infos) + n - 1) // n
    for i in range(n):
        mine = list(zip(infos, chunks))[i * per:(i + 1) * per]
        head = b"GGUF" + struct.pack("<IQQ", 3, len(mine), (n_kv if i == 0 else 0) + 3)
        head += (kv_bytes if i == 0 else b"") + split_kvs(i, n, len(infos))
        data, table = b"", b""
        for (name, dims, nd, typ, _), chunk in mine:
            data += b"\0" * (-len(data) % alignment)
            table += struct.pack("<Q", len(name)) + name + struct.pack("<I", nd) + dims + struct.pack("<IQ", typ, len(data))
            data += chunk
        head += table
        head += b"\0" * (-len(head) % alignment)
        open(f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf", "wb").write(head + data)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    split_gguf(sys.argv[1], sys.argv[2], int(sys.argv[3]))
