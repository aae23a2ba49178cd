#!/usr/bin/env bash
# Hostile GGUF files: truncated and byte-corrupted variants of real files must never crash the
# reader. Each variant is one check: it fails when the checker crashes or a sanitizer reports,
# or when a truncated file is accepted (a corrupted one may parse: a flip in tensor data is
# harmless). Run from anywhere; SHARED points at the shared material (default ../shared).
set -u
cd "$(dirname "$0")/../.."
SHARED=${SHARED:-$(cd .. && pwd)/shared}
FILES=("$SHARED/models/stories260K/stories260K.gguf"
       "$SHARED/models/tinystories-656k/TinyStories-656K-Q8_0.gguf"
       "$SHARED/vocab/llama-spm/ggml-vocab-llama-spm.gguf")
N_FLIPS=300      # corruptions in the first 64 KiB (header, metadata, tensor table) of each file
N_DATA_FLIPS=20  # corruptions in the tensor data section
BATCH=50         # variants per checker run

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

checker=$work/gguf_check
if ! ${CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc -O1 -g -fno-omit-frame-pointer \
        -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -o "$checker" tests/tools/gguf_check.c src/common.c src/format/*.c -lm -lcjson; then
    echo "hostile_files: cannot build the checker"
    echo "hostile_files: 0 passed, 1 failed"
    exit 1
fi
export ASAN_OPTIONS=exitcode=86:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:exitcode=87:print_stacktrace=1

# A 31-bit linear congruential generator, so the variants are the same on every run and shell.
rng=12345
next_rand() { rng=$(( (rng * 1103515245 + 12345) % 2147483648 )); r=$(( rng >> 8 )); }

# Runs the checker on files; sets out (its stdout) and crashed (1 if it died or a sanitizer spoke).
run_checker() {
    out=$("$checker" "$@" 2>"$work/stderr")
    local rc=$?
    crashed=0
    if [ $rc -gt 1 ] || grep -qE 'Sanitizer|runtime error' "$work/stderr"; then crashed=1; fi
}

# Checks a batch of variants; "truncated" variants must all be refused. A batch whose run
# crashed is re-run one file at a time to name the culprits.
check_batch() { # kind file...
    local kind=$1; shift
    [ $# -eq 0 ] && return
    run_checker "$@"
    if [ $crashed -eq 1 ]; then
        local v
        for v in "$@"; do
            run_checker "$v"
            if [ $crashed -eq 1 ]; then
                failed=$((failed + 1))
                echo "CRASH ($kind): $v"
                sed 's/^/    /' "$work/stderr" | head -n 30
                mkdir -p build && cp "$v" "build/hostile-crash-$(basename "$v")"
            else
                tally "$kind" "$v"
            fi
        done
    else
        local v
        for v in "$@"; do tally "$kind" "$v"; done
    fi
}

tally() { # kind file, with out holding the checker's lines
    if [ "$1" = truncated ] && grep -qF "$2: ok" <<<"$out"; then
        failed=$((failed + 1))
        echo "ACCEPTED truncated file: $2"
    else
        passed=$((passed + 1))
    fi
}

# Cut points: every position in the header, then spread through the metadata, table and data.
cut_points() { # size data_offset
    local size=$1 data=$2 p
    for p in 0 1 2 3 4 5 7 8 9 15 16 17 23 24 25 31 32 40 64 100 500 1000 4096 10000 20000 40000; do
        [ "$p" -lt "$size" ] && echo "$p"
    done
    for p in $((data - 33)) $((data - 1)) "$data" $((data + 1)) $((size / 2)) $((size * 3 / 4)) \
             $((size - 32)) $((size - 2)) $((size - 1)); do
        [ "$p" -gt 0 ] && [ "$p" -lt "$size" ] && echo "$p"
    done
    for _ in 1 2 3 4 5 6 7 8; do next_rand; echo $((r % size)); done
}

# Writes a copy of src with the byte at off XORed with a nonzero mask.
corrupt() { # src dst off
    cp "$1" "$2"
    local old; old=$(od -An -tu1 -j "$3" -N1 "$1")
    next_rand
    printf "\\$(printf %03o $(( (old ^ (1 + r % 255)) & 255 )))" |
        dd of="$2" bs=1 seek="$3" conv=notrunc status=none
}

flip_batches() { # src tag count lo hi
    local src=$1 tag=$2 count=$3 lo=$4 hi=$5 i batch=()
    [ "$hi" -le "$lo" ] && return
    for ((i = 0; i < count; i++)); do
        next_rand
        local v=$work/$tag-flip$i.gguf
        corrupt "$src" "$v" $((lo + r % (hi - lo)))
        batch+=("$v")
        if [ ${#batch[@]} -eq $BATCH ] || [ $((i + 1)) -eq "$count" ]; then
            check_batch flipped "${batch[@]}"
            rm -f "${batch[@]}"
            batch=()
        fi
    done
}

for src in "${FILES[@]}"; do
    if [ ! -f "$src" ]; then
        echo "missing: $src"
        failed=$((failed + 1))
        continue
    fi
    tag=$(basename "$src" .gguf)
    size=$(stat -c %s "$src")
    run_checker -d "$src"
    if [ $crashed -eq 1 ] || ! grep -qF "$src: ok" <<<"$out"; then
        echo "the original file is refused: $src"
        head -n 3 <<<"$out"
        failed=$((failed + 1))
        continue
    fi
    passed=$((passed + 1))
    data=$(sed -n 's/.* data offset \([0-9]*\),.*/\1/p' <<<"$out" | head -n 1)

    cuts=()
    for p in $(cut_points "$size" "$data" | sort -nu); do
        head -c "$p" "$src" >"$work/$tag-cut$p.gguf"
        cuts+=("$work/$tag-cut$p.gguf")
    done
    check_batch truncated "${cuts[@]}"
    rm -f "${cuts[@]}"

    head_end=$((size < 65536 ? size : 65536))
    flip_batches "$src" "$tag" $N_FLIPS 0 "$head_end"
    flip_batches "$src" "$tag-data" $N_DATA_FLIPS "$data" "$size"
done

echo "hostile_files: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
