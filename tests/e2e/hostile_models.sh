#!/usr/bin/env bash
# Hostile models end to end: byte-corrupted variants of the shared models (and of one model per
# architecture, as GGUF and as a Hugging Face directory: flipped header bytes, config.json values
# deleted or made absurd) go through the whole sanitized engine (load, tokenize, prefill, a few
# decode steps). Each must either run or stop with a clean error (exit 1 and an "error:" line),
# never crash or trip a sanitizer. Then the 2026 families' metadata made to disagree with their
# tensors or with itself (a per-layer pattern that declares a layer of another kind, recurrent
# state sizes that do not divide, a per-layer array of the wrong length, an unknown expert gating
# function, more layers sharing a KV cache than keep one, a zero attention interval): each is
# refused with exit 1 and an error naming the layer, tensor or key. make test (tests/lib/tier.sh)
# tries a quarter of the flipped variants of each kind on each model (make test-full and a run by
# hand: all of them).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
exec /usr/bin/python3 - "$BIN" "$SHARED" "$TIER" <<'PY'
import json, os, random, shutil, struct, subprocess, sys, tempfile
binary, shared, tier = sys.argv[1:4]
share = 1.0 if tier == "full" else 0.25
n_of = lambda n: max(1, round(n * share))
archs = sorted(a for a in os.listdir(shared + "/archs") if os.path.isdir(shared + "/archs/" + a))
# (the 2026 families have an F32 GGUF only, and no Hugging Face directory: fewer flips for them)
models = [(shared + "/models/stories260K/stories260K.gguf", n_of(60), n_of(10)),
          (shared + "/models/tinystories-656k/TinyStories-656K-Q8_0.gguf", n_of(60), n_of(10))] + \
         [("%s/archs/%s/%s-f16.gguf" % (shared, a, a), n_of(30), n_of(5)) if os.path.exists("%s/archs/%s/%s-f16.gguf" % (shared, a, a))
          else ("%s/archs/%s/%s-f32.gguf" % (shared, a, a), n_of(8), n_of(2)) for a in archs]
env = dict(os.environ, ASAN_OPTIONS="exitcode=86", UBSAN_OPTIONS="halt_on_error=1:exitcode=87")
rng = random.Random(2024)
passed = failed = 0


