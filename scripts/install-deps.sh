#!/usr/bin/env bash
# Installs what building and testing nucleus needs on Debian 12. Idempotent; runs as root
# without prompts (uses sudo when not root). Skips apt entirely when everything is present.
set -eu
# nginx is the load balancer of tests/e2e/scaleout.sh and deploy/: the tests run their own
# instance on a loopback port (own prefix, config and pid file), never the system's service.
# golang-1.19-src only for its public-domain book (src/testdata/Isaac.Newton-Opticks.txt, Project
# Gutenberg), the text of bench/perplexity.sh and tests/e2e/perplexity.sh.
# chromium: the browser tests/e2e/web.sh drives (playwright-core, which downloads no browser of its
# own) to test the server's web page.
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (qemu-aarch64): tests/e2e/neon.sh
# cross-compiles the NEON kernels and their unit test for AArch64 and runs them emulated, so the
# ARM set is tested on x86 machines too.
PKGS=(build-essential clang libclang-rt-14-dev python3 python3-numpy libpcre2-dev libcjson-dev libmicrohttpd-dev nginx golang-1.19-src chromium
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the tests that compare with JavaScript reference implementations (tokenizers,
# Jinja, the openai client); any node >= 18 will do, so only install Debian's when none is found.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
