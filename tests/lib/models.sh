# Sourced by e2e scripts: where the shared material is, and synthetic models regenerated on
# demand into build/models (never committed).
SHARED=${SHARED:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared}
NUCLEUS_ROOT=${NUCLEUS_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
MODELS_DIR=$NUCLEUS_ROOT/build/models
export SHARED NUCLEUS_ROOT MODELS_DIR

# synth_model NAME ARGS... -> prints the path of the generated file (made once, then reused; written
# under another name and renamed, so that suites running at once never read one half written)
synth_model() {
    local name=$1; shift
    local out=$MODELS_DIR/$name.gguf
    mkdir -p "$MODELS_DIR"
    if [ ! -s "$out" ]; then
        /usr/bin/python3 "$SHARED/tools/synth-gguf" "$@" -o "$out.$$.part" >/dev/null &&
            mv -f "$out.$$.part" "$out" || { rm -f "$out.$$.part"; return 1; }
    fi
    echo "$out"
}
