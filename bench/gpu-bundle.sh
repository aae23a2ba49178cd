#!/usr/bin/env bash
# Prepares a run of bench/gpu.sh on a lent GPU machine (the device tool: a CUDA image without this
# project's libraries and without ../shared). Here: builds the GPU build (make cuda), copies the
# shared libraries it loads that such an image lacks into build/cuda/lib, strips the binaries so
# everything fits the tool's 64 MiB, and copies ../shared into ./shared (ignored by git). Then:
#   run(command="bash bench/gpu.sh", carry=["build/cuda", "shared"], timeout_s=540)
set -eu
cd "$(dirname "$0")/.."
make -j"$(nproc)" cuda
mkdir -p build/cuda/lib
for lib in $(ldd build/cuda/nucleus | awk '$3 ~ /^\// {print $3}'); do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    *) cp -L "$lib" build/cuda/lib/ ;;
    esac
done
strip build/cuda/nucleus build/cuda/tests/*
rm -f build/cuda/*.o build/cuda/*.d
rm -rf shared
cp -r ../shared shared
chmod -R u+w shared
grep -qx '/shared/' .git/info/exclude || echo '/shared/' >>.git/info/exclude
du -sh build/cuda shared