def attempt(model, what):
    global passed, failed
    r = subprocess.run([binary, "run", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0", "-t", "2"],
                       capture_output=True, env=env, timeout=60)
    err = r.stderr.decode("utf-8", "replace")
    clean = r.returncode == 0 or (r.returncode == 1 and "error:" in err)
    if clean and "Sanitizer" not in err and "runtime error" not in err:
        passed += 1
    else:
        failed += 1
        print("FAIL %s: exit %d\n%s" % (what, r.returncode, err[-1500:]))


def refused(model, what, needles):
    """The model is refused: exit 1, no sanitizer report, every needle in the error."""
    global passed, failed
    r = subprocess.run([binary, "run", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0", "-t", "2"],
                       capture_output=True, env=env, timeout=60)
    err = r.stderr.decode("utf-8", "replace")
    missing = [n for n in needles if n not in err]
    if r.returncode == 1 and not missing and "Sanitizer" not in err and "runtime error" not in err:
        passed += 1
    else:
        failed += 1
        print("FAIL %s: exit %d, expected an error with %s, got:\n%s" % (what, r.returncode, missing or needles, err[-1500:]))


# GGUF metadata rewritten: value types (the GGUF spec's numbering), their sizes and formats
G_U32, G_I32, G_BOOL, G_STR, G_ARR = 4, 5, 7, 8, 9
G_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
G_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_encode(t, v):
    if t == G_STR:
        b = v.encode()
        return struct.pack("<Q", len(b)) + b
    if t == G_ARR:
        et, xs = v
        return struct.pack("<IQ", et, len(xs)) + b"".join(gguf_encode(et, x) for x in xs)
    return struct.pack(G_FMT[t], v)


def gguf_patch(src, dst, changes):
    """Copies src to dst with the metadata keys in changes ({key: (type, value)}) replaced; the
    tensor table and data as they were (the data realigned after the new metadata)."""
    data = open(src, "rb").read()
    version, n_t, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24

    def skip(t, p):
        if t == G_STR: return p + 8 + struct.unpack_from("<Q", data, p)[0]
        if t == G_ARR:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            for _ in range(n): p = skip(et, p)
            return p
        return p + G_SIZE[t]
    out, align = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_t, n_kv)), 32
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8:pos + 8 + n].decode()
        t = struct.unpack_from("<I", data, pos + 8 + n)[0]
        end = skip(t, pos + 12 + n)
        raw = data[pos + 12 + n:end]
        if key == "general.alignment": align = struct.unpack("<I", raw)[0]
        if key in changes:
            t, v = changes.pop(key)
            raw = gguf_encode(t, v)
        out += data[pos:pos + 8 + n] + struct.pack("<I", t) + raw
        pos = end
    assert not changes, "keys not in %s: %s" % (src, list(changes))
    t0 = pos
    for _ in range(n_t):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        nd = struct.unpack_from("<I", data, pos)[0]
        pos += 4 + 8 * nd + 4 + 8
    out += data[t0:pos]
    out += b"\0" * (-len(out) % align)
    out += data[(pos + align - 1) // align * align:]
    open(dst, "wb").write(out)


# (family, the keys changed, what the error must say)
INCONSISTENT = [
    # a per-layer pattern declaring a layer of another kind: Qwen3.5's attention interval (2: layer 1
    # is declared attention, and holds a DeltaNet's fused input; 4: layer 2 is declared DeltaNet),
    # LFM2's KV heads (every layer attention; none)
    ("qwen35", {"full_attention_interval": (G_U32, 2)}, ["blk.1.attn_qkv.weight"]),
    ("qwen35", {"full_attention_interval": (G_U32, 4)}, ["missing tensor 'blk.2.attn_qkv.weight'"]),
    ("qwen35", {"full_attention_interval": (G_U32, 0)}, ["full_attention_interval"]),
    ("lfm2", {"attention.head_count_kv": (G_ARR, (G_I32, [2] * 6))}, ["missing tensor 'blk.0.attn_q.weight'"]),
    ("lfm2", {"attention.head_count_kv": (G_ARR, (G_I32, [0] * 6))}, ["missing tensor 'blk.2.shortconv.in_proj.weight'"]),
    # recurrent state sizes that do not divide
    ("qwen35", {"ssm.time_step_rank": (G_U32, 3)},
     ["layer 0: the value heads must divide inner_size", "qwen35.ssm.*", "inner_size, time_step_rank"]),
    ("qwen35moe", {"ssm.inner_size": (G_U32, 130)}, ["layer 0: the value heads must divide inner_size", "qwen35moe.ssm.*"]),
    ("nemotron_h", {"ssm.group_count": (G_U32, 3)},
     ["layer 0: the heads and the groups must divide inner_size, the groups the heads", "nemotron_h.ssm.*", "group_count"]),
    ("granitehybrid", {"ssm.inner_size": (G_U32, 250)}, ["layer 0: the heads and the groups must divide inner_size", "granitehybrid.ssm.*"]),
    ("nemotron_h", {"ssm.state_size": (G_U32, 0)}, ["layer 0: Mamba2 needs every size (nemotron_h.ssm.*"]),
    ("lfm2", {"shortconv.l_cache": (G_U32, 1)}, ["layer 0: a short convolution needs lfm2.shortconv.l_cache of 2 or more (have 1)"]),
    # a per-layer array of the wrong length, or KV heads that do not divide the heads
    ("gemma4", {"attention.head_count_kv": (G_ARR, (G_I32, [2, 2, 2, 1, 2]))},
     ["key 'gemma4.attention.head_count_kv'", "must be an integer or 6 integers, one per layer"]),
    ("granitehybrid", {"attention.head_count_kv": (G_ARR, (G_I32, [0, 0, 2, 0]))},
     ["key 'granitehybrid.attention.head_count_kv'", "5 integers, one per layer"]),
    ("nemotron_h", {"feed_forward_length": (G_ARR, (G_I32, [0, 256, 0]))}, ["key 'nemotron_h.feed_forward_length'", "6 integers"]),
    ("gemma4", {"attention.sliding_window_pattern": (G_ARR, (G_BOOL, [True, True, True]))},
     ["key 'gemma4.attention.sliding_window_pattern' must be 6 booleans"]),
    ("lfm2", {"attention.head_count_kv": (G_ARR, (G_I32, [0, 0, 3, 0, 2, 0]))},
     ["layer 2 attends with 4 heads and 3 KV heads (lfm2.attention.head_count_kv)"]),
    # an unknown expert gating function
    ("deepseek2", {"expert_gating_func": (G_U32, 7)}, ["deepseek2.expert_gating_func 7 is not supported (1: softmax, 2: sigmoid)"]),
    ("glm4moe", {"expert_gating_func": (G_U32, 0)}, ["glm4moe.expert_gating_func 0 is not supported"]),
    # Gemma 4: more layers sharing a KV cache than layers before them keep one of their kind
    ("gemma4", {"attention.shared_kv_layers": (G_U32, 6)},
     ["layer 0 shares an earlier layer's KV cache (gemma4.attention.shared_kv_layers 6) but no earlier layer of its kind keeps one"]),
    ("gemma4", {"attention.shared_kv_layers": (G_U32, 4)}, ["layer 3 shares an earlier layer's KV cache (gemma4.attention.shared_kv_layers 4)"]),
    ("gemma4", {"attention.shared_kv_layers": (G_U32, 1000)}, ["gemma4.attention.shared_kv_layers 1000"]),
]


# values a hostile config.json might hold instead of the real one
ABSURD = [None, -1, 0, 1, 3, 7.5, 1e9, 2 ** 31, -2 ** 40, "x", [], {}, [1, 2], True, {"rope_type": "yarn"},
          {"rope_type": "longrope", "short_factor": [1], "long_factor": []}, ["sliding_attention"]]


def hostile_configs(tmp, hf, n):
    """Copies of a Hugging Face directory whose config.json has one key deleted or replaced."""
    cfg = json.load(open(hf + "/config.json"))
    keys = sorted(cfg)
    for i in range(n):
        d = os.path.join(tmp, "hf%d" % i)
        os.mkdir(d)
        for f in os.listdir(hf):
            if f != "config.json": os.symlink(os.path.join(hf, f), os.path.join(d, f))
        c = dict(cfg)
        k = rng.choice(keys)
        if rng.random() < 0.25: del c[k]
        else: c[k] = rng.choice(ABSURD)
        json.dump(c, open(d + "/config.json", "w"))
        yield d, "%s config.json %s=%s" % (os.path.basename(os.path.dirname(hf)), k, json.dumps(c.get(k, "<deleted>")))


def hostile_headers(tmp, hf, n):
    """Copies whose model.safetensors has one byte of its length or JSON header flipped."""
    data = open(hf + "/model.safetensors", "rb").read()
    end = 8 + int.from_bytes(data[:8], "little")
    for i in range(n):
        d = os.path.join(tmp, "st%d" % i)
        os.mkdir(d)
        for f in os.listdir(hf):
            if f != "model.safetensors": os.symlink(os.path.join(hf, f), os.path.join(d, f))
        buf = bytearray(data)
        off = rng.randrange(min(end, len(buf)))
        buf[off] ^= rng.randrange(1, 256)
        open(d + "/model.safetensors", "wb").write(buf)
        yield d, "%s model.safetensors byte %d" % (os.path.basename(os.path.dirname(hf)), off)


with tempfile.TemporaryDirectory() as tmp:
    for path, n_meta, n_data in models:
        data = open(path, "rb").read()
        # the header, metadata and tensor table end where the first tensor's data begins
        meta_end = min(len(data), 64 * 1024)
        variants = [("meta", rng.randrange(meta_end)) for _ in range(n_meta)] + \
                   [("data", rng.randrange(meta_end, len(data))) for _ in range(n_data)]
        for i, (kind, off) in enumerate(variants):
            buf = bytearray(data)
            buf[off] ^= rng.randrange(1, 256)
            v = os.path.join(tmp, "v%d.gguf" % i)
            open(v, "wb").write(buf)
            attempt(v, "%s byte %d (%s)" % (os.path.basename(path), off, kind))
    for a in archs:
        hf = "%s/archs/%s/hf" % (shared, a)
        if not os.path.isdir(hf): continue  # a family with a GGUF file only
        for d, what in list(hostile_configs(tmp, hf, n_of(25))) + list(hostile_headers(tmp, hf, n_of(10))):
            attempt(d, what)
            shutil.rmtree(d)
    for i, (arch, changes, needles) in enumerate(INCONSISTENT):
        v = os.path.join(tmp, "inconsistent%d.gguf" % i)
        gguf_patch("%s/archs/%s/%s-f32.gguf" % (shared, arch, arch), v, {arch + "." + k: c for k, c in changes.items()})
        refused(v, "%s with %s" % (arch, ", ".join("%s=%s" % (k, c[1]) for k, c in changes.items())), needles)
print("hostile_models: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
