# Makefile — builds libmok.so, the `mok` CLI and the tests with gcc (host C11) and nvcc (kernels,
# sm_90a). Works on a machine with the CUDA toolkit and NCCL and no GPU.
#   make            library, CLI, tests          make test       CPU test suite
#   make gpu-test   GPU test suite (needs GPUs)  make clean
#   make install PREFIX=/usr/local   library, headers, CLI and a pkg-config file (mok.pc)
#   make sanitize-test   the CPU suite and its fuzzers under ASan and UBSan
#   make check      the CPU test suite, the sanitizer build, then the package installed (pip install .[test]) into a
#                   fresh virtual environment (.venv; torch, transformers and torchtitan from
#                   PyPI), the Hugging Face and torchtitan examples and the Python tests there
.DEFAULT_GOAL := all
CUDA_HOME ?= /usr/local/cuda
# NCCL: headers and library from one install (a process loads one libnccl.so.2, and the device API
# must match it). Default, the first install that has both: the NCCL wheel of $(PYTHON)'s
# environment (the library its torch loads), the CUDA toolkit's, the system's. Override with
# NCCL_HOME=/path.
PYTHON ?= python3
NCCL_WHEEL := $(shell $(PYTHON) -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])" 2>/dev/null)
nccl_libdir = $(firstword $(foreach d,$(1)/lib $(1)/lib64 $(1)/lib/x86_64-linux-gnu,$(if $(wildcard $(d)/libnccl.so.2),$(d))))
ifeq ($(origin NCCL_HOME),undefined)
NCCL_HOME := $(firstword $(foreach d,$(NCCL_WHEEL) $(CUDA_HOME) /usr,$(if $(and $(wildcard $(d)/include/nccl.h),$(call nccl_libdir,$(d))),$(d))))
endif
NCCL_LIBDIR ?= $(call nccl_libdir,$(NCCL_HOME))
ifeq ($(strip $(NCCL_LIBDIR)),)
$(error no NCCL install with include/nccl.h and libnccl.so.2 found: set NCCL_HOME=/path)
endif
NCCL_VERSION := $(shell sed -n 's/^\#define NCCL_VERSION_CODE *\([0-9]*\).*/\1/p' $(NCCL_HOME)/include/nccl.h)

CC := gcc
CXX := g++
NVCC := $(CUDA_HOME)/bin/nvcc
BUILD := build
INCLUDES := -Iinclude -I. -I$(NCCL_HOME)/include -I$(CUDA_HOME)/include
CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror=implicit-function-declaration -fPIC $(INCLUDES)
NVCCFLAGS := -O3 -g -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC \
             -Xcompiler -Wall $(INCLUDES)
LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart -L$(NCCL_LIBDIR) -l:libnccl.so.2 \
          -Wl,-rpath,$(NCCL_LIBDIR) -Wl,-rpath,$(CUDA_HOME)/lib64 -lm -lpthread

