# The body of the fuzz runs whose seeds tests/fuzz/make_seeds.py writes (sourced, after setting
# name and seeds, by tests/e2e/fuzz_gguf.sh, fuzz_safetensors.sh, fuzz_spm_model.sh and
# fuzz_kv_file.sh): runs $BUILD/fuzz/$name (BUILD: default build) from a corpus `make_seeds.py
# $seeds` writes into a temp dir, as tests/lib/fuzz_run.sh says. A seed script that fails fails
# the run (the fuzzer would start from the seeds written before the failure, unnoticed).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${BUILD:-build}
bin=$build/fuzz/$name
if [ ! -x "$bin" ] && ! make BUILD="$build" "$bin" >/dev/null; then
    echo "$name: cannot build $bin"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
if ! /usr/bin/python3 tests/fuzz/make_seeds.py $seeds "$work/corpus"; then
    echo "$name: tests/fuzz/make_seeds.py${seeds:+ $seeds} failed"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi
echo "$name: $(ls "$work/corpus" | wc -l) seeds"
. tests/lib/fuzz_run.sh
