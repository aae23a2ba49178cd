#!/usr/bin/env bash
# Prepares a run of bench/gpu.sh on a lent GPU machine (the device tool: a CUDA image without this
# project's libraries, without ../shared and without a network). Here: builds the GPU build (make
# cuda, for Hopper alone), copies the shared libraries it loads that such an image lacks into
# build/cuda/lib, strips the binaries and packs build/cuda into build/cuda.tgz (the three binaries
# hold the same kernels: 32 MiB, 10 packed; gpu.sh unpacks it), copies the parts of ../shared
# that gpu.sh reads into ./shared (ignored by git), and packs the llama.cpp b4748 source
# (LLAMACPP_SRC, default ../peers/b4748: a tree that ../shared/tools/build-llamacpp extracted from
# the fetched ggerganov/llama.cpp snapshot) without the backends it does not build into
# build/llamacpp-src.tgz, for gpu.sh to build there with CUDA for same-run figures. With the
# tracked files, about 53 of the tool's 64 MiB (it prints the total). Then:
#   run(command="bash bench/gpu.sh", carry=["build/cuda.tgz", "shared", "build/llamacpp-src.tgz"], timeout_s=600)
set -eu
cd "$(dirname "$0")/.."
lc=${LLAMACPP_SRC:-../peers/b4748}
rm -f build/cuda/*.o # built again for Hopper alone (the lent GPUs), half the size
make -j"$(nproc)" cuda CUDA_GENCODE='-gencode arch=compute_90,code=sm_90'
mkdir -p build/cuda/lib
for lib in $(ldd build/cuda/nucleus | awk '$3 ~ /^\// {print $3}'); do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    *) cp -L "$lib" build/cuda/lib/ ;;
    esac
done
strip build/cuda/nucleus build/cuda/tests/*
rm -f build/cuda/*.o build/cuda/*.d # so that make cuda builds for every target again
tar czf build/cuda.tgz -C build cuda
rm -rf shared
mkdir shared
for part in README.md golden models archs quants tools; do cp -r "../shared/$part" shared/; done
chmod -R u+w shared
grep -qx '/shared/' .git/info/exclude || echo '/shared/' >>.git/info/exclude
if [ -f "$lc/CMakeLists.txt" ]; then
    tar czf build/llamacpp-src.tgz -C "$lc" --exclude='ggml/src/ggml-'{sycl,vulkan,metal,kompute,cann,opencl,musa,hip} \
        --exclude='examples/llama.android' --exclude='examples/llama.swiftui' --exclude='*.png' --exclude='*.jpg' \
        CMakeLists.txt cmake ggml src common include examples pocs
else
    echo "no llama.cpp source at $lc (LLAMACPP_SRC): gpu.sh will run without it" >&2
fi
du -sh build/cuda.tgz shared build/llamacpp-src.tgz 2>/dev/null
echo "with the tracked files: $(( ($(du -sbc build/cuda.tgz shared build/llamacpp-src.tgz 2>/dev/null | tail -n 1 | cut -f1) +
    $(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)) / 1048576 )) MiB of 64"
