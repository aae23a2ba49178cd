#!/usr/bin/env bash
# The server's slot save and restore (POST /slots/{id}?action=save|restore, --slot-save-path),
# end to end with curl and sanitized servers (build/san/nucleus): a slot saved by one server and
# restored by another serves the same prompt with the same text and logprobs, computing only its
# last token (usage.prompt_tokens_details.cached_tokens); a busy slot or one with nothing to
# save, a missing, damaged or foreign file, names that would leave the directory, a bad slot id
# or action are refused with the status and message that say so, and a refused restore leaves
# the prefix cache as it was; without --slot-save-path the endpoint answers 501; a model whose
# sliding-window layers keep rings can save and restore only with --swa-full. Every server exits
# 0 on SIGTERM with no sanitizer report.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
TINY=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
GEMMA=$SHARED/archs/gemma3/gemma3-f16.gguf
. tests/lib/checks.sh
finish() { echo "slots: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

. tests/lib/server_script.sh
mkdir "$tmp/slots"

# post URL BODY: the response body in $body, the status in $code.
post() {
    body=$(curl -s -H 'Content-Type: application/json' -o - -w '\n%{http_code}' "$1" -d "$2")
    code=${body##*$'\n'}
    body=${body%$'\n'*}
}
# json EXPR: a Python expression over the response body d.
json() { /usr/bin/python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$body" "$1"; }
# expect_status WHAT CODE NEEDLE URL BODY
expect_status() {
    post "$4" "$5"
    if [ "$code" == "$2" ] && grep -qF -- "$3" <<<"$body"; then ok; else bad "$1: got $code $body, want $2 with '$3'"; fi
}
cached() { json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]'; }

P='{"prompt": "Once upon a time, there was a little girl", "max_tokens": 8, "temperature": 0, "logprobs": 2}'
n_prompt=$("$NUCLEUS" tokenize -m "$STORIES" -p "Once upon a time, there was a little girl" | wc -w)

# ---- one server saves its slot -------------------------------------------------------------
start_server a -m "$STORIES" --parallel 2 --slot-save-path "$tmp/slots" -t 2 || finish
post "$url_a/v1/completions" "$P"
expect_eq "completion" "$code" 200
want=$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')
post "$url_a/slots/0?action=save" '{"filename": "story.bin"}'
expect_eq "save: status" "$code" 200
expect_eq "save: reply" "$(json 'd["id_slot"], d["filename"], d["n_saved"], d["n_written"], "save_ms" in d["timings"]')" \
    "(0, 'story.bin', $((n_prompt + 7)), $(stat -c %s "$tmp/slots/story.bin" 2>/dev/null), True)"
expect_status "save a slot that served nothing" 409 "slot 1 has no request to save" "$url_a/slots/1?action=save" '{"filename": "e.bin"}'
[ ! -e "$tmp/slots/e.bin" ] && ok || bad "an empty slot wrote a file"
# a slot in use: a long generation holds slot 0
curl -s -H 'Content-Type: application/json' "$url_a/v1/completions" -d '{"prompt": "Once", "max_tokens": 2000, "ignore_eos": true}' >/dev/null &
long=$!
sleep 0.5
expect_status "save a busy slot" 409 "slot 0 is busy" "$url_a/slots/0?action=save" '{"filename": "busy.bin"}'
kill "$long" 2>/dev/null
wait "$long" 2>/dev/null
# requests refused before anything is touched
expect_status "a name with a slash" 400 "'filename' must be a plain file name" "$url_a/slots/0?action=save" '{"filename": "a/b"}'
expect_status "a name going up" 400 "'filename' must be a plain file name" "$url_a/slots/0?action=restore" '{"filename": "../story.bin"}'
expect_status "a hidden name" 400 "'filename' must be a plain file name" "$url_a/slots/0?action=save" '{"filename": ".x"}'
expect_status "no name" 400 "'filename' is required" "$url_a/slots/0?action=save" '{}'
expect_status "not JSON" 400 "not valid JSON" "$url_a/slots/0?action=save" 'story.bin'
expect_status "no action" 400 "'action' is required" "$url_a/slots/0" '{"filename": "x.bin"}'
expect_status "another action" 400 "got 'erase'" "$url_a/slots/0?action=erase" '{"filename": "x.bin"}'
expect_status "slot out of range" 400 "slot id '2' (in the path /slots/ID): expected a number from 0 to 1" \
    "$url_a/slots/2?action=save" '{"filename": "x.bin"}'
expect_status "slot not a number" 400 "slot id '0x'" "$url_a/slots/0x?action=save" '{"filename": "x.bin"}'
code=$(curl -s -o /dev/null -w '%{http_code}' "$url_a/slots/0?action=save")
expect_eq "GET" "$code" 405
expect_eq "no file left outside the directory" "$(ls "$tmp")" "$(printf 'a.err\na.out\nslots')"
stop_server a

# ---- another server restores it ------------------------------------------------------------
start_server b -m "$STORIES" --parallel 2 --slot-save-path "$tmp/slots" -t 2 || finish
post "$url_b/slots/1?action=restore" '{"filename": "story.bin"}'
expect_eq "restore: status" "$code" 200
expect_eq "restore: reply" "$(json 'd["id_slot"], d["n_restored"], d["n_read"], "restore_ms" in d["timings"]')" \
    "(1, $((n_prompt + 7)), $(stat -c %s "$tmp/slots/story.bin"), True)"
post "$url_b/v1/completions" "$P"
expect_eq "after restore: the same text and logprobs" "$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')" "$want"
expect_eq "after restore: all but the last prompt token from the cache" "$(cached)" $((n_prompt - 1))
# the slot that served it saves it again (its blocks went back to the prefix cache)
post "$url_b/slots/0?action=save" '{"filename": "again.bin"}'
expect_eq "save after restore: status" "$code" 200
cmp -s "$tmp/slots/story.bin" "$tmp/slots/again.bin" && ok || bad "the saved-again file differs from the restored one"
# files that cannot be restored: refused, the prefix cache as it was
size=$(stat -c %s "$tmp/slots/story.bin")
cp "$tmp/slots/story.bin" "$tmp/slots/flip.bin"
printf '\x55' | dd of="$tmp/slots/flip.bin" bs=1 seek=$((size / 2)) conv=notrunc status=none
head -c $((size - 1)) "$tmp/slots/story.bin" >"$tmp/slots/short.bin"
cp "$STORIES" "$tmp/slots/model.gguf"
"$NUCLEUS" run -m "$TINY" -p "Once upon a time" -n 2 -t 2 --prompt-cache "$tmp/slots/tiny.bin" >/dev/null 2>&1
expect_status "restore a missing file" 404 "nope.bin: no such slot file" "$url_b/slots/1?action=restore" '{"filename": "nope.bin"}'
expect_status "restore a flipped byte" 400 "flip.bin: checksum mismatch" "$url_b/slots/1?action=restore" '{"filename": "flip.bin"}'
expect_status "restore a truncated file" 400 "short.bin: $((size - 1)) bytes" "$url_b/slots/1?action=restore" '{"filename": "short.bin"}'
expect_status "restore a model file" 400 "model.gguf: not a nucleus KV cache file" "$url_b/slots/1?action=restore" '{"filename": "model.gguf"}'
expect_status "restore another model's file" 400 "tiny.bin: written for another model, 'Raincandy U TinyStories 656K'" \
    "$url_b/slots/1?action=restore" '{"filename": "tiny.bin"}'
grep -qF "$tmp" <<<"$body" && bad "the reply names the server's directory: $body" || ok
post "$url_b/v1/completions" "$P"
expect_eq "after refused restores: the same text" "$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')" "$want"
expect_eq "after refused restores: the prompt still cached" "$(cached)" $((n_prompt - 1))
stop_server b

# ---- off without --slot-save-path; sliding-window rings need --swa-full ------------------------
start_server c -m "$STORIES" --parallel 1 -t 2 || finish
expect_status "off" 501 "start the server with --slot-save-path DIR" "$url_c/slots/0?action=save" '{"filename": "x.bin"}'
stop_server c
long=$(for i in $(seq 1 30); do printf 'the quick brown fox %d jumps over the lazy dog. ' "$i"; done)
G="{\"prompt\": \"$long\", \"max_tokens\": 4, \"temperature\": 0, \"logprobs\": 2}"
n_long=$("$NUCLEUS" tokenize -m "$GEMMA" -p "$long" | wc -w)
start_server e -m "$GEMMA" --parallel 1 --slot-save-path "$tmp/slots" --swa-full -t 2 || finish
post "$url_e/v1/completions" "$G"
gwant=$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')
expect_status "gemma3 --swa-full: save" 200 "\"n_saved\":$((n_long + 3))" "$url_e/slots/0?action=save" '{"filename": "g.bin"}'
stop_server e
start_server f -m "$GEMMA" --parallel 1 --slot-save-path "$tmp/slots" --swa-full -t 2 || finish
expect_status "gemma3 --swa-full: restore" 200 "\"n_restored\":$((n_long + 3))" "$url_f/slots/0?action=restore" '{"filename": "g.bin"}'
post "$url_f/v1/completions" "$G"
expect_eq "gemma3 --swa-full: the same text from the restored cache" "$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]')" "$gwant"
expect_eq "gemma3 --swa-full: cached" "$(cached)" $((n_long - 1))
stop_server f
start_server d -m "$GEMMA" --parallel 1 --slot-save-path "$tmp/slots" -t 2 || finish
post "$url_d/v1/completions" "$G"
expect_status "gemma3 rings: save" 409 "keep rings, which share no prefixes: serve with --swa-full" "$url_d/slots/0?action=save" '{"filename": "r.bin"}'
expect_status "gemma3 rings: restore" 409 "g.bin cannot go into the prefix cache (the model's sliding-window layers keep rings" \
    "$url_d/slots/0?action=restore" '{"filename": "g.bin"}'
post "$url_d/v1/completions" "$G"
expect_eq "gemma3 rings: the same text, computed" "$(json 'd["choices"][0]["text"], d["choices"][0]["logprobs"]'), $(cached)" "$gwant, 0"
stop_server d
finish
