#!/usr/bin/env bash
# Getting models from Hugging Face's hub (src/hub, nucleus pull / list / rm, -hf), end to end
# against a stand-in hub on a loopback port (tests/e2e/hub_server.py serving repositories made
# here, HF_ENDPOINT pointing at it): the quant chosen by default and by name, the cache (list,
# rm, --offline), a split GGUF, a safetensors repository with shards and a paged listing, a
# dropped connection resumed by a Range request to the same SHA-256, a download cut for good
# and resumed by the next run, a wrong checksum refused, a .part that is not the file's start,
# a gated repository (401, then HF_TOKEN), a missing repository and quant, a full disk, the
# progress on a terminal and off it, and -hf on every command that loads a model.
# Ends with "hub: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
. tests/lib/checks.sh
BIN=${NUCLEUS_BIN:-build/san/nucleus}
[ -x "$BIN" ] || make "$BIN" >/dev/null || { echo "hub: 0 passed, 1 failed"; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
finish() { echo "hub: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

hub=$tmp/hub
stories=models/stories260K.gguf
hf_dir=$SHARED/models/tinystories-656k/hf

# ---- the repositories ----
mkdir -p "$hub/test/tiny-GGUF" "$hub/test/split-GGUF" "$hub/test/broken-split-GGUF" "$hub/test/tiny-hf" \
         "$hub/test/gated-GGUF" "$hub/test/empty"
cp "$stories" "$hub/test/tiny-GGUF/tiny-Q4_K_M.gguf"
cp "$stories" "$hub/test/tiny-GGUF/tiny-Q8_0.gguf"
cp "$stories" "$hub/test/tiny-GGUF/tiny.IQ2_XXS.gguf"
echo '# tiny' >"$hub/test/tiny-GGUF/README.md"
cp "$stories" "$hub/test/gated-GGUF/model-Q4_K_M.gguf"
cp "$stories" "$hub/test/split-GGUF/whole-Q8_0.gguf"
echo '{}' >"$hub/test/empty/config.json"
python3 - "$hub" "$hf_dir" <<'PY' || { bad "cannot make the test repositories"; finish; }
import json, os, shutil, struct, sys
hub, hf = sys.argv[1:3]

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


# A GGUF split into three parts as llama.cpp's gguf-split names them, and a repository missing a part.
split_gguf("models/stories260K.gguf", f"{hub}/test/split-GGUF/big-Q4_K_M", 3)
for i in (1, 3):
    shutil.copy(f"{hub}/test/split-GGUF/big-Q4_K_M-{i:05d}-of-00003.gguf", f"{hub}/test/broken-split-GGUF/")

# The safetensors model in two shards with an index, as transformers saves a large one.
for name in os.listdir(hf):
    if name != "model.safetensors":
        shutil.copy(f"{hf}/{name}", f"{hub}/test/tiny-hf/{name}")
raw = open(f"{hf}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__", None)
names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
weight_map = {}
for s, group in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
    shard = f"model-{s + 1:05d}-of-00002.safetensors"
    h, out, at = {}, b"", 0
    for k in group:
        a, b = header[k]["data_offsets"]
        h[k] = dict(header[k], data_offsets=[at, at + b - a])
        out += data[a:b]
        at += b - a
        weight_map[k] = shard
    if meta:
        h["__metadata__"] = meta
    hj = json.dumps(h).encode()
    hj += b" " * (-len(hj) % 8)
    open(f"{hub}/test/tiny-hf/{shard}", "wb").write(struct.pack("<Q", len(hj)) + hj + out)
json.dump({"metadata": {"total_size": len(data)}, "weight_map": weight_map},
          open(f"{hub}/test/tiny-hf/model.safetensors.index.json", "w"))
PY
control() { echo "$1" >"$hub/control.json"; }
control '{}'

python3 tests/e2e/hub_server.py "$hub" >"$tmp/port" 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { bad "the stand-in hub did not start: $(cat "$tmp/server.log")"; finish; }
export HF_ENDPOINT=http://127.0.0.1:$(cat "$tmp/port")
export NUCLEUS_CACHE=$tmp/cache
unset HF_TOKEN XDG_CACHE_HOME
cache=$NUCLEUS_CACHE
log=$hub/requests.log
sha() { sha256sum <"$1" | cut -d' ' -f1; }
want_sha=$(sha "$stories")
# pull ARGS...: stdout in $out, stderr in $err, the status in $rc
pull() { out=$("$BIN" pull "$@" 2>"$tmp/err"); rc=$?; err=$(cat "$tmp/err"); }
requests() { grep -c "$1" "$log" 2>/dev/null; }

# ---- the quant: Q4_K_M by default, another by name in any case, a missing one listed ----
pull test/tiny-GGUF
expect_eq "pull: the default quant, Q4_K_M, its path on stdout" "$rc $out" "0 $cache/test/tiny-GGUF/tiny-Q4_K_M.gguf"
expect_eq "pull: the file's bytes" "$(sha "$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf")" "$want_sha"
expect_in "pull: says what it downloads" "downloading tiny-Q4_K_M.gguf (1.2 MB)" "$err"
expect_in "pull: a line per tenth off a terminal" "tiny-Q4_K_M.gguf: 50% (" "$err"
expect_in "pull: checked" "checked" "$err"
expect_eq "pull: through the listing and the resolve URL" "$(requests 'GET /api/models/test/tiny-GGUF/tree/main') $(requests 'resolve/main/tiny-Q4_K_M.gguf')" "1 1"
expect_eq "pull: nothing else fetched (README, other quants)" "$(ls "$cache/test/tiny-GGUF")" "tiny-Q4_K_M.gguf"
pull test/tiny-GGUF
expect_eq "pull again: taken from the cache" "$rc $(requests 'resolve/main/tiny-Q4_K_M.gguf')" "0 1"
expect_in "pull again: says so" "tiny-Q4_K_M.gguf (1.2 MB) is in the cache" "$err"
pull test/tiny-GGUF:q8_0
expect_eq "pull :q8_0 (any case)" "$rc $out" "0 $cache/test/tiny-GGUF/tiny-Q8_0.gguf"
pull test/tiny-GGUF:tiny.IQ2_XXS.gguf
expect_eq "pull :FILE by its path" "$rc $out" "0 $cache/test/tiny-GGUF/tiny.IQ2_XXS.gguf"
pull test/tiny-GGUF:Q5_K_M
expect_eq "a missing quant fails" "$rc $out" "1 "
expect_in "a missing quant: those present listed" "test/tiny-GGUF has no GGUF file of Q5_K_M; it has: Q4_K_M (1.2 MB), Q8_0 (1.2 MB), IQ2_XXS (1.2 MB)" "$err"
rm "$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf"
pull test/tiny-GGUF:Q8_0
# the cache's record of what a file was checked against: a file changed behind it is fetched again
printf 'x' | dd of="$cache/test/tiny-GGUF/tiny-Q8_0.gguf" bs=1 seek=1000 conv=notrunc 2>/dev/null
rm "$cache/test/tiny-GGUF/.tiny-Q8_0.gguf.oid"
pull test/tiny-GGUF:Q8_0
expect_eq "a cached file whose bytes differ is fetched again" "$rc $(requests 'resolve/main/tiny-Q8_0.gguf') $(sha "$cache/test/tiny-GGUF/tiny-Q8_0.gguf")" "0 2 $want_sha"

# ---- the cache: list, --offline, rm ----
pull test/tiny-GGUF
listing=$("$BIN" list 2>"$tmp/err")
expect_eq "list: repository, file, size" "$(echo "$listing" | awk '{print $1, $2, $3, $4}')" \
"REPO FILE SIZE 
test/tiny-GGUF tiny-Q4_K_M.gguf 1.2 MB
test/tiny-GGUF tiny-Q8_0.gguf 1.2 MB
test/tiny-GGUF tiny.IQ2_XXS.gguf 1.2 MB"
expect_in "list: the total" "3 files, 3.6 MB, in $cache" "$(cat "$tmp/err")"
n_before=$(wc -l <"$log")
out=$(HF_ENDPOINT=http://127.0.0.1:1 "$BIN" run -hf test/tiny-GGUF:Q8_0 --offline -p "Once upon a time" -n 8 --temp 0 2>/dev/null)
expect_eq "--offline: run from the cache, no request" "$out $(wc -l <"$log")" \
    "$("$BIN" run -m "$stories" -p "Once upon a time" -n 8 --temp 0 2>/dev/null) $n_before"
expect_err "--offline: a quant the cache lacks" "the cache's copy of test/tiny-GGUF has no GGUF file of Q6_K" \
    "$BIN" pull test/tiny-GGUF:Q6_K --offline
expect_err "--offline: a repository the cache lacks" "test/other is not in the cache ($cache): run without --offline" \
    "$BIN" pull test/other --offline
expect_err "no network, no --offline: says how to go on" "cannot list its files at http://127.0.0.1:1" \
    env HF_ENDPOINT=http://127.0.0.1:1 "$BIN" pull test/tiny-GGUF
expect_eq "rm REPO:QUANT" "$("$BIN" rm test/tiny-GGUF:Q8_0 2>&1; ls "$cache/test/tiny-GGUF")" \
"removed test/tiny-GGUF:Q8_0 from $cache: 1 file, 1.2 MB
tiny-Q4_K_M.gguf
tiny.IQ2_XXS.gguf"
expect_err "rm of a quant not there" "the cache has no file of test/tiny-GGUF:Q8_0; it has: Q4_K_M, IQ2_XXS" "$BIN" rm test/tiny-GGUF:Q8_0
expect_eq "rm REPO: its directory and its user's go too" "$("$BIN" rm test/tiny-GGUF 2>&1; ls -A "$cache")" \
    "removed test/tiny-GGUF from $cache: 2 files, 2.4 MB"
expect_err "rm of a repository not there" "test/tiny-GGUF is not in the cache" "$BIN" rm test/tiny-GGUF
expect_eq "list of an empty cache" "$("$BIN" list 2>&1)" "the cache ($cache) holds no model: nucleus pull USER/REPO[:QUANT] fetches one"

# ---- a split GGUF: every part; its loading refused, naming the merge ----
pull test/split-GGUF
expect_eq "split: the first part's path" "$rc $out" "0 $cache/test/split-GGUF/big-Q4_K_M-00001-of-00003.gguf"
expect_eq "split: every part, checked" "$(cd "$cache/test/split-GGUF" && sha256sum big-* | sha256sum)" \
    "$(cd "$hub/test/split-GGUF" && sha256sum big-* | sha256sum)"
expect_in "split: counted" "[3/3] test/split-GGUF: downloading big-Q4_K_M-00003-of-00003.gguf" "$err"
expect_err "split: a missing part" "has part 1 of big-Q4_K_M-00001-of-00003.gguf's 3 parts but not part 2" \
    "$BIN" pull test/broken-split-GGUF
expect_eq "split: loaded as one model" "$("$BIN" run -hf test/split-GGUF --offline -p "Once upon a time" -n 12 --temp 0 2>/dev/null)" \
    "$("$BIN" run -m "$stories" -p "Once upon a time" -n 12 --temp 0 2>/dev/null)"
mkdir -p "$tmp/parts"
cp "$cache"/test/split-GGUF/big-* "$tmp/parts/"
expect_err "split: a part given that is not the first" "part 2 of a GGUF split into 3 files: load the first part, named ...-00001-of-00003.gguf" \
    "$BIN" run -m "$tmp/parts/big-Q4_K_M-00002-of-00003.gguf" -p hi
rm "$tmp/parts/big-Q4_K_M-00003-of-00003.gguf"
expect_err "split: a part missing on disk" "part 3 of 3 of $tmp/parts/big-Q4_K_M-00001-of-00003.gguf" \
    "$BIN" run -m "$tmp/parts/big-Q4_K_M-00001-of-00003.gguf" -p hi
cp "$tmp/parts/big-Q4_K_M-00001-of-00003.gguf" "$tmp/parts/big-Q4_K_M-00003-of-00003.gguf"
expect_err "split: a part numbered wrongly" "split.no 0 and split.count 3, where part 3 of 3 was expected" \
    "$BIN" run -m "$tmp/parts/big-Q4_K_M-00001-of-00003.gguf" -p hi
expect_eq "split: rm REPO:QUANT takes every part" "$("$BIN" rm test/split-GGUF:Q4_K_M 2>&1; ls -A "$cache")" \
    "removed test/split-GGUF:Q4_K_M from $cache: 3 files, 1.2 MB"

# ---- a safetensors repository: its files and shards, through a paged listing ----
control '{"paginate": ["test/tiny-hf"]}'
pull test/tiny-hf
expect_eq "safetensors: the directory" "$rc $out" "0 $cache/test/tiny-hf"
expect_eq "safetensors: config, tokenizer and every shard" "$(ls "$cache/test/tiny-hf" | tr '\n' ' ')" \
    "config.json generation_config.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json special_tokens_map.json tokenizer.json tokenizer_config.json "
expect_eq "safetensors: the listing's four pages (eight files) followed" "$(requests 'GET /api/models/test/tiny-hf/tree/main')" 4
expect_eq "safetensors: runs as the directory it came from" \
    "$("$BIN" run -hf test/tiny-hf --offline -p "Once upon a time" -n 12 --temp 0 2>/dev/null)" \
    "$("$BIN" run -m "$hf_dir" -p "Once upon a time" -n 12 --temp 0 2>/dev/null)"
expect_err "safetensors: a quant refused" "test/tiny-hf has no GGUF files: it is a safetensors model" "$BIN" pull test/tiny-hf:Q4_K_M
expect_err "neither GGUF nor safetensors" "test/empty has no GGUF files, nor a safetensors model" "$BIN" pull test/empty
control '{}'

# ---- a dropped connection: resumed at once with a Range request, the same SHA-256 ----
control '{"drop": {"test/tiny-GGUF/tiny-Q8_0.gguf": 400000}, "drop_times": {"test/tiny-GGUF/tiny-Q8_0.gguf": 1}}'
pull test/tiny-GGUF:Q8_0
expect_eq "dropped once: resumed" "$rc $(sha "$cache/test/tiny-GGUF/tiny-Q8_0.gguf")" "0 $want_sha"
expect_in "dropped once: said" "trying again from 400.0 kB" "$err"
expect_in "dropped once: a Range request from the byte reached" "GET /cdn/test/tiny-GGUF/tiny-Q8_0.gguf bytes=400000-" "$(cat "$log")"

# ---- cut for good: the .part stays, nothing is taken, the next run resumes it ----
control '{"drop": {"test/tiny-GGUF/tiny-Q4_K_M.gguf": 300000}}'
pull test/tiny-GGUF
expect_eq "cut: fails" "$rc $out" "1 "
expect_in "cut: says why and how to go on" "three tries in a row brought nothing; $cache/test/tiny-GGUF/tiny-Q4_K_M.gguf.part keeps 300000 of 1185376 bytes: run again to resume" "$err"
expect_eq "cut: only the .part" "$(ls "$cache/test/tiny-GGUF")" "tiny-Q4_K_M.gguf.part
tiny-Q8_0.gguf"
expect_eq "cut: list shows it partial" "$("$BIN" list 2>/dev/null | grep tiny-Q4_K_M | awk '{print $3, $4, $5}')" "300.0 kB (partial)"
expect_err "cut: --offline does not take it" "the cache's copy of test/tiny-GGUF has no GGUF file of Q4_K_M; it has: Q8_0" "$BIN" run -hf test/tiny-GGUF:Q4_K_M --offline -p hi
control '{}'
pull test/tiny-GGUF
expect_eq "cut: the next run resumes it to the same SHA-256" "$rc $(sha "$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf")" "0 $want_sha"
expect_in "cut: resumed, said" "tiny-Q4_K_M.gguf (1.2 MB): resuming at 300.0 kB" "$err"
expect_eq "cut: its Range request" "$(grep -c 'GET /cdn/test/tiny-GGUF/tiny-Q4_K_M.gguf bytes=300000-' "$log")" 4

# ---- a wrong checksum; a .part that is not the file's start ----
"$BIN" rm test/tiny-GGUF >/dev/null 2>&1
control '{"corrupt": ["test/tiny-GGUF/tiny-Q4_K_M.gguf"]}'
pull test/tiny-GGUF
expect_eq "wrong SHA-256: refused" "$rc $out" "1 "
expect_in "wrong SHA-256: both named" "tiny-Q4_K_M.gguf: the SHA-256 of the bytes received is" "$err"
expect_in "wrong SHA-256: the hub's" "the hub's listing says $want_sha: the download was removed, not taken" "$err"
expect_eq "wrong SHA-256: nothing kept" "$(ls -A "$cache/test/tiny-GGUF" 2>/dev/null)" ""
control '{}'
mkdir -p "$cache/test/tiny-GGUF"
head -c 5000 /dev/urandom >"$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf.part"
pull test/tiny-GGUF
expect_eq "a .part of other bytes: resumed, then refused by its SHA-256" "$rc $(ls -A "$cache/test/tiny-GGUF")" "1 "
head -c 5000 /dev/urandom >"$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf.part"
control '{"no_range": ["test/tiny-GGUF/tiny-Q4_K_M.gguf"]}'
pull test/tiny-GGUF
expect_eq "a server that ignores Range: the whole file again" "$rc $(sha "$cache/test/tiny-GGUF/tiny-Q4_K_M.gguf")" "0 $want_sha"
control '{}'
touch "$cache/test/tiny-GGUF/tiny-Q8_0.gguf.part"
expect_err "a download of the same file under way (its .part locked): refused" "another download of this file is under way" \
    flock "$cache/test/tiny-GGUF/tiny-Q8_0.gguf.part" "$BIN" pull test/tiny-GGUF:Q8_0
rm "$cache/test/tiny-GGUF/tiny-Q8_0.gguf.part"
mkfifo "$cache/test/tiny-GGUF/tiny-Q8_0.gguf.part"
expect_err "a .part that is not a regular file" "tiny-Q8_0.gguf.part: not a regular file" timeout 20 "$BIN" pull test/tiny-GGUF:Q8_0
rm "$cache/test/tiny-GGUF/tiny-Q8_0.gguf.part"

# ---- gated, missing, malformed ----
control '{"gated": {"test/gated-GGUF": "hf_secret"}}'
expect_err "gated: 401 says to set HF_TOKEN" "test/gated-GGUF: access refused (HTTP 401: \"Access to model test/gated-GGUF is restricted" \
    "$BIN" pull test/gated-GGUF
expect_err "gated: names HF_TOKEN" "needs HF_TOKEN set to a token of an account that may read it" "$BIN" pull test/gated-GGUF
expect_err "gated: a token without access" "the HF_TOKEN given has no access" env HF_TOKEN=hf_wrong "$BIN" pull test/gated-GGUF
out=$(HF_TOKEN=hf_secret "$BIN" pull test/gated-GGUF 2>/dev/null)
expect_eq "gated: the right token" "$out" "$cache/test/gated-GGUF/model-Q4_K_M.gguf"
expect_in "gated: sent as a Bearer header" "GET /test/gated-GGUF/resolve/main/model-Q4_K_M.gguf - Bearer hf_secret" "$(cat "$log")"
control '{}'
expect_err "a missing repository: 404" "test/nothing: no such repository on $HF_ENDPOINT (HTTP 404: \"Repository not found\")" \
    "$BIN" pull test/nothing
expect_err "a name without a slash" "'tiny': a model on the hub is USER/REPO[:QUANT]" "$BIN" pull tiny
expect_err "a name with .." "the repository may not hold \"..\"" "$BIN" pull test/a..b
expect_err "an empty quant" "nothing after ':'" "$BIN" pull test/tiny-GGUF:
expect_err "pull: an unknown option" "pull: unknown option '--fast'" "$BIN" pull test/tiny-GGUF --fast
expect_err "pull: two names" "one model at a time" "$BIN" pull test/a test/b
expect_err "-m and -hf together" "both name a model: give one" "$BIN" run -m "$stories" -hf test/tiny-GGUF -p hi
expect_err "--offline without -hf" "--offline applies to -hf" "$BIN" run --offline -p hi
expect_err "-hf without a value" "-hf needs a value" "$BIN" run -p hi -hf
expect_err "an endpoint that is not http" "is not an http:// or https:// URL" env HF_ENDPOINT=ftp://x "$BIN" pull test/tiny-GGUF

# ---- a full disk ----
control '{"size": {"test/split-GGUF/whole-Q8_0.gguf": 4000000000000000}}'
expect_err "a disk without room: refused before downloading" "whole-Q8_0.gguf needs 4000000000.0 MB more, and the disk of" \
    "$BIN" pull test/split-GGUF:Q8_0
control '{}'
(trap '' XFSZ; ulimit -f 200; "$BIN" pull test/split-GGUF:Q8_0 >/dev/null 2>"$tmp/err"); rc=$?
expect_eq "a write that fails (the disk fills): an error" "$rc" 1
expect_in "a write that fails: says so, keeps the .part" "writing $cache/test/split-GGUF/whole-Q8_0.gguf.part: File too large (204800 of 1185376 bytes written; they are kept" "$(cat "$tmp/err")"
expect_eq "a write that fails: nothing taken" "$(ls -A "$cache/test/split-GGUF")" "whole-Q8_0.gguf.part"
"$BIN" rm test/split-GGUF >/dev/null 2>&1

# ---- the progress bar on a terminal ----
python3 - "$BIN" >"$tmp/tty" 2>&1 <<'PY'
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "pull", "test/tiny-GGUF:Q8_0"])
out = b""
while True:
    try:
        data = os.read(fd, 4096)
    except OSError:
        break
    if not data:
        break
    out += data
os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
PY
expect_in "a terminal: a bar" "tiny-Q8_0.gguf [========================] 100% 1.2 MB / 1.2 MB" "$(cat "$tmp/tty")"
expect_in "a terminal: speed and time left" "/s  ETA 0:00" "$(cat "$tmp/tty")"
expect_in "a terminal: rewritten in place" $'\r' "$(cat "$tmp/tty")"

# ---- -hf on the other commands ----
pull test/tiny-GGUF
expect_in "bench -hf" "tiny-Q4_K_M" "$("$BIN" bench -hf test/tiny-GGUF --offline -p 8 -n 4 -r 1 --no-bandwidth 2>/dev/null)"
echo "Once upon a time there was a little girl. She liked to play in the park with her friends every day." >"$tmp/text"
expect_in "perplexity -hf" "perplexity" "$("$BIN" perplexity -hf test/tiny-GGUF --offline -f "$tmp/text" -c 16 2>&1)"
"$BIN" quantize -hf test/tiny-hf --offline "$tmp/q.gguf" Q8_0 >/dev/null 2>&1
expect_eq "quantize -hf INPUT from the hub" "$?$([ -s "$tmp/q.gguf" ] && echo made)" "0made"
expect_err "quantize -hf with INPUT too" "with -hf, OUTPUT TYPE [THREADS] only" "$BIN" quantize -hf test/tiny-hf x.gguf y.gguf Q8_0 2
expect_in "chat -hf" "nucleus chat: $cache/test/tiny-GGUF/tiny-Q4_K_M.gguf" "$(echo /quit | "$BIN" chat -hf test/tiny-GGUF --offline 2>&1)"
"$BIN" serve -hf test/tiny-GGUF --offline --port 0 >/dev/null 2>"$tmp/serve" &
serve_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/serve" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$tmp/serve" | head -n 1)
expect_in "serve -hf: the model's id" '"id":"tiny-Q4_K_M"' "$(curl -s "$url/v1/models")"
kill "$serve_pid"
wait "$serve_pid"
expect_eq "serve -hf: exits 0" "$?" 0
finish
