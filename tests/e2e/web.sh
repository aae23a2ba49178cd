#!/usr/bin/env bash
# The web page of `nucleus serve` (issue 14), end to end:
# - curl: the embedded files at / with their Content-Type, ETag (304 on If-None-Match), HEAD,
#   Content-Security-Policy, 405 for other methods, served without the API key while the API
#   still needs it; CORS (--cors): a preflight from an allowed origin 204 with its headers, from
#   another 403, responses carrying Access-Control-Allow-Origin only for the allowed origin,
#   hostile Origin headers ignored; without --cors no CORS header at all and OPTIONS as before;
#   nucleus_explain's fields and refusals;
# - Debian's Chromium driven by playwright-core (tests/node_web, node's test runner): a streamed
#   reply, stop, the inspector against the server's own distribution, the temperature and top-k
#   sliders against probabilities computed from the raw logits, a branch (placed under its reply),
#   the first screen and the favicon, conversations kept across reloads with their list (switch,
#   rename, delete), keyboard only, a 390-pixel-wide screen, CORS from pages on two other
#   origins, and the reasoning of the real Qwen3 and gpt-oss templates in the thinking block.
#   Screenshots: build/web-shots/.
# Sanitized servers (build/san/nucleus): a synthetic Qwen2.5 with its chat template in the GGUF
# (and with the Qwen3 and gpt-oss templates), and stories260K; each exits 0 on SIGTERM with no
# sanitizer report.
# Ends with "web: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "web: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

for tool in node npm /usr/bin/chromium; do
    command -v "$tool" >/dev/null || { bad "$tool is needed (make deps installs it)"; finish; }
done
if [ ! -d tests/node_web/node_modules/playwright-core ]; then
    (cd tests/node_web && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci in tests/node_web failed"; finish; }
fi
. tests/lib/server_script.sh
chat_model=$(synth_model qwen2.5-0.5b-q8_0-l2 --shape qwen2.5-0.5b --layers 2 --type q8_0) || {
    bad "cannot generate the synthetic Qwen2.5 model"
    finish
}
stories=$SHARED/models/stories260K/stories260K.gguf
shots=build/web-shots
mkdir -p "$shots"

# A free loopback port for the page on the allowed origin.
cors_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
origin=http://127.0.0.1:$cors_port
key=web-key-$$
start_server chat -m "$chat_model" --parallel 2 -c 1024 -t 2 --api-key "$key" --cors "$origin,http://other.example" || finish
start_server plain -m "$stories" --parallel 1 -t 1 || finish
# the real Qwen3 and gpt-oss templates, whose replies the page's requests steer (web.test.mjs)
start_server qwen3 -m "$chat_model" --chat-template tests/data/templates/Qwen-Qwen3-0.6B.jinja --parallel 1 -c 1024 \
    -t 1 --api-key "$key" || finish
start_server harmony -m "$chat_model" --chat-template tests/data/templates/openai-gpt-oss-120b.jinja --parallel 1 \
    -c 1024 -t 1 --api-key "$key" || finish

# code URL [CURL FLAGS...]: the status; headers in $tmp/h, body in $tmp/b
code() { local url=$1; shift; curl -s -D "$tmp/h" -o "$tmp/b" -w '%{http_code}' "$@" "$url"; }
header() { grep -i "^$1:" "$tmp/h" | head -n 1 | cut -d' ' -f2- | tr -d '\r'; }

# ---- the embedded page ----
expect_eq "GET / without the key" "$(code "$url_chat/")" 200
expect_in "/ is the page" '<script type="module" src="/app.js">' "$(cat "$tmp/b")"
expect_eq "/ is HTML" "$(header Content-Type)" "text/html; charset=utf-8"
expect_in "a strict CSP" "default-src 'none'; script-src 'self'" "$(header Content-Security-Policy)"
expect_eq "nosniff" "$(header X-Content-Type-Options)" nosniff
expect_eq "revalidated" "$(header Cache-Control)" no-cache
etag=$(header ETag)
expect_eq "/index.html is the same file" "$(code "$url_chat/index.html"; header ETag)" "200$etag"
expect_eq "If-None-Match: 304" "$(code "$url_chat/" -H "If-None-Match: $etag")" 304
expect_eq "If-None-Match in a list, weak" "$(code "$url_chat/" -H "If-None-Match: \"x\", W/$etag")" 304
expect_eq "another ETag: 200" "$(code "$url_chat/" -H 'If-None-Match: "0000"')" 200
expect_eq "HEAD /" "$(code "$url_chat/" -I)" 200
for f in app.js markdown.js inspector.js; do
    expect_eq "$f is JavaScript" "$(code "$url_chat/$f" >/dev/null; header Content-Type)" "text/javascript; charset=utf-8"
    expect_eq "$f is web/$f" "$(md5sum <"$tmp/b")" "$(md5sum <"web/$f")"
