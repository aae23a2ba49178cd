#!/usr/bin/env bash
# Router mode (nucleus serve --models-dir DIR): three shared models and a broken file, at most two
# in memory (--models-max 2):
# - requests for all three interleaved from 8 clients (tests/e2e/router_load.py), every answer
#   equal to a single-model server's (-m) for the same request and seed; requests for the broken
#   file among them each fail with the loader's message, and nothing else fails;
# - /v1/models: statuses and metadata, the least recently used model unloaded for a third, the
#   broken one "failed" with its reason; 404 naming the models; /metrics labelled by model;
# - POST /models/unload waits for a running stream, which ends whole; POST /models/load;
# - --sleep-idle-seconds unloads an idle model (a second router), --memory-budget (a third);
# - the flags' refusals, a --models INI file (a FIFO refused), a split GGUF found in the
#   directory, a model of the download cache (USER/REPO:QUANT), a preset's chat template that is
#   a FIFO, a render at SIGTERM cancelled at once;
# - the web page's model picker in Chromium (tests/node_web/picker.test.mjs);
# - memory: the release build's RSS after 50 load / unload cycles within 10% of its value after
#   the first (a third router, build/nucleus).
# Sanitized servers but the last; each exits 0 on SIGTERM with no sanitizer report.
# Ends with "router: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
NUCLEUS_REL=${NUCLEUS_REL:-build/nucleus}
. tests/lib/checks.sh
finish() { echo "router: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
. tests/lib/server_script.sh
export NUCLEUS_CACHE=$tmp/cache # router mode serves the download cache's models too (one, below)

stories=$SHARED/models/stories260K/stories260K.gguf
qwen2=$SHARED/archs/qwen2/qwen2-f16.gguf
llama3=$SHARED/archs/llama3/llama3-f16.gguf
dir=$tmp/models
mkdir -p "$dir"
ln -s "$stories" "$dir/stories.gguf"
ln -s "$qwen2" "$dir/qwen2.gguf"
ln -s "$llama3" "$dir/llama3.gguf"
printf 'this is not a GGUF file' >"$dir/broken.gguf"
common=(--parallel 2 -c 1024 -t 1)

launch_server router --models-dir "$dir" --models-max 2 "${common[@]}"
launch_server one_stories -m "$stories" "${common[@]}"
launch_server one_qwen2 -m "$qwen2" "${common[@]}"
launch_server one_llama3 -m "$llama3" "${common[@]}"
launch_server idle --models-dir "$dir" --sleep-idle-seconds 1 --parallel 1 -c 256 -t 1
launch_server budget --models-dir "$dir" --memory-budget 700K --parallel 1 -c 256 -t 1
for s in router one_stories one_qwen2 one_llama3 idle budget; do await_server $s || finish; done
U=$url_router
expect_in "the start-up says whether requests need a key" "authentication: off (no API key)" "$(cat "$tmp/router.err")"

post() { curl -s -H 'Content-Type: application/json' "$1$2" -d "$3"; }
# status MODEL: the model's status.value (and its reason when failed) in /v1/models
status() {
    curl -s "$U/v1/models" | python3 -c 'import json,sys
for m in json.load(sys.stdin)["data"]:
    if m["id"] == sys.argv[1]: print(m["status"]["value"], m["status"].get("reason", ""))' "$1" | sed 's/ $//'
}
statuses() { echo "$(status stories) $(status qwen2) $(status llama3)"; }

# ---- the listing before any request ----
expect_eq "/v1/models lists the directory" "$(curl -s "$U/v1/models" | python3 -c 'import json,sys; print(" ".join(m["id"] for m in json.load(sys.stdin)["data"]))')" \
    "broken llama3 qwen2 stories"
expect_eq "nothing loaded yet" "$(statuses)" "unloaded unloaded unloaded"

# ---- 8 clients over the three models, against single-model servers ----
python3 tests/e2e/router_load.py "$U" stories="$url_one_stories" qwen2="$url_one_qwen2" llama3="$url_one_llama3" \
    --broken broken >"$tmp/load.out" 2>&1
grep FAIL "$tmp/load.out" | head -n 10
line=$(tail -n 1 "$tmp/load.out")
if [[ $line =~ router_load:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    pass=$((pass + BASH_REMATCH[1])); fail=$((fail + BASH_REMATCH[2]))
else
    bad "router_load.py: $(tail -n 5 "$tmp/load.out")"
fi
expect_eq "the broken file is failed, with the loader's reason" "$(status broken)" \
    "failed $dir/broken.gguf: header: bad magic \"this\" at offset 0 (expected \"GGUF\"): not a GGUF file"
loaded=$(curl -s "$U/v1/models" | python3 -c 'import json,sys; print(sum(m["status"]["value"] == "loaded" for m in json.load(sys.stdin)["data"]))')
expect_eq "at most two models in memory" "$loaded" 2

# ---- least recently used ----
for m in stories qwen2 llama3; do post "$U" /models/unload "{\"model\":\"$m\"}" >/dev/null; done
expect_eq "all unloaded" "$(statuses)" "unloaded unloaded unloaded"
gen() { post "$U" /v1/completions "{\"model\":\"$1\",\"prompt\":\"Once\",\"max_tokens\":2}" >/dev/null; }
gen stories; gen qwen2
expect_eq "two loaded" "$(statuses)" "loaded loaded unloaded"
gen stories # qwen2 is now the least recently used
gen llama3
expect_eq "the least recently used made room" "$(statuses)" "loaded unloaded loaded"
meta=$(curl -s "$U/v1/models/llama3" | python3 -c 'import json,sys; m=json.load(sys.stdin)["meta"]; print(m["arch"], m["n_ctx"], m["n_parallel"], m["loads"] >= 2, m["size"] > 400000)')
expect_eq "/v1/models/{id}: a loaded model's metadata" "$meta" "llama 1024 2 True True"
out=$(post "$U" /v1/completions '{"model":"gpt-4","prompt":"x"}')
expect_in "an unknown model: 404 naming the models" '"The model '"'"'gpt-4'"'"' does not exist (this server has: broken, llama3, qwen2, stories)"' "$out"
expect_in "... model_not_found" '"code":"model_not_found"' "$out"
expect_in "no model named: 400" "'model' is required" "$(post "$U" /v1/completions '{"prompt":"x"}')"
m=$(curl -s "$U/metrics")
expect_in "/metrics labelled by model" 'nucleus_generated_tokens_total{model="llama3"}' "$m"
expect_in "/metrics: each model's histogram" 'nucleus_time_to_first_token_seconds_bucket{model="stories",le="+Inf"}' "$m"
expect_in "/metrics: one HELP per family" "1" "$(grep -c '^# HELP nucleus_slots_total' <<<"$m")"

# ---- an unload waits for the stream it would cut ----
curl -sN -H 'Content-Type: application/json' "$U/v1/completions" \
    -d '{"model":"stories","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}' >"$tmp/stream.out" &
cpid=$!
for _ in $(seq 1 100); do [ -s "$tmp/stream.out" ] && break; sleep 0.05; done
out=$(post "$U" /models/unload '{"model":"stories"}')
wait $cpid
n_chunks=$(grep -c '"text":' "$tmp/stream.out")
expect_eq "the stream the unload waited for ended whole" "$(tail -c 200 "$tmp/stream.out" | grep -c 'data: \[DONE\]')" 1
expect_in "... with all its tokens" '"finish_reason":"length"' "$(tail -n 6 "$tmp/stream.out")"
if [ "$n_chunks" -ge 300 ]; then ok; else bad "the stream has $n_chunks chunks of 400 tokens"; fi
expect_eq "unload: success" "$out" '{"success":true,"model":"stories","status":"unloaded"}'
expect_eq "stories unloaded" "$(status stories)" unloaded
expect_eq "POST /models/load" "$(post "$U" /models/load '{"model":"stories"}')" '{"success":true,"model":"stories","status":"loaded"}'
expect_in "POST /models/load of the broken file" '"code":"model_load_failed"' "$(post "$U" /models/load '{"model":"broken"}')"
expect_in "POST /models/load without a model" "'model' is required" "$(post "$U" /models/load '{}')"

# ---- idle models go (the second router) ----
post "$url_idle" /v1/completions '{"model":"qwen2","prompt":"x","max_tokens":2}' >/dev/null
first=$(curl -s "$url_idle/v1/models/qwen2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["value"])')
sleep 2.5
later=$(curl -s "$url_idle/v1/models/qwen2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["value"])')
expect_eq "--sleep-idle-seconds 1: loaded, then unloaded when idle" "$first $later" "loaded unloaded"

# ---- the web page's picker (Chromium) ----
if command -v /usr/bin/chromium >/dev/null && { [ -d tests/node_web/node_modules/playwright-core ] ||
    (cd tests/node_web && npm ci --no-audit --no-fund --loglevel=error); }; then
    NUCLEUS_URL=$U NUCLEUS_SINGLE_URL=$url_one_stories \
        node --test --test-reporter=tap --test-timeout=120000 tests/node_web/picker.test.mjs >"$tmp/picker.tap" 2>&1
    count_tap "$tmp/picker.tap"
else
    bad "the picker's test needs Chromium and tests/node_web's packages (make test-deps)"
fi

# ---- --memory-budget (the third router: 700 KiB) ----
post "$url_budget" /v1/completions '{"model":"qwen2","prompt":"x","max_tokens":2}' >/dev/null
post "$url_budget" /v1/completions '{"model":"llama3","prompt":"x","max_tokens":2}' >/dev/null
expect_eq "--memory-budget: qwen2 made room for llama3" "$(U=$url_budget statuses)" "unloaded unloaded loaded"
expect_in "--memory-budget: a model larger than it" "more than --memory-budget" \
    "$(post "$url_budget" /v1/completions '{"model":"stories","prompt":"x","max_tokens":2}')"

for s in router one_stories one_qwen2 one_llama3 idle budget; do stop_server $s; done

# ---- the flags ----
one_or_several="give -m MODEL or -hf USER/REPO (one model), or --models-dir / --models (several)"
expect_err "-m and --models-dir" "$one_or_several" "$NUCLEUS" serve -m "$stories" --models-dir "$dir"
expect_err "-hf and --models-dir" "$one_or_several" "$NUCLEUS" serve -hf test/tiny-GGUF --models-dir "$dir"
expect_err "--offline without -hf" "--offline applies to -hf" "$NUCLEUS" serve --models-dir "$dir" --offline
expect_err "--models-max without a router" "need --models-dir or --models" "$NUCLEUS" serve -m "$stories" --models-max 2
expect_err "a directory that is not there" "--models-dir $tmp/none:" "$NUCLEUS" serve --models-dir "$tmp/none"
printf '[a]\nmodel = x.gguf\nfrob = 1\n' >"$tmp/bad.ini"
expect_err "an INI key unknown" "$tmp/bad.ini:3: unknown key 'frob'" "$NUCLEUS" serve --models "$tmp/bad.ini"
expect_err "--memory-budget" "--memory-budget: expected a byte count" "$NUCLEUS" serve --models-dir "$dir" --memory-budget lots
mkfifo "$tmp/fifo.ini" "$tmp/fifo.jinja"
expect_err "--models FIFO: refused, not read" "fifo.ini: a FIFO, not a regular file" \
    timeout 20 "$NUCLEUS" serve --models "$tmp/fifo.ini"
# a Hugging Face directory and a split GGUF found in --models-dir, beside a GGUF file and an INI
# file's presets (one whose chat template is a FIFO, one whose template renders for seconds)
mkdir -p "$tmp/models2"
ln -s "$stories" "$tmp/models2/stories.gguf"
ln -s "$SHARED/archs/llama3/hf" "$tmp/models2/llama3hf"
/usr/bin/python3 tests/tools/gguf_split.py "$stories" "$tmp/models2/parts" 2 || bad "cannot split $stories"
printf '%s' "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ messages[0]['content'] }}" \
    >"$tmp/slow.jinja"
printf '[tiny]\nmodel = %s\nparallel = 3\nctx-size = 512\nload-on-startup = true\nmodel-draft = %s\n[stories]\nctx-size = 256\n' \
    "$stories" "$stories" >"$tmp/models.ini"
printf '[fifo]\nmodel = %s\nchat-template-file = %s\n[slow]\nmodel = %s\nchat-template-file = %s\nparallel = 2\n' \
    "$stories" "$tmp/fifo.jinja" "$stories" "$tmp/slow.jinja" >>"$tmp/models.ini"
# a model pulled into the download cache before (its layout: ROOT/USER/REPO/FILE), and a download
# cut short there (.part), which is not a model
mkdir -p "$NUCLEUS_CACHE/test/tiny-GGUF"
cp "$stories" "$NUCLEUS_CACHE/test/tiny-GGUF/tiny-Q8_0.gguf"
printf 'half' >"$NUCLEUS_CACHE/test/tiny-GGUF/tiny-Q4_0.gguf.part"
if start_server ini --models-dir "$tmp/models2" --models "$tmp/models.ini" -t 1; then
    ids=$(curl -s "$url_ini/v1/models" | python3 -c 'import json,sys; print(" ".join(m["id"] for m in json.load(sys.stdin)["data"] if "/" in m["id"]))')
    expect_eq "the download cache's models in /v1/models, as pull names them" "$ids" "test/tiny-GGUF:Q8_0"
    out=$(post "$url_ini" /v1/completions '{"model":"llama3hf","prompt":"Once","max_tokens":3}' | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["model"], r["usage"]["completion_tokens"])')
    expect_eq "a Hugging Face directory of --models-dir" "$out" "llama3hf 3"
    expect_eq "load-on-startup" "$(curl -s "$url_ini/v1/models/tiny" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["value"])')" loaded
    out=$(curl -s "$url_ini/props?model=tiny" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["total_slots"], p["n_ctx"], p["default_generation_settings"]["speculative"])')
    expect_eq "an INI preset's options (slots, context, a draft model)" "$out" "3 512 True"
    out=$(curl -s "$url_ini/props?model=stories" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["total_slots"], p["n_ctx"])')
    expect_eq "an INI section for a model of the directory" "$out" "4 256"
    greedy() { post "$url_ini" /v1/completions "{\"model\":\"$1\",\"prompt\":\"Once\",\"max_tokens\":8,\"temperature\":0}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'; }
    expect_eq "a split GGUF of --models-dir generates what the whole file does" "$(greedy parts)" "$(greedy stories)"
    expect_eq "a model of the download cache generates what its file does" "$(greedy test/tiny-GGUF:Q8_0)" "$(greedy stories)"
    size=$(curl -s "$url_ini/v1/models/parts" | python3 -c 'import json,sys; print(json.load(sys.stdin)["meta"]["size"] > 0)')
    expect_eq "... its size" "$size" True
    expect_in "a chat-template-file that is a FIFO: refused at the load, not read" "fifo.jinja: a FIFO, not a regular file" \
        "$(post "$url_ini" /v1/chat/completions '{"model":"fifo","messages":[{"role":"user","content":"hi"}],"max_tokens":1}')"
    # a render at SIGTERM ends at once (503), not after the drain a long generation keeps going
    curl -s -o /dev/null -H 'Content-Type: application/json' -m 60 "$url_ini/v1/completions" \
        -d '{"model":"slow","prompt":"Once","max_tokens":100000,"ignore_eos":true}' &
    long=$!
    curl -s -o "$tmp/render" -w '%{http_code} %{time_total}' -H 'Content-Type: application/json' -m 60 \
        "$url_ini/v1/chat/completions" -d '{"model":"slow","messages":[{"role":"user","content":"hi"}],"max_tokens":2}' \
        >"$tmp/render_code" &
    render=$!
    for _ in $(seq 1 200); do
        curl -s "$url_ini/metrics" | grep -q '^nucleus_requests_total{endpoint="/v1/chat/completions"} 2$' && break
        sleep 0.1
    done
    sleep 0.3
    t0=$(date +%s.%N)
    kill -TERM "$pid_ini"
    wait "$render"
    t1=$(date +%s.%N)
    expect_eq "a render at SIGTERM: the status" "$(cut -d' ' -f1 "$tmp/render_code")" 503
    expect_in "a render at SIGTERM: the reason" "the server is shutting down" "$(cat "$tmp/render")"
    if awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 2) }'; then ok
    else bad "a render at SIGTERM took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s to end (at most 2)"; fi
    wait "$long"
    stop_server ini
fi

# ---- memory over 50 load / unload cycles (release build) ----
if [ ! -x "$NUCLEUS_REL" ] && ! make "$NUCLEUS_REL" >/dev/null; then
    bad "cannot build $NUCLEUS_REL"
    finish
fi
NUCLEUS=$NUCLEUS_REL launch_server rss --models-dir "$dir" "${common[@]}"
if await_server rss; then
    cycle() {
        for m in stories qwen2 llama3; do
            post "$url_rss" /models/load "{\"model\":\"$m\"}" >/dev/null
            post "$url_rss" /v1/completions "{\"model\":\"$m\",\"prompt\":\"Once upon a time\",\"max_tokens\":8}" >/dev/null
            post "$url_rss" /models/unload "{\"model\":\"$m\"}" >/dev/null
        done
    }
    rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid_rss/status"; }
    cycle
    before=$(rss)
    for _ in $(seq 1 50); do cycle; done
    after=$(rss)
    echo "RSS: ${before} kB after one cycle, ${after} kB after 50 more"
    if [ "$after" -le $((before * 11 / 10)) ]; then ok; else bad "RSS grew from $before kB to $after kB over 50 load/unload cycles"; fi
    expect_eq "all unloaded after the cycles" "$(U=$url_rss statuses)" "unloaded unloaded unloaded"
    stop_server rss
fi
finish
