#!/usr/bin/env bash
# Installs what nucleus needs on Debian 12: `make deps` (no flag) what building and running it
# need; `make test-deps` (--test) that and what the tests need besides. Idempotent; runs as root
# without prompts (uses sudo when not root). Skips apt entirely when everything is present.
set -eu
case "${1:-}" in
    "") tests=false ;;
    --test) tests=true ;;
    *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

# Building and running: a C compiler and make, and the libraries the program links (regular
# expressions for the tokenizers' pre-tokenizers, JSON, the HTTP server, libcurl for fetching
# models from Hugging Face's hub, libedit for the line editing of `nucleus chat`).
PKGS=(build-essential libpcre2-dev libcjson-dev libmicrohttpd-dev libcurl4-openssl-dev libedit-dev)
# The Python package (make python, python/): Debian's python3, pip and venv.
PKGS+=(python3 python3-pip python3-venv)

# The tests, beyond that:
# clang and libclang-rt-14-dev: the libFuzzer harnesses `make test` builds (tests/fuzz).
# python3, python3-numpy: the e2e scripts' checks and shared/tools/reference-forward.
# curl: the server scripts' requests. pkg-config: tests/e2e/install.sh builds the examples with it.
# python3-pytest: the Python package's tests (tests/e2e/python.sh runs python3 -m pytest python/tests).
# nginx is the load balancer of tests/e2e/scaleout.sh and deploy/: the tests run their own
# instance on a loopback port (own prefix, config and pid file), never the system's service.
# golang-1.19-src only for its public-domain book (src/testdata/Isaac.Newton-Opticks.txt, Project
# Gutenberg), the text of bench/perplexity.sh and tests/e2e/perplexity.sh.
# chromium: the browser tests/e2e/web.sh drives (playwright-core, which downloads no browser of its
# own) to test the server's web page.
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (qemu-aarch64): tests/e2e/neon.sh
# cross-compiles the NEON kernels and their unit test for AArch64 and runs them emulated, so the
# ARM set is tested on x86 machines too; the arm64 builds of the five libraries (Debian's arm64
# architecture added to dpkg for them) let it cross-compile the whole command line, whose forward
# pass it runs on the architectures' records there.
TEST_PKGS=(clang libclang-rt-14-dev python3 python3-numpy python3-pytest curl pkg-config nginx golang-1.19-src chromium
           gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
ARM64_PKGS=(libpcre2-dev:arm64 libcjson-dev:arm64 libmicrohttpd-dev:arm64 libcurl4-openssl-dev:arm64 libedit-dev:arm64)
# The node packages of the tests that compare with JavaScript reference implementations
# (tokenizers, Jinja, the openai client, ajv, playwright-core), pinned by each package-lock.json.
NODE_DIRS=(tests/node tests/node_grammar tests/node_jinja tests/node_server tests/node_web)

$tests && PKGS+=("${TEST_PKGS[@]}")
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
if $tests && [ "$(dpkg --print-architecture)" = amd64 ]; then
    PKGS+=("${ARM64_PKGS[@]}")
    dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
fi
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the JavaScript references; any node >= 18 will do, so only install Debian's when
# none is found.
if $tests && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -ne 0 ]; then
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if $tests; then
    cd "$(dirname "$0")/.."
    for d in "${NODE_DIRS[@]}"; do
        [ -d "$d/node_modules" ] && continue
        echo "npm ci in $d" >&2
        (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
    done
fi
