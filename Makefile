# nucleus — build with `make`, test with `make test`.
# Release objects go to $(BUILD)/rel, sanitized test objects to $(BUILD)/san (ASan + UBSan);
# BUILD (default build) lets parallel work use separate trees: make BUILD=build-x unit.
CC      ?= cc
BUILD   ?= build
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
INC     := -Iinclude -Isrc -I$(BUILD)/gen
# Release objects also make libnucleus.so: position-independent, and hidden but for what
# include/nucleus.h declares (its declarations are marked default), so the library's own calls
# stay direct and only the nc_* interface is exported.
REL_CFLAGS := $(CSTD) $(WARN) $(INC) -O2 -g -fno-math-errno -fPIC -fvisibility=hidden
SAN_CFLAGS := $(CSTD) $(WARN) $(INC) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDLIBS  := -lm -lpthread -lpcre2-8 -lcjson -lmicrohttpd -lcurl
# The command line alone edits chat input with libedit.
CLI_LDLIBS := -ledit

# Kernels for one instruction set live in files named *_avx2.c / *_avx512.c / *_neon_dot.c /
# *_neon_i8mm.c and are compiled with that set enabled; everything else targets baseline x86-64
# or AArch64 (whose ASIMD is the NEON set's kernels_neon.c), and the dispatcher picks at run time
# from cpuid or HWCAP.
ARCH := $(shell uname -m)
NEON_DOT_FLAGS := -march=armv8.2-a+dotprod
NEON_I8MM_FLAGS := -march=armv8.2-a+dotprod+i8mm
ifeq ($(ARCH),x86_64)
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVXVNNI_FLAGS := -mavx2 -mfma -mf16c -mavxvnni
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512dq -mfma -mf16c
HOST_NEON_DOT_FLAGS :=
HOST_NEON_I8MM_FLAGS :=
else
AVX2_FLAGS   :=
AVXVNNI_FLAGS :=
AVX512_FLAGS :=
HOST_NEON_DOT_FLAGS := $(if $(filter aarch64 arm64,$(ARCH)),$(NEON_DOT_FLAGS),)
HOST_NEON_I8MM_FLAGS := $(if $(filter aarch64 arm64,$(ARCH)),$(NEON_I8MM_FLAGS),)
endif

