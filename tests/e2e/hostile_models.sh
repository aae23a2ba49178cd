#!/usr/bin/env bash
# Hostile models end to end: byte-corrupted variants of the shared models go through the whole
# sanitized engine (load, tokenize, prefill, a few decode steps). Each must either run or stop
# with a clean error (exit 1 and an "error:" line), never crash or trip a sanitizer.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
exec /usr/bin/python3 - "$BIN" "$SHARED" <<'PY'
import os, random, subprocess, sys, tempfile
binary, shared = sys.argv[1:3]
models = [shared + "/models/stories260K/stories260K.gguf",
          shared + "/models/tinystories-656k/TinyStories-656K-Q8_0.gguf"]
env = dict(os.environ, ASAN_OPTIONS="exitcode=86", UBSAN_OPTIONS="halt_on_error=1:exitcode=87")
rng = random.Random(2024)
passed = failed = 0
with tempfile.TemporaryDirectory() as tmp:
    for path in models:
        data = open(path, "rb").read()
        # the header, metadata and tensor table end where the first tensor's data begins
        meta_end = min(len(data), 64 * 1024)
        variants = [("meta", rng.randrange(meta_end)) for _ in range(60)] + \
                   [("data", rng.randrange(meta_end, len(data))) for _ in range(10)]
        for i, (kind, off) in enumerate(variants):
            buf = bytearray(data)
            buf[off] ^= rng.randrange(1, 256)
            v = os.path.join(tmp, "v%d.gguf" % i)
            open(v, "wb").write(buf)
            r = subprocess.run([binary, "run", "-m", v, "-p", "Once upon a time", "-n", "4", "--temp", "0", "-t", "2"],
                               capture_output=True, env=env, timeout=60)
            err = r.stderr.decode("utf-8", "replace")
            clean = r.returncode == 0 or (r.returncode == 1 and "error:" in err)
            if clean and "Sanitizer" not in err and "runtime error" not in err:
                passed += 1
            else:
                failed += 1
                print("FAIL %s byte %d (%s): exit %d\n%s" % (os.path.basename(path), off, kind, r.returncode, err[-1500:]))
print("hostile_models: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
