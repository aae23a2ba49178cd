#!/usr/bin/env bash
# Prepares a run of bench/gpu.sh on a lent GPU machine (the device tool: a CUDA image without this
# project's libraries, without ../shared and without a network). Here: builds the GPU build (make
# cuda, for Hopper alone), copies the shared libraries it loads that such an image lacks into
# build/cuda/lib, strips the binaries and packs build/cuda into build/cuda.tgz (the three binaries
# hold the same kernels: 32 MiB, 10 packed; gpu.sh unpacks it), packs the parts of ../shared that
# gpu.sh reads into build/shared.tgz (GPU_SHARED_PARTS picks fewer: the checks of archs and quants
# need those folders), with the vocabularies synth-gguf reads for the bench and golden models, and
# packs llama.cpp b4748 for same-run figures: its binaries when LLAMACPP_BUILD names a tree that
# `../shared/tools/build-llamacpp GITDIR TREE --cuda llama-bench llama-server` built here (nvcc is
# here; cmake -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined links them without the GPU
# driver's libcuda, which the device has; the device then spends no 3 minutes building), into
# build/llamacpp-bin.txz (34 MiB with xz), else its source (LLAMACPP_SRC, default ../peers/b4748: a
# tree that build-llamacpp extracted from the fetched ggerganov/llama.cpp snapshot) without the
# backends it does not build, into build/llamacpp-src.tgz, for gpu.sh to build there (3 minutes of
# the lease). GPU_BASE=<commit> also builds that commit (a git worktree) into
# build/cuda/nucleus-base, which gpu.sh's bench stage runs beside the current build. It prints
# the total of the tool's 64 MiB. Then:
#   run(command="bash bench/gpu.sh", carry=["build/cuda.tgz", "build/shared.tgz", "build/llamacpp-bin.txz"], timeout_s=600)
set -eu
cd "$(dirname "$0")/.."
lc=${LLAMACPP_SRC:-../peers/b4748}
lcb=${LLAMACPP_BUILD:-}
rm -f build/cuda/*.o # built again for Hopper alone (the lent GPUs), half the size
make -j"$(nproc)" cuda CUDA_GENCODE='-gencode arch=compute_90,code=sm_90'
mkdir -p build/cuda/lib
for lib in $(ldd build/cuda/nucleus | awk '$3 ~ /^\// {print $3}'); do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    *) cp -L "$lib" build/cuda/lib/ ;;
    esac
done
rm -f build/cuda/nucleus-base build/cuda/base.txt
if [ -n "${GPU_BASE:-}" ]; then # an earlier commit's build beside, for gpu.sh's before / after figures
    t=$(mktemp -d)
    git worktree add --detach "$t" "$GPU_BASE"
    make -C "$t" -j"$(nproc)" build/cuda/nucleus CUDA_GENCODE='-gencode arch=compute_90,code=sm_90'
    cp "$t/build/cuda/nucleus" build/cuda/nucleus-base
    git log -1 --format='%h %s' "$GPU_BASE" >build/cuda/base.txt
    git worktree remove --force "$t"
fi
strip build/cuda/nucleus* build/cuda/tests/*
rm -f build/cuda/*.o build/cuda/*.d # so that make cuda builds for every target again
tar czf build/cuda.tgz -C build cuda
# synth-gguf's vocabularies: llama-spm for the bench shapes, the others for the golden ones
tar czf build/shared.tgz -C ../shared README.md ${GPU_SHARED_PARTS:-golden models archs quants tools} \
    vocab/llama-spm vocab/llama-bpe vocab/qwen2 vocab/smollm2-135m-instruct
grep -qx '/shared/' .git/info/exclude || echo '/shared/' >>.git/info/exclude # where gpu.sh unpacks it
rm -f build/llamacpp-bin.txz build/llamacpp-src.tgz
if [ -n "$lcb" ]; then
    [ -x "$lcb/build/bin/llama-bench" ] || { echo "no $lcb/build/bin/llama-bench (LLAMACPP_BUILD)" >&2; exit 1; }
    t=$(mktemp -d)
    cp -r "$lcb/build/bin" "$t/" && strip "$t"/bin/*
    tar cJf build/llamacpp-bin.txz -C "$t" bin
    rm -rf "$t"
elif [ -f "$lc/CMakeLists.txt" ]; then
    tar czf build/llamacpp-src.tgz -C "$lc" --exclude='ggml/src/ggml-'{sycl,vulkan,metal,kompute,cann,opencl,musa,hip} \
        --exclude='examples/llama.android' --exclude='examples/llama.swiftui' --exclude='*.png' --exclude='*.jpg' \
        CMakeLists.txt cmake ggml src common include examples pocs
else
    echo "no llama.cpp source at $lc (LLAMACPP_SRC): gpu.sh will run without it" >&2
fi
du -sh build/cuda.tgz build/shared.tgz build/llamacpp-* 2>/dev/null || true # (no llama.cpp pack: not there)
echo "with the tracked files: $(( ($(du -sbc build/cuda.tgz build/shared.tgz build/llamacpp-* 2>/dev/null | tail -n 1 | cut -f1) +
    $(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)) / 1048576 )) MiB of 64"
