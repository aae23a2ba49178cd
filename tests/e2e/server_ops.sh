#!/usr/bin/env bash
# `nucleus serve` operability: the access log, the start-up summary, --alias, --chat-template,
# /v1/models/{id} and /v1/embeddings (checked against reference-forward's float64 hidden states).
# Sanitized servers on free loopback ports; ends with "server_ops: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
STORIES=$SHARED/models/stories260K/stories260K.gguf
TINY=$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf
. tests/lib/checks.sh
tmp=$(mktemp -d)
. tests/lib/servers.sh
trap servers_cleanup EXIT
finish() { echo "server_ops: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
/usr/bin/python3 -c 'import numpy' 2>/dev/null || { bad "python3-numpy missing: run 'make deps'"; finish; }
post() { curl -s -X POST "$1" -H 'Content-Type: application/json' -d "$2"; }
status() { curl -s -o /dev/null -w '%{http_code}' -X POST "$1" -H 'Content-Type: application/json' -d "$2"; }

start_server ops -m "$TINY" --parallel 2 -c 128 -t 2 --alias tiny-alias || finish
U=$url_ops

# ---- start-up summary: the KV cache size from the GGUF's own metadata (f16: 2 bytes) ----
/usr/bin/python3 - "$TINY" "$tmp/ops.err" <<'PY' && ok || bad "start-up summary: $(head -8 "$tmp/ops.err")"
import importlib.machinery, importlib.util, re, sys
import os; loader = importlib.machinery.SourceFileLoader("rf", os.environ.get("SHARED", "/work/shared") + "/tools/reference-forward")
rf = importlib.util.module_from_spec(importlib.util.spec_from_loader("rf", loader)); loader.exec_module(rf)
g = rf.GGUF(sys.argv[1]); a = g.kv["general.architecture"]; k = lambda s: g.kv[a + "." + s]
per_token = k("block_count") * 2 * k("embedding_length") // k("attention.head_count") * k("attention.head_count_kv") * 2
err = open(sys.argv[2]).read()
m = re.search(r"^  slots: 2 x 128 tokens of context; KV cache keys f16, values f16: ([0-9.]+) KiB per token, ([0-9.]+) MiB$", err, re.M)
assert m, err
assert abs(float(m.group(1)) - per_token / 1024) < 0.05, (m.group(1), per_token)
cells = 2 * -(-128 // 256) * 256  # each slot's context in whole blocks of 256 cells
assert abs(float(m.group(2)) - per_token * cells / 2**20) < 0.005, (m.group(2), per_token)
assert re.search(r"^  model: .*TinyStories-656K-Q8_0\.gguf \(llama, %d layers, .*\), id tiny-alias$" % k("block_count"), err, re.M), err
assert re.search(r"^  threads: 2; kernels: (avx512|avxvnni|avx2|neon|scalar); chat template: ", err, re.M), err
lines = err.splitlines()
assert re.fullmatch(r"listening on http://127\.0\.0\.1:\d+", lines[[i for i, l in enumerate(lines) if l.startswith("listening")][0]]), err
PY

# ---- --alias and /v1/models/{id} ----
expect_eq "/v1/models lists the alias" "$(curl -s "$U/v1/models" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" tiny-alias
out=$(curl -s -w ' %{http_code}' "$U/v1/models/tiny-alias")
expect_eq "/v1/models/{alias}" "$(/usr/bin/python3 -c 'import json,sys; b,c=sys.argv[1].rsplit(" ",1); d=json.loads(b); print(c, d["id"], d["object"], d["owned_by"])' "$out")" "200 tiny-alias model nucleus"
out=$(curl -s -w ' %{http_code}' "$U/v1/models/TinyStories-656K-Q8_0")
expect_eq "/v1/models/{other}: 404" "$(/usr/bin/python3 -c 'import json,sys; b,c=sys.argv[1].rsplit(" ",1); e=json.loads(b)["error"]; print(c, e["type"], e["code"], e["param"])' "$out")" "404 invalid_request_error model_not_found model"
resp=$(post "$U/v1/completions" '{"prompt":"Once upon a time","max_tokens":5,"ignore_eos":true,"temperature":0}')
expect_eq "responses name the alias" "$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["model"])' "$resp")" tiny-alias

# ---- /v1/embeddings against the float64 reference: mean of the final-norm hidden states, L2 = 1 ----
resp=$(post "$U/v1/embeddings" '{"input":[[1,403,407,261,300],[1,500,30]],"model":"tiny-alias"}')
/usr/bin/python3 - "$TINY" "$resp" <<'PY' && ok || bad "embeddings vs reference-forward: ${resp:0:300}"
import importlib.machinery, importlib.util, json, os, sys
import numpy as np
path = os.environ.get("SHARED", "/work/shared") + "/tools/reference-forward"
loader = importlib.machinery.SourceFileLoader("rf", path)
rf = importlib.util.module_from_spec(importlib.util.spec_from_loader("rf", loader)); loader.exec_module(rf)
m = rf.Model(sys.argv[1])
m.out = np.eye(m.n_embd)  # logits(ids) now returns the final-norm hidden states themselves
d = json.loads(sys.argv[2])
assert d["object"] == "list" and d["model"] == "tiny-alias" and len(d["data"]) == 2, d.keys()
assert d["usage"] == {"prompt_tokens": 8, "total_tokens": 8}, d["usage"]
for i, ids in enumerate([[1, 403, 407, 261, 300], [1, 500, 30]]):
    ref = m.logits(ids).mean(axis=0); ref /= np.linalg.norm(ref)
    e = d["data"][i]
    assert e["object"] == "embedding" and e["index"] == i
    got = np.array(e["embedding"])
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert abs(np.linalg.norm(got) - 1) < 1e-4, np.linalg.norm(got)
    assert float(got @ ref) > 0.9995 and np.abs(got - ref).max() < 0.01, (float(got @ ref), np.abs(got - ref).max())
    last = m.logits(ids)[-1]; last /= np.linalg.norm(last)
    assert float(got @ ref) > float(got @ last) or len(ids) == 1  # mean, not last-token pooling
PY
# a text is tokenized with BOS, as /tokenize with add_special; base64 holds the same float32 values
ids=$(post "$U/tokenize" '{"content":"Once upon a time","add_special":true}' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
a=$(post "$U/v1/embeddings" '{"input":"Once upon a time"}')
b=$(post "$U/v1/embeddings" "{\"input\":$ids,\"encoding_format\":\"base64\"}")
/usr/bin/python3 - "$a" "$b" "$ids" <<'PY' && ok || bad "embeddings of a text / base64: ${a:0:200} ${b:0:200}"
import base64, json, struct, sys
a, b, ids = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
assert a["usage"]["prompt_tokens"] == len(ids), (a["usage"], ids)
raw = base64.b64decode(b["data"][0]["embedding"])
vb = struct.unpack("<%df" % (len(raw) // 4), raw)
va = a["data"][0]["embedding"]
assert len(va) == len(vb) and max(abs(x - y) for x, y in zip(va, vb)) < 1e-6
PY
# malformed requests: 400 in OpenAI's shape, naming the field
for case in 'not json|' '{}|input' '{"input":5}|input' '{"input":""}|input' '{"input":[]}|input' \
            '{"input":[1,99999]}|input' '{"input":[["a"]]}|input[0]' '{"input":"hi","encoding_format":"int8"}|encoding_format' \
            '{"input":"hi","dimensions":8}|dimensions' '{"input":"hi","model":5}|model'; do
    body=${case%|*} param=${case##*|}
    out=$(curl -s -H 'Content-Type: application/json' -w ' %{http_code}' -X POST "$U/v1/embeddings" -d "$body")
    got=$(/usr/bin/python3 -c 'import json,sys; b,c=sys.argv[1].rsplit(" ",1); e=json.loads(b)["error"]; print(c, e["type"], e["param"] or "")' "$out" 2>&1)
    expect_eq "embeddings $body" "$got" "400 invalid_request_error $param"
done
long=$(/usr/bin/python3 -c 'print([1] + [403] * 200)')
out=$(curl -s -H 'Content-Type: application/json' -w ' %{http_code}' -X POST "$U/v1/embeddings" -d "{\"input\":$long}")
expect_in "embeddings longer than the context" "context_length_exceeded" "$out"
expect_eq "GET /v1/embeddings: 405" "$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/embeddings")" 405

# ---- the access log: one line per request, tokens as the responses count them ----
s=$(post "$U/v1/completions" '{"prompt":"Once upon a time","max_tokens":5,"ignore_eos":true,"stream":true}')
curl -s -o /dev/null "$U/no/such/path"
n_prompt=$(post "$U/tokenize" '{"content":"Once upon a time","add_special":true}' | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))')
# a request's line is written when the server finalises it, which may be just after the client
# has its response: wait (5 s at most) for the last request's line
for _ in $(seq 1 50); do grep -q '^access: POST /tokenize ' "$tmp/ops.err" && break; sleep 0.1; done
log=$(grep '^access: ' "$tmp/ops.err")
expect_eq "access log: completions (whole and streamed)" \
    "$(grep -cE "^access: POST /v1/completions 200 ms=[0-9]+\.[0-9] prompt_tokens=$n_prompt completion_tokens=5$" <<<"$log")" 2
expect_in "access log: /v1/models/{id} 200" "access: GET /v1/models/tiny-alias 200 ms=" "$log"
expect_in "access log: 404" "access: GET /v1/models/TinyStories-656K-Q8_0 404 ms=" "$log"
expect_in "access log: unknown path" "access: GET /no/such/path 404 ms=" "$log"
expect_in "access log: embeddings" "access: POST /v1/embeddings 200 ms=" "$log"
grep -qE "^access: POST /v1/embeddings 200 ms=[0-9.]+ prompt_tokens=8$" <<<"$log" && ok || bad "access log: embeddings tokens: $log"
before=$(grep -c '^access: ' "$tmp/ops.err")
curl -s -o /dev/null "$U/health"; curl -s -o /dev/null "$U/v1/models"; post "$U/tokenize" '{"content":"a"}' >/dev/null
for _ in $(seq 1 50); do [ "$(grep -c '^access: ' "$tmp/ops.err")" -ge $((before + 3)) ] && break; sleep 0.1; done
sleep 0.2 # a fourth line, if there were one
expect_eq "access log: one line per request" "$(($(grep -c '^access: ' "$tmp/ops.err") - before))" 3
stop_server ops

# ---- --chat-template FILE: the prompt is the file's rendering (computed here in Python) ----
printf '%s' '{% for m in messages %}<{{ m.role }}>{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}' > "$tmp/t.jinja"
start_server tpl -m "$STORIES" --parallel 1 -c 256 -t 2 --chat-template "$tmp/t.jinja" || finish
resp=$(post "$url_tpl/v1/chat/completions" '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}],"max_tokens":2}')
want=$(post "$url_tpl/tokenize" "$(/usr/bin/python3 -c 'import json; print(json.dumps({"content": "<system>Be brief.\n<user>Tell me a story.\n<assistant>", "add_special": True}))')" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]))')
expect_eq "--chat-template renders the prompt" "$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["usage"]["prompt_tokens"])' "$resp")" "$want"
expect_in "summary names the template" "chat template: $tmp/t.jinja" "$(cat "$tmp/tpl.err")"
stop_server tpl

# ---- refusals at start ----
printf '{%% for m in messages %%}' > "$tmp/bad.jinja"
expect_err "--chat-template unparsable" "--chat-template" $NUCLEUS serve -m "$STORIES" --port 0 --chat-template "$tmp/bad.jinja"
expect_err "--chat-template missing" "nope.jinja" $NUCLEUS serve -m "$STORIES" --port 0 --chat-template "$tmp/nope.jinja"
: > "$tmp/empty.jinja"
expect_err "--chat-template empty" "the file is empty" $NUCLEUS serve -m "$STORIES" --port 0 --chat-template "$tmp/empty.jinja"
expect_err "--alias empty" "--alias: the name is empty" $NUCLEUS serve -m "$STORIES" --port 0 --alias ""
expect_err "--alias without a value" "--alias needs a value" $NUCLEUS serve -m "$STORIES" --alias
finish