done
expect_eq "style.css" "$(code "$url_chat/style.css" >/dev/null; header Content-Type)" "text/css; charset=utf-8"
expect_eq "store.js" "$(code "$url_chat/store.js" >/dev/null; header Content-Type)" "text/javascript; charset=utf-8"
expect_eq "the favicon, without the key" "$(code "$url_chat/favicon.svg"; header Content-Type)" "200image/svg+xml"
expect_eq "/favicon.ico is the same icon" "$(code "$url_chat/favicon.ico"; md5sum <"$tmp/b")" "200$(md5sum <web/favicon.svg)"
expect_eq "POST / is 405" "$(code "$url_chat/" -X POST -H 'Content-Type: application/json' -d '{}'; header Allow)" "405GET, HEAD"
expect_eq "the API still needs the key" "$(code "$url_chat/v1/models")" 401
expect_eq "an unknown path still needs the key" "$(code "$url_chat/nothing.js")" 401
expect_eq "/health unchanged" "$(code "$url_chat/health"; cat "$tmp/b")" '200{"status":"ok"}'
expect_eq "a path outside the page" "$(code "$url_chat/../Makefile" --path-as-is -H "Authorization: Bearer $key")" 404

# ---- CORS ----
preflight() { code "$url_chat/v1/chat/completions" -X OPTIONS -H "Origin: $1" -H 'Access-Control-Request-Method: POST' \
                   -H 'Access-Control-Request-Headers: authorization, content-type'; }
expect_eq "preflight from the allowed origin" "$(preflight "$origin")" 204
expect_eq "its Allow-Origin" "$(header Access-Control-Allow-Origin)" "$origin"
expect_eq "its methods" "$(header Access-Control-Allow-Methods)" "GET, POST, OPTIONS"
expect_eq "its headers" "$(header Access-Control-Allow-Headers)" "Authorization, Content-Type, X-Request-Id"
expect_eq "its max age" "$(header Access-Control-Max-Age)" 600
expect_eq "the second origin of the list" "$(preflight http://other.example; header Access-Control-Allow-Origin)" "204http://other.example"
expect_eq "an origin in another case" "$(preflight HTTP://OTHER.example)" 204
expect_eq "preflight from another origin" "$(preflight http://evil.example)" 403
expect_eq "no Allow-Origin then" "$(header Access-Control-Allow-Origin)" ""
expect_eq "the same host on another port" "$(preflight "http://127.0.0.1:1")" 403
expect_eq "the allowed origin with a path" "$(preflight "$origin/x")" 403
expect_eq "null" "$(preflight null)" 403
long=$(head -c 5000 /dev/zero | tr '\0' a)
expect_eq "a 5000-byte origin" "$(preflight "http://$long")" 403
expect_eq "an origin with a bracket and junk" "$(preflight "http://[::1]:80:80")" 403
expect_eq "a request from the allowed origin" \
    "$(code "$url_chat/v1/models" -H "Origin: $origin" -H "Authorization: Bearer $key"; echo "$(header Access-Control-Allow-Origin) $(header Vary)")" \
    "200$origin Origin"
expect_eq "a 401 to it says so too (the page can read the error)" \
    "$(code "$url_chat/v1/models" -H "Origin: $origin"; header Access-Control-Allow-Origin)" "401$origin"
expect_eq "a request from another origin" \
    "$(code "$url_chat/v1/models" -H 'Origin: http://evil.example' -H "Authorization: Bearer $key"; header Access-Control-Allow-Origin)" 200