KERNEL_DIRS := kernels/common kernels/move kernels/gemm kernels/pointwise kernels/v1
LIB_C := $(wildcard schedule/*.c reference/*.c api/*.c comm/*.c)
LIB_CU := $(wildcard schedule/*.cu comm/*.cu $(addsuffix /*.cu,$(KERNEL_DIRS)))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.cu.o)
TEST_C := $(wildcard tests/*.c)
GPU_TEST_SRC := $(wildcard tests/gpu/*.c tests/gpu/*.cu)
GPU_TEST_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(patsubst %.cu,$(BUILD)/%.cu.o,$(GPU_TEST_SRC)))

LIB := $(BUILD)/libmok.so
# the same objects as an archive, for the test programs that reach below the public API
LIB_A := $(BUILD)/libmok.a
RPATH_SELF := -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../lib'

# Which NCCL the build used, beside the library (build/libmok.nccl): rewritten only when the NCCL
# that this run of make picks differs, and everything depends on it, so that installing another
# torch (another NCCL wheel) rebuilds by itself. The Python package reads it (mok/_nccl.py).
NCCL_STAMP := $(BUILD)/libmok.nccl
NCCL_STAMP_TEXT := nccl_version_code=$(NCCL_VERSION) nccl_home=$(NCCL_HOME) nccl_libdir=$(NCCL_LIBDIR)
ifneq ($(MAKECMDGOALS),clean)
$(shell mkdir -p $(BUILD); [ "$$(cat $(NCCL_STAMP) 2>/dev/null)" = "$(NCCL_STAMP_TEXT)" ] || echo "$(NCCL_STAMP_TEXT)" > $(NCCL_STAMP))
endif
$(LIB_OBJ) $(LIB): $(NCCL_STAMP)

.PHONY: all test gpu-test clean install check sanitize-test
all: $(LIB) $(BUILD)/mok $(BUILD)/mok_tests $(if $(GPU_TEST_SRC),$(BUILD)/mok_gpu_tests)

# -MMD -MP: each object's header dependencies, written beside it and read back below
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# CUDA objects: ptxas's report (-Xptxas -v) kept beside each as <object>.ptxas for the build test
# (tests/test_build.c: no wgmma kernel serialized); the rest of nvcc's output shows as usual
$(BUILD)/%.cu.o: %.cu Makefile
	@mkdir -p $(dir $@)
	@echo "$(NVCC) $(NVCCFLAGS) -Xptxas -v -MMD -MP -c $< -o $@"
	@$(NVCC) $(NVCCFLAGS) -Xptxas -v -MMD -MP -c $< -o $@ 2> $@.ptxas; s=$$?; \
	  grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' $@.ptxas >&2; exit $$s

$(TEST_C:%.c=$(BUILD)/%.o): CFLAGS += -DMOK_BUILD_DIR='"$(BUILD)"' -DMOK_CUDA_HOME='"$(CUDA_HOME)"'

# libmok.so exports the public API only (include/mok.h, include/mok_reference.h: MOK_API)
$(LIB_OBJ): CFLAGS += -fvisibility=hidden
$(LIB_OBJ): NVCCFLAGS += -Xcompiler -fvisibility=hidden

$(LIB): $(LIB_OBJ)
	$(CXX) -shared -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LDLIBS)

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# the command: its own input generator (cli/fill.cu), the library through its public API
CLI_C := $(wildcard cli/*.c)
CLI_CU := $(wildcard cli/*.cu)
CLI_OBJ := $(CLI_C:%.c=$(BUILD)/%.o) $(CLI_CU:%.cu=$(BUILD)/%.cu.o)
$(BUILD)/mok: $(CLI_OBJ) $(LIB)
	$(CXX) -o $@ $(CLI_OBJ) -L$(BUILD) -lmok $(RPATH_SELF) $(LDLIBS)

$(BUILD)/mok_tests: $(TEST_C:%.c=$(BUILD)/%.o) $(LIB_A)
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/mok_gpu_tests: $(GPU_TEST_OBJ) $(BUILD)/tests/test_runner.o $(LIB_A)
	$(CXX) -o $@ $^ $(LDLIBS)

test: $(BUILD)/mok_tests $(BUILD)/mok
	$(BUILD)/mok_tests

# the CPU suite (its fuzzers too) with every host C file built under AddressSanitizer and
# UndefinedBehaviorSanitizer (UB is fatal), linked with the library's CUDA objects as they are
SAN_DIR := $(BUILD)/san
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_OBJ := $(patsubst %.c,$(SAN_DIR)/%.o,$(LIB_C) $(TEST_C))
$(SAN_DIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -DMOK_BUILD_DIR='"$(BUILD)"' -DMOK_CUDA_HOME='"$(CUDA_HOME)"' -MMD -MP -c $< -o $@
$(SAN_DIR)/mok_tests: $(SAN_OBJ) $(filter %.cu.o,$(LIB_OBJ))
	$(CXX) $(SAN_FLAGS) -o $@ $^ $(LDLIBS)
sanitize-test: $(SAN_DIR)/mok_tests $(LIB) $(BUILD)/mok
	ln -sf ../mok ../libmok.so $(SAN_DIR)/   # the CLI and library the suite runs, beside it
	ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $(SAN_DIR)/mok_tests

VENV := .venv
check: test sanitize-test
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch    # first: pip builds mok before it installs dependencies
	$(VENV)/bin/pip install -q ".[test]"
	$(VENV)/bin/python examples/hf_swap.py --backend torch --steps 5
	$(VENV)/bin/python examples/torchtitan_moe.py --backend torch
	$(VENV)/bin/python -m pytest -q tests/python

gpu-test: $(BUILD)/mok_gpu_tests $(BUILD)/mok
	./tests/gpu/launch.sh $(BUILD)/mok_gpu_tests

clean:
	rm -rf $(BUILD)

# make install PREFIX=... [DESTDIR=...]: lib/libmok.so (its NCCL and CUDA found by the rpath the
# build recorded), include/mok.h and mok_reference.h, bin/mok, lib/pkgconfig/mok.pc
PREFIX ?= /usr/local
MOK_VERSION := $(shell sed -n 's/^\#define MOK_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' include/mok.h | paste -sd.)
install: $(LIB) $(BUILD)/mok
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libmok.so
	install -m 644 $(NCCL_STAMP) $(DESTDIR)$(PREFIX)/lib/libmok.nccl
	install -m 644 include/mok.h include/mok_reference.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/mok $(DESTDIR)$(PREFIX)/bin/mok
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: mok' 'Description: a mixture-of-experts layer for Hopper GPUs (dispatch, SwiGLU experts, combine)' \
	  'Version: $(MOK_VERSION)' 'Libs: -L$${libdir} -Wl,-rpath,$${libdir} -lmok' 'Cflags: -I$${includedir}' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mok.pc

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- grouped GEMM (kernels/gemm): standalone GPU test and benchmark -------------------------------
#   make gg-test     build and run the grouped GEMM GPU tests (needs an sm_90 GPU)
#   make gg-bench    build and run the grouped GEMM benchmark (needs an sm_90 GPU)
#   make gg-lib      build/libmok_gg.so: the grouped GEMMs alone, for the torch comparison
# the GEMMs, the FP8 quantizers that make their operands, the zeroing of the weight gradient's
# tail rows (its operands' contract), and kernels/common's launch errors
GG_SRC := $(wildcard kernels/gemm/*.cu kernels/pointwise/fp8_*.cu kernels/pointwise/mxfp8.cu \
                     kernels/pointwise/tail_rows.cu kernels/common/*.cu)
GG_DEPS := $(GG_SRC) $(wildcard $(addsuffix /*.h,$(KERNEL_DIRS)) $(addsuffix /*.cuh,$(KERNEL_DIRS))) include/mok.h
.PHONY: gg-test gg-bench gg-lib
$(BUILD)/gg_test: tests/gpu/test_grouped_gemm.cu $(BUILD)/tests/test_runner.o $(GG_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ tests/gpu/test_grouped_gemm.cu $(GG_SRC) $(BUILD)/tests/test_runner.o

$(BUILD)/gg_bench: bench/bench_grouped_gemm.cu $(GG_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -o $@ bench/bench_grouped_gemm.cu $(GG_SRC)

# the grouped GEMMs alone, for the in-process comparison with torch (bench/grouped_gemm_baseline.py)
$(BUILD)/libmok_gg.so: $(GG_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -shared -o $@ $(GG_SRC)

gg-lib: $(BUILD)/libmok_gg.so

gg-test: $(BUILD)/gg_test
	$(BUILD)/gg_test

gg-bench: $(BUILD)/gg_bench
	$(BUILD)/gg_bench
