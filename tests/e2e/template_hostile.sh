#!/usr/bin/env bash
# Hostile chat templates in model files, end to end (issue 17): copies of stories260K whose
# tokenizer.chat_template is the template fuzzer's 44-byte case (a repetition of '' 27**6 times,
# then a type error) or 100,000 chained filters (once a stack overflow at start-up). `nucleus
# serve` must start on both: the first gives each chat request a quick 400 naming the error, the
# second is refused at parse time (ChatML is used, the start-up note says why); then SIGTERM, a
# clean exit and no sanitizer report. Ends with "template_hostile: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
. tests/lib/checks.sh
tmp=$(mktemp -d)
. tests/lib/servers.sh
trap servers_cleanup EXIT
finish() { echo "template_hostile: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

# with_template SRC DST TEMPLATE_FILE: a copy of the GGUF file SRC with tokenizer.chat_template
# set to the file's text (the key replaced or added; tensor data moved to stay aligned).
with_template() {
    /usr/bin/python3 - "$@" <<'PY'
import struct, sys
src, dst, tpl_path = sys.argv[1:4]
data, tpl = open(src, "rb").read(), open(tpl_path, "rb").read()
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
pos = 24
def take(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, data, pos)[0]
    pos += struct.calcsize("<" + fmt)
    return v
def skip(t):
    global pos
    if t == 8:
        n = take("Q")
        pos += n
    elif t == 9:
        et, n = take("I"), take("Q")
        for _ in range(n): skip(et)
    else: pos += SIZES[t]
version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
kvs, alignment = [], 32
for _ in range(n_kv):
    start = pos
    key = data[pos + 8:pos + 8 + struct.unpack_from("<Q", data, pos)[0]].decode()
    pos += 8 + len(key.encode())
    t = take("I")
    if key == "general.alignment": alignment = struct.unpack_from("<I", data, pos)[0]
    skip(t)
    if key != "tokenizer.chat_template": kvs.append(data[start:pos])
info_start = pos
for _ in range(n_tensors):  # name, n_dims, dims, type, offset
    n = take("Q")
    pos += n
    n = take("I")
    pos += 8 * n + 4 + 8
info = data[info_start:pos]
data_start = -(-pos // alignment) * alignment
key = b"tokenizer.chat_template"
kvs.append(struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(tpl)) + tpl)
out = bytearray(data[:4] + struct.pack("<IQQ", version, n_tensors, len(kvs))) + b"".join(kvs) + info
out += b"\0" * (-len(out) % alignment) + data[data_start:]
open(dst, "wb").write(out)
PY
}

post_status() { curl -s -o "$tmp/body" -w '%{http_code}' -m 60 -X POST "$1" -H 'Content-Type: application/json' -d "$2"; }
CHAT='{"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 2}'

# ---- the fuzzer's 44 bytes: every chat request ends at once with a 400 naming the error ----
printf '%s' "{{ 1 + 3 ** 3 ** 6* endraw2 |trim/ 5-1 }}" >"$tmp/fuzz44.jinja"
with_template "$STORIES" "$tmp/fuzz44.gguf" "$tmp/fuzz44.jinja" && ok || bad "cannot write $tmp/fuzz44.gguf"
if start_server fuzz44 -m "$tmp/fuzz44.gguf" --parallel 1 -c 128 -t 1; then
    t0=$(date +%s.%N)
    code=$(post_status "$url_fuzz44/v1/chat/completions" "$CHAT")
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    expect_eq "44-byte template: status" "$code" "400"
    expect_in "44-byte template: the error" "unsupported operand type(s) for /: 'str' and 'int'" "$(cat "$tmp/body")"
    if [ "$(echo "$took < 5" | bc)" = 1 ]; then ok; else bad "44-byte template: the request took $took s"; fi
    stop_server fuzz44
fi

# ---- 100,000 chained filters: refused when parsed, ChatML used, no stack overflow ----
/usr/bin/python3 -c 'import sys; sys.stdout.write("{{ 1" + "|abs" * 100000 + " }}")' >"$tmp/chain.jinja"
with_template "$STORIES" "$tmp/chain.gguf" "$tmp/chain.jinja" && ok || bad "cannot write $tmp/chain.gguf"
if start_server chain -m "$tmp/chain.gguf" --parallel 1 -c 128 -t 1; then
    expect_in "100,000 filters: the start-up note" "template nested too deeply (more than 200 levels)); chats use ChatML" \
        "$(cat "$tmp/chain.err")"
    expect_eq "100,000 filters: a chat request (ChatML)" "$(post_status "$url_chain/v1/chat/completions" "$CHAT")" "200"
    stop_server chain
fi
expect_err "--chat-template with 100,000 filters" "template nested too deeply" \
    "$NUCLEUS" serve --host 127.0.0.1 --port 0 -m "$STORIES" -t 1 --chat-template "$tmp/chain.jinja"
finish
