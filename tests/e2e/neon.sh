#!/usr/bin/env bash
# The NEON kernel set (AArch64) under qemu-aarch64: cross-compiles the kernels and their unit test
# with Debian's gcc-aarch64-linux-gnu (make cross-aarch64, into $BUILD/aarch64) and runs them on
# three emulated CPUs, one per build of the NEON set: -cpu max (SDOT and I8MM: kernels_neon_i8mm.c
# runs), and for the integer tests (where the builds differ: the int8 products) -cpu neoverse-n1
# (SDOT: kernels_neon_dot.c) and -cpu cortex-a72 (Armv8.0, ASIMD only: kernels_neon.c).
# test_kernels checks the scalar and the NEON set: every integer type, both activation formats, matvec and packed matmul, odd row ranges,
# token counts, strides and column counts, bit for bit against the defined computation (so NEON
# equals scalar bit for bit), the float types within tolerance of float64 and bit-exact across
# splits and tile sizes, kernels_mix's fma chains bit for bit, the helpers. A probe linked with
# the same objects checks the dispatch: HWCAP as each CPU model says, NUCLEUS_ISA=scalar and
# =neon obeyed, an x86 set's name no cap. make test (tests/lib/tier.sh) leaves out test_interleaved
# under qemu: no NEON set has interleaved kernels, so it runs kernels.c's generic path over the row
# kernels, which the x86 run of test_kernels checks with the scalar set and the other tests with
# NEON (make test-full and a run by hand: all of it). Then the whole command line built for
# AArch64 (make cross-aarch64-cli, over Debian's arm64 libraries) scores shared/archs' records
# through tests/e2e/archs_check.py on -cpu max: every architecture's forward pass, the 2026
# families' recurrences and latent attention included, on the NEON set against the same
# references and tolerances as on x86 (make test: the GGUF forms' sampled records; make test-full:
# every record of both forms). One thread: qemu-user 7.2 hangs a guest's pthread_create on this
# kind of machine (a program that only starts and joins a thread hangs too), so the threads are
# left to the x86 runs.
# Ends with "neon: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
. tests/lib/checks.sh
. tests/lib/tier.sh
build=${BUILD:-build}
export SHARED=${SHARED:-$(cd .. && pwd)/shared}
a64=$build/aarch64
finish() {
    echo "neon: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
}

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/include/stdio.h ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=(qemu-user)
for lib in pcre2-8 cjson microhttpd curl edit; do
    [ -e "/usr/lib/aarch64-linux-gnu/lib$lib.so" ] || missing+=("lib$lib (arm64)")
