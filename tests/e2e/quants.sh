#!/usr/bin/env bash
# Every quantised type end to end. shared/quants holds a small llama quantised by llama.cpp into
# every common type, with the exact float64 forward pass over its dequantised weights: each file
# within 0.05 of it (teacher forcing after every prompt position and generated step, F16 and F32
# KV cache; greedy decoding) and below llama.cpp's own deviations, with the deviation table.
# MXFP4, which no shared file holds: a tiny model's matrices written as MXFP4 here (from the OCP
# spec), against shared/tools/reference-forward on the same weights dequantised to F32.
# Ends with "quants: N passed, N failed". make check: the F16 cache alone; the other kernel sets in
# make test (tier sample): the first record of each file (tests/lib/tier.sh).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
BIN=${NUCLEUS_BIN:-build/nucleus}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sel=()
tier_is check && sel=(--cache-types f16)
tier_is sample && sel=(--sample)

/usr/bin/python3 tests/e2e/golden_check.py --set quants --beat-llama --cache-types f16,f32 --nucleus "$BIN" \
    --shared "$SHARED" --models "$MODELS_DIR" "${sel[@]}" "$@" >"$tmp/golden.log"
grep -vE '^quants: [0-9]+ passed' "$tmp/golden.log"
line=$(grep -E '^quants: [0-9]+ passed, [0-9]+ failed' "$tmp/golden.log" | tail -n 1)
pass=$(sed -E 's/^quants: ([0-9]+) passed.*/\1/' <<<"$line"); pass=${pass:-0}
fail=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line"); fail=${fail:-1}

# MXFP4: rewrite the matrices of a tiny F32 model (every row a multiple of 32) as MXFP4 blocks:
# per 32 weights the shared exponent e = floor(log2(max |x|)) - 2 + 127 and each weight the E2M1
# value (0, 0.5, 1, 1.5, 2, 3, 4, 6, signed) nearest x / 2^(e-127); the twin stores those values.
/usr/bin/python3 tests/tools/tiny_gguf.py -o "$tmp/f32.gguf" --type f32 --embd 64 --ff 96 --heads 4 --kv-heads 2
/usr/bin/python3 - "$tmp/f32.gguf" "$tmp/mxfp4.gguf" "$tmp/twin.gguf" <<'PY' || fail=$((fail + 1))
import struct, sys
import numpy as np

src, out_q, out_f = sys.argv[1:]
buf = open(src, "rb").read()
pos = 24
n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

def skip(t, p):
    if t == 8: return p + 8 + struct.unpack_from("<Q", buf, p)[0]
    if t == 9:
        et, n = struct.unpack_from("<IQ", buf, p); p += 12
        for _ in range(n): p = skip(et, p)
        return p
    return p + SIZES[t]

align = 32
for _ in range(n_kv):
    klen = struct.unpack_from("<Q", buf, pos)[0]
    key = buf[pos + 8:pos + 8 + klen].decode()
    t = struct.unpack_from("<I", buf, pos + 8 + klen)[0]
    if key == "general.alignment": align = struct.unpack_from("<I", buf, pos + 12 + klen)[0]
    pos = skip(t, pos + 12 + klen)
kv_bytes = buf[24:pos]
infos = []
for _ in range(n_tensors):
    nlen = struct.unpack_from("<Q", buf, pos)[0]
    name = buf[pos + 8:pos + 8 + nlen]; pos += 8 + nlen
    nd = struct.unpack_from("<I", buf, pos)[0]
    dims = struct.unpack_from("<%dQ" % nd, buf, pos + 4); pos += 4 + 8 * nd
    typ, off = struct.unpack_from("<IQ", buf, pos); pos += 12
    infos.append((name, dims, typ, off))
data0 = (pos + align - 1) // align * align
assert all(t == 0 for _, _, t, _ in infos), "expected an F32 model"

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])

def mxfp4(x):  # x: [blocks, 32] float32 -> (block bytes, dequantised float32)
    amax = np.abs(x).max(axis=1)
    e = np.where(amax > 0, np.frexp(amax)[1] - 1 - 2 + 127, 0).clip(0, 254)
    scale = np.ldexp(1.0, e - 127)[:, None]
    idx = np.abs(np.abs(x)[:, :, None] / scale[:, :, None] - E2M1).argmin(axis=2)  # ties: the smaller
    code = idx | np.where((x < 0) & (idx > 0), 8, 0)
    deq = np.where(code >= 8, -1, 1) * E2M1[idx] * scale
    qs = (code[:, :16] | code[:, 16:] << 4).astype(np.uint8)
    return np.concatenate([e.astype(np.uint8)[:, None], qs], axis=1).tobytes(), deq.astype(np.float32)

def write(path, quantised):
    head, blobs, off = [buf[:24], kv_bytes], [], 0
    for name, dims, typ, o in infos:
        n = int(np.prod(dims))
        x = np.frombuffer(buf, np.float32, n, data0 + o)
        t = 0
        if len(dims) == 2 and dims[0] % 32 == 0:
            q, deq = mxfp4(x.reshape(-1, 32))
            data, t = (q, 39) if quantised else (deq.tobytes(), 0)
        else:
            data = x.tobytes()
        head += [struct.pack("<Q", len(name)), name, struct.pack("<I", len(dims)), struct.pack("<%dQ" % len(dims), *dims),
                 struct.pack("<IQ", t, off)]
        blobs.append(data)
        off += (len(data) + align - 1) // align * align
    h = b"".join(head)
    with open(path, "wb") as f:
        f.write(h + b"\0" * ((-len(h)) % align))
        for b in blobs: f.write(b + b"\0" * ((-len(b)) % align))

write(out_q, True)
write(out_f, False)
PY
"$BIN" inspect -m "$tmp/mxfp4.gguf" | grep -c MXFP4 | grep -qx 16 || { echo "FAIL mxfp4: the model holds no 16 MXFP4 matrices"; fail=$((fail + 1)); }
IDS=1,403,407,261,378,306,397,288,300,341,262,301,350,410
ours=$("$BIN" score -m "$tmp/mxfp4.gguf" --ids $IDS --all --top 5 -t 2 2>&1)
ref=$(/usr/bin/python3 "$SHARED/tools/reference-forward" "$tmp/twin.gguf" --ids $IDS --all --top 5 2>&1)
if /usr/bin/python3 - "$ours" "$ref" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
import json, sys
try:
    a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
except ValueError:
    sys.exit("FAIL mxfp4: %s | %s" % (sys.argv[1][-300:], sys.argv[2][-300:]))
worst = 0.0
for sa, sb in zip(a["top_logprobs"], b["top_logprobs"]):
    mine = dict(map(tuple, sa))
    for t, lp in sb:
        worst = max(worst, abs(mine[t] - lp) if t in mine else float("inf"))
print("| tiny-mxfp4 (written here) | %.5f (0.05) | | | |" % worst)
if not (worst <= 0.05 and len(a["top_logprobs"]) == len(b["top_logprobs"]) > 0): sys.exit("FAIL mxfp4: deviation %g" % worst)
PY

echo "quants: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