# src/cuda is the CUDA backend: linked only into builds with CUDA (below).
LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cuda/*' | sort)
CLI_SRC  := $(shell find cli -name '*.c' | sort)
UNIT_SRC := $(shell find tests/unit -name 'test_*.c' | sort)

# The web page (web/) is embedded in the library: scripts/embed.c turns its files into
# $(BUILD)/gen/web_assets.c, rewritten whenever one of them changes.
WEB_FILES := $(sort $(wildcard web/*))
GEN_SRC  := $(BUILD)/gen/web_assets.c

REL_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/rel/%.o) $(BUILD)/rel/gen/web_assets.o
SAN_LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/san/%.o) $(BUILD)/san/gen/web_assets.o
REL_CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/rel/%.o)
SAN_CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/san/%.o)
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/san/tests/%)

.PHONY: all check test test-full unit clean fuzz deps test-deps lib install examples python
all: $(BUILD)/nucleus

# What building and running need (make deps); that and what the tests need (make test-deps).
deps:
	bash scripts/install-deps.sh
test-deps:
	bash scripts/install-deps.sh --test

isa_flags = $(if $(findstring _avx512,$1),$(AVX512_FLAGS),$(if $(findstring _avxvnni,$1),$(AVXVNNI_FLAGS),$(if $(findstring _avx2,$1),$(AVX2_FLAGS),$(if $(findstring _neon_dot,$1),$(HOST_NEON_DOT_FLAGS),$(if $(findstring _neon_i8mm,$1),$(HOST_NEON_I8MM_FLAGS),)))))

$(BUILD)/rel/%.o: %.c $(BUILD)/gen/rel_cflags.flag
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) $(call isa_flags,$<) -MMD -MP -c $< -o $@
# The release flags, rewritten when they change, so the objects are compiled again (a shared
# library cannot take objects compiled without -fPIC).
$(BUILD)/gen/rel_cflags.flag: FORCE
	@mkdir -p $(dir $@)
	@[ -f $@ ] && [ "$$(cat $@)" = "$(REL_CFLAGS)" ] || echo "$(REL_CFLAGS)" > $@
$(BUILD)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(call isa_flags,$<) -MMD -MP -c $< -o $@
# The sanitized x86 kernels are a third of a clean `make test`'s compiling: with line tables only
# (-g1: sanitizer reports keep file:line) a fifth less.
$(BUILD)/san/src/kernels/kernels_avx2.o $(BUILD)/san/src/kernels/kernels_avxvnni.o \
    $(BUILD)/san/src/kernels/kernels_avx512.o: SAN_CFLAGS += -g1

$(BUILD)/embed: scripts/embed.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) -O1 -o $@ $<
$(GEN_SRC): $(BUILD)/embed $(WEB_FILES)
	@mkdir -p $(dir $@)
	$(BUILD)/embed $@ $(WEB_FILES)
$(BUILD)/rel/gen/%.o: $(BUILD)/gen/%.c $(BUILD)/gen/rel_cflags.flag
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/san/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/rel/libnucleus.a: $(REL_LIB_OBJ)
	@rm -f $@; ar rcs $@ $^
# The shared library (the CPU backend; CUDA builds link src/cuda into the binary only). Its soname
# changes with SOVERSION, when include/nucleus.h changes in a way older programs cannot use.
VERSION   := 0.1.0
SOVERSION := 0
$(BUILD)/rel/libnucleus.so.$(VERSION): $(REL_LIB_OBJ) scripts/libnucleus.map
	$(CC) -shared -Wl,-soname,libnucleus.so.$(SOVERSION) -Wl,--version-script=scripts/libnucleus.map \
	    -o $@ $(REL_LIB_OBJ) $(LDLIBS)
lib: $(BUILD)/rel/libnucleus.a $(BUILD)/rel/libnucleus.so.$(VERSION)
$(BUILD)/san/libnucleus.a: $(SAN_LIB_OBJ)
	@rm -f $@; ar rcs $@ $^

# The source the CLI was built from (nucleus --version): rewritten only when `git describe` changes,
# so an unchanged tree rebuilds nothing.
$(BUILD)/gen/version.h: FORCE
	@mkdir -p $(dir $@)
	@v='#define NC_BUILD_DESCRIBE "'"$$(git describe --always --dirty --tags 2>/dev/null || echo unknown)"'"'; \
	 [ -f $@ ] && [ "$$(cat $@)" = "$$v" ] || echo "$$v" > $@
$(BUILD)/rel/cli/main.o $(BUILD)/san/cli/main.o: $(BUILD)/gen/version.h
.PHONY: FORCE
FORCE:

# The CUDA backend (src/cuda: backend.c, the forward pass's operations, over the kernels of the
# .cu files). CUDA=1: nvcc compiles the kernels for the GPU (sm_80 and sm_90) into $(BUILD)/nucleus.
# CUDA=emu: the same source is compiled as C++ for the CPU with src/cuda/emulate.h (the tests' way
# of running the GPU code without a GPU). The library's objects are the same either way: a build
# with the backend links src/cuda's objects beside them; $(BUILD)/emu/nucleus is always the
# emulated one (make emu).
NVCC ?= /usr/local/cuda/bin/nvcc
CXX ?= g++
CUDA_HOME ?= /usr/local/cuda
# The GPUs built for: Ampere (sm_80) and Hopper (sm_90); bench/gpu-bundle.sh builds for Hopper alone.
CUDA_GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCC_FLAGS := -std=c++17 -O3 -g -lineinfo $(INC) $(CUDA_GENCODE) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter
EMU_FLAGS := -std=c++17 -x c++ -DNC_CUDA_EMULATE -O2 -g $(WARN) -Wno-unknown-pragmas $(INC)
CU_SRC := $(sort $(wildcard src/cuda/*.cu))
CU_C_SRC := $(sort $(wildcard src/cuda/*.c))
CUDA_OBJ := $(CU_C_SRC:%.c=$(BUILD)/rel/%.o) $(CU_SRC:src/cuda/%.cu=$(BUILD)/cuda/%.o)
EMU_OBJ := $(CU_C_SRC:%.c=$(BUILD)/rel/%.o) $(CU_SRC:src/cuda/%.cu=$(BUILD)/emu/%.o)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++

$(BUILD)/cuda/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/emu/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -MMD -MP -c $< -o $@

# Which backend $(BUILD)/nucleus was linked with, rewritten when CUDA changes, so it is relinked.
$(BUILD)/gen/cuda.flag: FORCE
	@mkdir -p $(dir $@)
	@[ -f $@ ] && [ "$$(cat $@)" = "$(CUDA)" ] || echo "$(CUDA)" > $@
ifeq ($(CUDA),1)
MAIN_OBJ := $(REL_LIB_OBJ) $(CUDA_OBJ)
MAIN_LIBS := $(LDLIBS) $(CUDA_LIBS)
else ifeq ($(CUDA),emu)
MAIN_OBJ := $(REL_LIB_OBJ) $(EMU_OBJ)
MAIN_LIBS := $(LDLIBS) -lstdc++
else
MAIN_OBJ := $(BUILD)/rel/libnucleus.a
MAIN_LIBS := $(LDLIBS)
endif
$(BUILD)/nucleus: $(REL_CLI_OBJ) $(MAIN_OBJ) $(BUILD)/gen/cuda.flag
	$(CC) $(REL_CFLAGS) -o $@ $(filter %.o %.a,$^) $(MAIN_LIBS) $(CLI_LDLIBS)
$(BUILD)/emu/nucleus: $(REL_CLI_OBJ) $(REL_LIB_OBJ) $(EMU_OBJ)
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS) $(CLI_LDLIBS) -lstdc++
$(BUILD)/cuda/nucleus: $(REL_CLI_OBJ) $(REL_LIB_OBJ) $(CUDA_OBJ)
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS) $(CLI_LDLIBS) $(CUDA_LIBS)

# Tests of the CUDA code (tests/cuda: C tests of the backend's functions, .cu tests with kernels
# of their own): emulated on the CPU ($(BUILD)/emu/tests, part of `make test`), and for the GPU
# ($(BUILD)/cuda/tests, make cuda; they skip, saying so, where no GPU is found).
# The emulated C tests run sanitized (ASan + UBSan, the emulator announcing its fiber switches), with
# the backend compiled so too into $(BUILD)/emu/san.
CU_TESTS := $(sort $(basename $(notdir $(wildcard tests/cuda/*.c tests/cuda/*.cu))))
EMU_SAN_OBJ := $(CU_C_SRC:%.c=$(BUILD)/san/%.o) $(CU_SRC:src/cuda/%.cu=$(BUILD)/emu/san/%.o)
$(BUILD)/emu/san/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -MMD -MP -c $< -o $@
$(BUILD)/emu/tests/%: tests/cuda/%.c $(SAN_LIB_OBJ) $(EMU_SAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -Itests -o $@ $^ $(LDLIBS) -lstdc++
$(BUILD)/emu/tests/%: tests/cuda/%.cu
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -Itests -o $@ $<
$(BUILD)/cuda/tests/%: tests/cuda/%.c $(REL_LIB_OBJ) $(CUDA_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -Itests -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
$(BUILD)/cuda/tests/%: tests/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -Itests -o $@ $<
.PHONY: emu cuda
emu: $(BUILD)/emu/nucleus $(CU_TESTS:%=$(BUILD)/emu/tests/%)
cuda: $(BUILD)/cuda/nucleus $(CU_TESTS:%=$(BUILD)/cuda/tests/%)
# make test compiles the GPU build too where nvcc is installed (its tests skip without a GPU).
HAVE_NVCC := $(if $(wildcard $(NVCC)),cuda,)
$(BUILD)/san/nucleus: $(SAN_CLI_OBJ) $(BUILD)/san/libnucleus.a
	$(CC) $(SAN_CFLAGS) -o $@ $^ $(LDLIBS) $(CLI_LDLIBS)

$(BUILD)/san/tests/%: tests/unit/%.c $(BUILD)/san/libnucleus.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(call isa_flags,$<) -Itests -o $@ $< $(BUILD)/san/libnucleus.a $(LDLIBS)

unit: $(UNIT_BIN)
# The same tests built without the sanitizers, over the release library: make check's (the
# edit-compile-test loop: after `make`, only the tests themselves are compiled).
REL_UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/rel/tests/%)
$(BUILD)/rel/tests/%: tests/unit/%.c $(BUILD)/rel/libnucleus.a
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) $(call isa_flags,$<) -Itests -o $@ $< $(BUILD)/rel/libnucleus.a $(LDLIBS)

# examples/: programs that use the library as its users do, through include/nucleus.h alone
# (tests/e2e/install.sh builds them against an installed copy with pkg-config).
EXAMPLE_BIN := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
$(BUILD)/examples/%: examples/%.c $(BUILD)/rel/libnucleus.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) -Iinclude -O2 -o $@ $< $(BUILD)/rel/libnucleus.a $(LDLIBS)
examples: $(EXAMPLE_BIN)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the binary, the libraries, the header, a
# pkg-config file and the default model (the binary finds it in PREFIX/share/nucleus).
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INSTALL ?= install
install: $(BUILD)/nucleus lib scripts/nucleus.pc.in
	$(INSTALL) -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PREFIX)/share/nucleus $(DESTDIR)$(PREFIX)/share/doc/nucleus
	$(INSTALL) -m 755 $(BUILD)/nucleus $(DESTDIR)$(PREFIX)/bin/nucleus
	$(INSTALL) -m 755 $(BUILD)/rel/libnucleus.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libnucleus.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libnucleus.so.$(SOVERSION)
	ln -sf libnucleus.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libnucleus.so
	$(INSTALL) -m 644 $(BUILD)/rel/libnucleus.a $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 644 include/nucleus.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@LIBS@|$(LDLIBS)|' scripts/nucleus.pc.in >$(DESTDIR)$(LIBDIR)/pkgconfig/nucleus.pc
	$(INSTALL) -m 644 models/stories260K.gguf $(DESTDIR)$(PREFIX)/share/nucleus/
	$(INSTALL) -m 644 models/README.md $(DESTDIR)$(PREFIX)/share/nucleus/README.md
	$(INSTALL) -m 644 LICENSE $(DESTDIR)$(PREFIX)/share/doc/nucleus/
	@# The dynamic linker's cache learns of the new library (a staged install leaves that to its package).
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# The Python package (python/, docs/python.md): libnucleus.so bundled into it by its own build
# backend, installed by pip from the checkout, no registry. PYTHON is the interpreter it goes to: a
# virtual environment's (PYTHON=venv/bin/python), or Debian's python3 for a system-wide install,
# which Debian 12 allows with PIP_FLAGS=--break-system-packages (as root: /usr/local).
PYTHON    ?= python3
PIP_FLAGS ?=
python: $(BUILD)/rel/libnucleus.so.$(VERSION)
	NUCLEUS_LIBRARY=$(abspath $<) $(PYTHON) -m pip install --no-build-isolation --no-index --force-reinstall \
	    $(PIP_FLAGS) ./python

# Benchmarks that are not part of `make test` (see bench/ and docs/performance.md).
$(BUILD)/tokenize_bench: bench/tokenize_bench.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/kernels_bench: bench/kernels_bench.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/context_ppl: bench/context_ppl.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/kv_compress: bench/kv_compress.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/kv_budget_speed: bench/kv_budget_speed.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/grammar_bench: bench/grammar_bench.c $(BUILD)/rel/libnucleus.a
	$(CC) $(REL_CFLAGS) -o $@ $^ $(LDLIBS)

# AArch64 under qemu-aarch64 (tests/e2e/neon.sh): the kernels and their unit test, cross-compiled
# with Debian's gcc-aarch64-linux-gnu (make test-deps) into $(BUILD)/aarch64, with UBSan (ASan does
# not run under qemu-user); test_kernels links only the kernels. The whole command line too
# ($(A64)/nucleus, make cross-aarch64-cli), over the arm64 builds of the libraries (make test-deps
# adds Debian's arm64 architecture for them), so the forward pass runs on the NEON set end to end.
AARCH64_CC ?= aarch64-linux-gnu-gcc
A64 := $(BUILD)/aarch64
A64_SRC := $(sort $(wildcard src/kernels/*.c)) src/tensor/quant.c src/tensor/quant_k.c src/format/ggml_types.c
# -g1: line tables (UBSan's reports and backtraces keep file:line) at two thirds of -g's compile time.
A64_CFLAGS := $(CSTD) $(WARN) $(INC) -O2 -g1 -fno-math-errno -fsanitize=undefined -fno-sanitize-recover=undefined
$(A64)/%.o: %.c
	@mkdir -p $(dir $@)
	$(AARCH64_CC) $(A64_CFLAGS) $(if $(findstring _neon_dot,$<),$(NEON_DOT_FLAGS),$(if $(findstring _neon_i8mm,$<),$(NEON_I8MM_FLAGS),)) -MMD -MP -c $< -o $@
$(A64)/test_kernels: tests/unit/test_kernels.c $(A64_SRC:%.c=$(A64)/%.o)
	$(AARCH64_CC) $(A64_CFLAGS) -Itests -o $@ $^ -lm -lpthread
.PHONY: cross-aarch64 cross-aarch64-cli
cross-aarch64: $(A64)/test_kernels
A64_CLI_OBJ := $(LIB_SRC:%.c=$(A64)/%.o) $(CLI_SRC:%.c=$(A64)/%.o) $(A64)/$(BUILD)/gen/web_assets.o
$(A64)/cli/main.o: $(BUILD)/gen/version.h
$(A64)/nucleus: $(A64_CLI_OBJ)
	$(AARCH64_CC) $(A64_CFLAGS) -o $@ $^ $(LDLIBS) $(CLI_LDLIBS)
cross-aarch64-cli: $(A64)/nucleus
# The kernels' benchmark for AArch64 as the release build compiles it (-O2, no sanitizer), static
# so qemu-aarch64 needs no sysroot: bench/insns.sh counts its instructions under QEMU.
A64B := $(BUILD)/aarch64-bench
A64B_CFLAGS := $(CSTD) $(WARN) $(INC) -O2 -fno-math-errno
$(A64B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(AARCH64_CC) $(A64B_CFLAGS) $(if $(findstring _neon_dot,$<),$(NEON_DOT_FLAGS),$(if $(findstring _neon_i8mm,$<),$(NEON_I8MM_FLAGS),)) -MMD -MP -c $< -o $@
$(A64B)/kernels_bench: bench/kernels_bench.c $(A64_SRC:%.c=$(A64B)/%.o)
	$(AARCH64_CC) $(A64B_CFLAGS) -static -o $@ $^ -lm -lpthread
$(BUILD)/insn_count.so: bench/insn_count.c
	$(CC) $(CSTD) $(WARN) -O2 -shared -fPIC -o $@ $<

# Fuzz harnesses need clang's libFuzzer.
FUZZ_SRC := $(shell find tests/fuzz -name 'fuzz_*.c' | sort)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
# A harness links only the parsers it exercises (the format and grammar layers, which need
# nothing else, and the shared helpers). FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (libFuzzer's
# convention) shrinks the grammar matcher's work budgets to fit the fuzzer's timeout.
# The parsers are compiled once into $(BUILD)/fuzz/obj and linked into every harness.
FUZZ_LIB_SRC := src/common.c $(shell find src/format src/grammar -name '*.c' | sort)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_CFLAGS := $(CSTD) $(INC) -O1 -g -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
.SECONDARY: $(FUZZ_LIB_OBJ)
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CCACHE) clang $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CCACHE) clang $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_OBJ) $(FUZZ_EXTRA_$*) $(LDLIBS)
# Harnesses that include the source they exercise rebuild when it changes.
$(BUILD)/fuzz/fuzz_kv_file: src/kv/kv_file_format.c src/kv/kv_file.h
# and sources a harness needs beside them
FUZZ_EXTRA_fuzz_request := src/server/anthropic.c src/server/responses.c src/server/llama_api.c src/server/presets.c \
                           src/hub/cache.c src/hub/pick.c \
                           src/server/dialect.c
$(BUILD)/fuzz/fuzz_request: src/server/request.c src/server/request.h $(FUZZ_EXTRA_fuzz_request) src/server/dialect.h
$(BUILD)/fuzz/fuzz_reply: src/server/reply.c src/server/harmony.c src/server/call_named.c src/server/call_python.c \
                          src/server/tool_calls.c \
                          src/server/marker.c src/server/chat_format.c src/server/reply.h src/server/tool_calls.h
$(BUILD)/fuzz/fuzz_template: $(wildcard src/template/*.c src/template/*.h)
FUZZ_EXTRA_fuzz_lora := src/model/arch.c src/model/fingerprint.c src/model/layers.c src/model/lora.c src/model/model.c \
                        src/model/model_hf.c src/model/rope.c src/tensor/quant.c src/tensor/quant_k.c
$(BUILD)/fuzz/fuzz_lora: $(FUZZ_EXTRA_fuzz_lora) $(wildcard src/model/*.h)
fuzz: $(FUZZ_BIN)
# Every harness for 10^6 inputs (FUZZ_LONG_RUNS), the nightly-style run; `make test` runs each
# for seconds.
FUZZ_LONG_RUNS ?= 1000000
.PHONY: fuzz-long
fuzz-long: fuzz
	bash bench/fuzz.sh $(FUZZ_LONG_RUNS)

# The GPU build where nvcc is: with a GPU (a /dev/nvidiaN device), all of it (make cuda), whose
# tests then run; without one, where those tests could only skip, the kernels compiled for one
# architecture (sm_90) into $(BUILD)/cuda-check: a check that nvcc takes them, in half the time
# (the emulated build links the same backend).
HAVE_GPU := $(wildcard /dev/nvidia[0-9]*)
GPU_BUILD := $(if $(HAVE_NVCC),$(if $(HAVE_GPU),cuda,cuda-check),)
$(BUILD)/cuda-check/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -gencode arch=%,$(NVCC_FLAGS)) -gencode arch=compute_90,code=sm_90 -MMD -MP -c $< -o $@
.PHONY: cuda-check
cuda-check: $(CU_SRC:src/cuda/%.cu=$(BUILD)/cuda-check/%.o)

# The test tiers (docs/testing.md; tests/run.sh runs the suites, as many at once as make's -j):
# check: the unit tests and one pass of each judge, for the edit-compile-test loop;
# test: everything that can fail on a behaviour, repetition cut (the README's and CI's command);
# test-full: every kernel set x cache type x record, long fuzzing, the whole emulated GPU.
# Every build a tier needs is a prerequisite, so that one make builds them all at once, the
# longest compiles first (make -j starts prerequisites in order: no core waits at the end on one
# that started late).
SLOW_OBJ := $(BUILD)/san/src/kernels/kernels_avx512.o $(BUILD)/san/src/kernels/kernels_avx2.o \
    $(BUILD)/san/src/kernels/kernels_avxvnni.o $(BUILD)/rel/src/kernels/kernels_avx512.o \
    $(BUILD)/rel/src/kernels/kernels_avx2.o $(BUILD)/rel/src/kernels/kernels_avxvnni.o
TEST_BUILDS := $(BUILD)/nucleus $(BUILD)/san/nucleus unit fuzz emu $(GPU_BUILD)
check: $(BUILD)/rel/src/kernels/kernels_avx512.o $(BUILD)/rel/src/kernels/kernels_avx2.o \
    $(BUILD)/rel/src/kernels/kernels_avxvnni.o $(BUILD)/nucleus $(REL_UNIT_BIN)
	bash tests/run.sh check
test: $(SLOW_OBJ) $(GPU_BUILD) $(EMU_SAN_OBJ) $(TEST_BUILDS)
	bash tests/run.sh test
test-full: $(SLOW_OBJ) $(GPU_BUILD) $(EMU_SAN_OBJ) $(TEST_BUILDS)
	bash tests/run.sh full

# ccache, where installed, keeps the compilers' work across builds and trees (make CCACHE= turns
# it off; a CC or CXX given on make's command line is used as given).
CCACHE ?= $(shell command -v ccache 2>/dev/null)
ifneq ($(CCACHE),)
CC := $(CCACHE) $(CC)
CXX := $(CCACHE) $(CXX)
AARCH64_CC := $(CCACHE) $(AARCH64_CC)
endif

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