done
if [ ${#missing[@]} -ne 0 ]; then
    bad "missing ${missing[*]}: install them with make test-deps (scripts/install-deps.sh --test)"
    finish
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A make of its own (not a submake of `make test`'s jobserver, whose -j2 it would override with a
# warning of make's that the check below would take for the compiler's).
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -j2 BUILD="$build" cross-aarch64 >"$tmp/build.log" 2>&1; then
    bad "make cross-aarch64 failed: $(tail -n 20 "$tmp/build.log")"
    finish
fi
if grep -q "warning:" "$tmp/build.log"; then bad "cross build warnings: $(grep "warning:" "$tmp/build.log" | head -n 5)"; else ok; fi

run() { # cpu, command...
    local cpu=$1; shift
    qemu-aarch64 -cpu "$cpu" -L /usr/aarch64-linux-gnu "$@"
}

# The probe: HWCAP's SDOT and I8MM bits, then the set NUCLEUS_ISA leaves in force.
cat >"$tmp/probe.c" <<'EOF'
#include <stdio.h>
#include <sys/auxv.h>
#include "kernels/kernels.h"
int main(void) {
    printf("sdot=%d i8mm=%d set=%s\n", !!(getauxval(AT_HWCAP) & HWCAP_ASIMDDP), !!(getauxval(AT_HWCAP2) & HWCAP2_I8MM),
           kernels_name());
    return 0;
}
EOF
objs=$(ls "$a64"/src/kernels/*.o "$a64"/src/tensor/quant.o "$a64"/src/tensor/quant_k.o "$a64"/src/format/ggml_types.o)
if aarch64-linux-gnu-gcc -std=c11 -D_GNU_SOURCE -Isrc -fsanitize=undefined -o "$tmp/probe" "$tmp/probe.c" $objs -lm -lpthread 2>"$tmp/probe.log"; then
    ok
    expect_eq "-cpu max" "$(run max "$tmp/probe")" "sdot=1 i8mm=1 set=neon"
    expect_eq "-cpu neoverse-n1" "$(run neoverse-n1 "$tmp/probe")" "sdot=1 i8mm=0 set=neon"
    expect_eq "-cpu cortex-a72" "$(run cortex-a72 "$tmp/probe")" "sdot=0 i8mm=0 set=neon"
    expect_eq "NUCLEUS_ISA=scalar" "$(NUCLEUS_ISA=scalar run max "$tmp/probe")" "sdot=1 i8mm=1 set=scalar"
    expect_eq "NUCLEUS_ISA=neon" "$(NUCLEUS_ISA=neon run cortex-a72 "$tmp/probe")" "sdot=0 i8mm=0 set=neon"
    expect_eq "NUCLEUS_ISA=avx2" "$(NUCLEUS_ISA=avx2 run max "$tmp/probe")" "sdot=1 i8mm=1 set=neon"
else
    bad "probe build failed: $(head -n 20 "$tmp/probe.log")"
fi

# test_kernels on each CPU model, its own counts joining ours: all of it on max, the integer tests
# on the others.
INT_TESTS="test_exact_rows test_int_path test_mxfp4_scales test_int_blocks test_real_rows"
ALL_BUT_INTERLEAVED=$(sed -n 's/^ *RUN(\(test_[a-z0-9_]*\));.*/\1/p' tests/unit/test_kernels.c | grep -vx test_interleaved | tr '\n' ' ')
for cpu in max neoverse-n1 cortex-a72; do
    if [ "$cpu" != max ]; then tests=$INT_TESTS
    elif tier_is full; then tests=""
    else tests=$ALL_BUT_INTERLEAVED; fi
    out=$(run "$cpu" "$a64/test_kernels" $tests 2>&1)
    rc=$?
    line=$(grep -E '^test_kernels: [0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
    if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
        pass=$((pass + BASH_REMATCH[1]))
        fail=$((fail + BASH_REMATCH[2]))
    fi
    expect_in "test_kernels -cpu $cpu: the NEON set ran" "kernel sets available up to neon" "$out"
    if [ $rc -ne 0 ] || [ -z "$line" ]; then bad "test_kernels -cpu $cpu: rc=$rc: $(tail -n 30 <<<"$out")"; fi
done

# The architectures' records through the AArch64 command line.
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -j2 BUILD="$build" cross-aarch64-cli >"$tmp/cli.log" 2>&1; then
    bad "make cross-aarch64-cli failed: $(tail -n 20 "$tmp/cli.log")"
    finish
fi
if grep -q "warning:" "$tmp/cli.log"; then bad "cross build warnings: $(grep "warning:" "$tmp/cli.log" | head -n 5)"; else ok; fi
printf '#!/bin/sh\nexec qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu %q "$@"\n' "$(pwd)/$a64/nucleus" >"$tmp/nucleus"
chmod +x "$tmp/nucleus"
expect_in "the AArch64 build runs the NEON set" "(this CPU: neon)" "$("$tmp/nucleus" --version 2>&1)"
forms=(--forms gguf --sample)
tier_is full && forms=(--forms gguf,hf)
out=$(/usr/bin/python3 tests/e2e/archs_check.py --nucleus "$tmp/nucleus" --shared "$SHARED" --threads 1 "${forms[@]}" 2>&1)
line=$(grep -E '^archs: [0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
echo "AArch64, -cpu max: $line"
if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    pass=$((pass + BASH_REMATCH[1]))
    fail=$((fail + BASH_REMATCH[2]))
    [ "${BASH_REMATCH[2]}" -eq 0 ] || bad "archs on AArch64: $(grep -E 'FAIL' <<<"$out" | head -n 10)"
else
    bad "archs on AArch64: no result: $(tail -n 20 <<<"$out")"
fi
finish
