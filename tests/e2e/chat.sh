#!/usr/bin/env bash
# nucleus chat through a pseudo-terminal (tests/e2e/chat_pty.py, build/san/nucleus): replies
# against the server's chat completions, with and without speculative decoding; input,
# commands, Ctrl-C, Ctrl-D, a full context; line editing and the history file; a reasoning
# template's thinking shown dimmed, or hidden.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/models.sh
NUCLEUS=${NUCLEUS:-build/san/nucleus}
[ -x "$NUCLEUS" ] || make "$NUCLEUS" >/dev/null || { echo "chat: 0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export NUCLEUS_CHAT_HISTORY=$tmp/chat_history  # not the user's own
python3 tests/e2e/chat_pty.py "$NUCLEUS" "$SHARED/models/tinystories-656k/hf" \
    "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf" "$tmp" "$SHARED/archs/qwen2/qwen2-f16.gguf"
