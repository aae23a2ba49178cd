#!/usr/bin/env bash
# The CLI's samplers through the server under llama.cpp's server's names: for each setting, a
# completion from `nucleus serve` must equal `nucleus run`'s with the same flags and seed (the CLI's
# stages are tested against their references in test_sampling and sampling.sh), and must differ
# from the completion without it (the field was not ignored).
# Ends with "server_samplers: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
. tests/lib/checks.sh
finish() { echo "server_samplers: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
. tests/lib/server_script.sh

model=$SHARED/models/stories260K/stories260K.gguf
start_server s -m "$model" --parallel 1 -t 2 || finish
prompt="The cat sat on the mat. The cat sat on the mat. The cat"  # repeats, for DRY to act on
# the server's neutral defaults, spelt out for the CLI
neutral=(--temp 0.9 --top-k 0 --top-p 1 --min-p 0 --seed 5 -n 32 -t 2)

server_text() { # JSON fields to add
    curl -s "$url_s/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$prompt\",\"max_tokens\":32,\"seed\":5,\"temperature\":0.9$1}" |
        /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["choices"][0]["text"] if "choices" in d else d)'
}
cli_text() { # flags
    "$NUCLEUS" run -m "$model" -p "$prompt" "${neutral[@]}" "$@" 2>/dev/null | sed "1s/^$prompt//"
}

base=$(server_text "")
expect_eq "no extra field: the server as the CLI" "$base" "$(cli_text)"
check() { # NAME JSON FLAGS...
    local name=$1 json=$2; shift 2
    local got; got=$(server_text ",$json")
    expect_eq "$name: the server as the CLI" "$got" "$(cli_text "$@")"
    if [ "$got" != "$base" ]; then ok; else bad "$name: the text is the one without it"; fi
}
check "mirostat 2" '"mirostat":2,"mirostat_tau":3,"mirostat_eta":0.2' --mirostat 2 --mirostat-ent 3 --mirostat-lr 0.2
check "mirostat 1" '"mirostat":1,"mirostat_tau":2' --mirostat 1 --mirostat-ent 2
check "xtc" '"xtc_probability":1,"xtc_threshold":0.05' --xtc-probability 1 --xtc-threshold 0.05
check "top_n_sigma" '"top_n_sigma":0.5' --top-nsigma 0.5
check "dry" '"dry_multiplier":3,"dry_base":2,"dry_allowed_length":1,"dry_penalty_last_n":-1,"dry_sequence_breakers":["zzz"]' \
    --dry-multiplier 3 --dry-base 2 --dry-allowed-length 1 --dry-penalty-last-n -1 --dry-sequence-breaker zzz
check "repeat_penalty" '"repeat_penalty":1.8,"repeat_last_n":-1' --repeat-penalty 1.8 --repeat-last-n -1
check "samplers and min_keep" '"samplers":["top_k","temperature"],"top_k":3,"min_keep":2' --samplers 'top_k;temperature' --top-k 3 --min-keep 2
expect_eq "an unknown sampler name is a 400 naming it" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$url_s/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt":"x","samplers":["top_k","nope"]}')" 400
stop_server s
finish