expect_eq "a stream to the allowed origin" \
    "$(code "$url_chat/v1/completions" -H "Origin: $origin" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
        -d '{"prompt":"a","max_tokens":2,"stream":true}'; header Access-Control-Allow-Origin)" "200$origin"
expect_eq "without --cors: no CORS header" \
    "$(code "$url_plain/v1/models" -H "Origin: $origin"; header Access-Control-Allow-Origin)" 200
expect_eq "without --cors: OPTIONS as before (405)" \
    "$(code "$url_plain/v1/completions" -X OPTIONS -H "Origin: $origin" -H 'Access-Control-Request-Method: POST')" 405
expect_eq "without --cors: the page is served" "$(code "$url_plain/")" 200

# ---- nucleus_explain ----
gen() { code "$url_plain/v1/completions" -H 'Content-Type: application/json' -d "$1"; }
expect_eq "nucleus_explain: true" "$(gen '{"prompt":"Once upon","max_tokens":3,"seed":1,"nucleus_explain":true}')" 200
python3 - "$tmp/b" <<'PY' && ok || bad "nucleus_explain's shape"
import json, math, sys
r = json.load(open(sys.argv[1]))
x = r["choices"][0]["nucleus_explain"]
assert x["prompt_tokens"][0] == 1 and len(x["steps"]) == 3, x
for i, s in enumerate(x["steps"]):
    assert s["step"] == i and s["sample"] == 0
    assert s["stages"][-1]["name"] == "dist" and s["n_candidates"] == 512
    raw = s["raw"]
    assert raw["n_vocab"] == 512 and len(raw["top"]) == 20
    logits = [t["logit"] for t in raw["top"]]
    assert logits == sorted(logits, reverse=True)
    for t in raw["top"]:
        assert abs(t["logprob"] - (t["logit"] - raw["logsumexp"])) < 1e-5
    # temperature 1, no truncation: the final distribution is the raw softmax
    for t in s["top"]:
        raw_t = next(u for u in raw["top"] if u["token"] == t["token"])
        assert abs(math.exp(raw_t["logprob"]) - t["p"]) < 1e-5, (t, raw_t)
    assert raw["token_logit"] <= logits[0]
PY
expect_eq "nucleus_explain top_n 200" "$(gen '{"prompt":"a","max_tokens":1,"nucleus_explain":{"top_n":200}}'; python3 -c 'import json,sys; print(len(json.load(sys.stdin)["choices"][0]["nucleus_explain"]["steps"][0]["raw"]["top"]))' <"$tmp/b")" 200200
expect_eq "nucleus_explain false: no field" "$(gen '{"prompt":"a","max_tokens":1,"nucleus_explain":false}'; grep -c nucleus_explain "$tmp/b")" 2000
for bad_value in '{"top_n":0}' '{"top_n":201}' '{"top_n":2.5}' '{"top_n":"9"}' '{"top":3}' '"yes"' '1' '[]'; do
    st=$(gen "{\"prompt\":\"a\",\"nucleus_explain\":$bad_value}")
    expect_eq "nucleus_explain $bad_value refused" "$st$(python3 -c 'import json,sys; print(json.load(sys.stdin)["error"]["param"])' <"$tmp/b")" \
        "400$(case $bad_value in '{"top_n"'*) echo nucleus_explain.top_n;; *) echo nucleus_explain;; esac)"
done
expect_eq "nucleus_explain with beam search" \
    "$(gen '{"prompt":"a","use_beam_search":true,"best_of":2,"nucleus_explain":true}')" 400

# ---- the page in Chromium ----
NUCLEUS_URL=$url_chat NUCLEUS_URL_QWEN3=$url_qwen3 NUCLEUS_URL_HARMONY=$url_harmony NUCLEUS_KEY=$key \
    CORS_PORT=$cors_port SHOTS=$(pwd)/$shots \
    node --test --test-reporter=tap --test-timeout=240000 tests/node_web/web.test.mjs >"$tmp/node.tap" 2>&1
count_tap "$tmp/node.tap"
for f in desktop-inspector desktop-slider desktop-branch desktop-first-screen phone-chat phone-inspector; do
    if [ -s "$shots/$f.png" ]; then ok; else bad "no screenshot $shots/$f.png"; fi
done

stop_server chat
stop_server plain
stop_server qwen3
stop_server harmony
finish
