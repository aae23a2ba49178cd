#!/usr/bin/env bash
# Hostile models end to end: byte-corrupted variants of the shared models (and of one model per
# architecture, as GGUF and as a Hugging Face directory: flipped header bytes, config.json values
# deleted or made absurd) go through the whole sanitized engine (load, tokenize, prefill, a few
# decode steps). Each must either run or stop with a clean error (exit 1 and an "error:" line),
# never crash or trip a sanitizer. make test (tests/lib/tier.sh) tries a quarter of the variants of
# each kind on each model (make test-full and a run by hand: all of them).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/tier.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
exec /usr/bin/python3 - "$BIN" "$SHARED" "$TIER" <<'PY'
import glob, json, os, random, shutil, subprocess, sys, tempfile
binary, shared, tier = sys.argv[1:4]
share = 1.0 if tier == "full" else 0.25
n_of = lambda n: max(1, round(n * share))
archs = sorted(a for a in os.listdir(shared + "/archs") if os.path.isdir(shared + "/archs/" + a))
# each architecture's GGUF file (F16, or the F32 one of the families that have only that)
arch_gguf = [(sorted(glob.glob("%s/archs/%s/%s-f16.gguf" % (shared, a, a))) or
              sorted(glob.glob("%s/archs/%s/*.gguf" % (shared, a))))[:1] for a in archs]
models = [(shared + "/models/stories260K/stories260K.gguf", n_of(60), n_of(10)),
          (shared + "/models/tinystories-656k/TinyStories-656K-Q8_0.gguf", n_of(60), n_of(10))] + \
         [(g[0], n_of(30), n_of(5)) for g in arch_gguf if g]
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
print("hostile_models: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
