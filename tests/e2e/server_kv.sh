#!/usr/bin/env bash
# The server's KV cache as a managed resource (prefix sharing and its metrics, a pool too small
# for the load, a client leaving mid-prefill): tests/e2e/server_kv.py, on the sanitized server.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec /usr/bin/python3 tests/e2e/server_kv.py --nucleus "$NUCLEUS" --model "$SHARED/models/stories260K/stories260K.gguf"
