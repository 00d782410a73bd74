# One entry point: deps, all, test, run, bench, clean.
#   make deps                      install the Debian and Python packages (root)
#   make [CUDA=0] [MPI=0]          build everything this machine can into build/
#   make test                      every test; last line "N passed, N failed, N skipped"
#   make run [BENCH=..] [SCALE=..] [DEVICE=..] [ARGS='--flag=value ...']
#                                  prepare data, train to target, log
#   make seeds [BENCH=..] [SCALE=..] [N=5] [SYSTEM=..] [OUT=logs/submission] [SEED=1]
#                                  N runs with seeds SEED.., in the MLPerf submission layout
#                                  under OUT, and their score (scripts/seeds.sh)
#   make bench                     the benchmarks this machine can run
#   make bench-cpu                 the small trainers' CPU steps beside PyTorch eager, 1 and 2 threads;
#                                  time to target at the small scale; the medium configs' smoke runs
#   make test-emu                  the CUDA code on the CPU emulator (tests/emu)
#   make test-san                  the C test programs under ASan + UBSan (SANITIZE=1 build)
#   make test-matrix               order-dependent tests under every OpenBLAS kernel set (tests/matrix.sh)
#   make test-full-configs         the first training steps of every full config on the CPU (about 24 min)
#   make goldens                   rewrite tests/golden/*.gld with PyTorch (pip install torch)

.DEFAULT_GOAL := all
SHELL := /bin/bash

# ---------------------------------------------------------------- probes
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
CUDA ?= $(if $(NVCC),1,0)
MPICC := $(shell command -v mpicc 2>/dev/null)
MPI ?= $(if $(MPICC),1,0)
PKGS := lmdb libturbojpeg libpng libcjson openblas zlib libutf8proc libxxhash
PKG_OK := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo 1)
# DNNL=1 (the default where the header is there): the CPU convolutions
# through oneDNN (Debian libdnnl-dev, which has no pkg-config file;
# common/ops/conv_dnnl.c); DNNL=0 keeps them on im2col + OpenBLAS alone.
DNNL ?= $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),1,0)
PYTHON ?= python3

ifneq ($(filter-out deps clean test test-emu test-san test-matrix test-full-configs run seeds bench bench-cpu goldens,$(or $(MAKECMDGOALS),all)),)
ifneq ($(PKG_OK),1)
$(error missing libraries (pkg-config: $(PKGS)); run 'make deps' as root first)
endif
endif

# EMU=1: the .cu files compiled as C++ against the CPU emulation of CUDA in
# tests/emu (no GPU, no CUDA libraries linked); EMU_ASAN=1 adds AddressSanitizer.
EMU ?= 0
ifeq ($(EMU),1)
CUDA := 1
NVCC := $(PYTHON) tests/emu/emucc.py
BUILD ?= build-emu
endif

# SANITIZE=1: the CPU build with AddressSanitizer and UndefinedBehaviorSanitizer
# (any undefined behaviour stops the program), in its own build folder.
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
CUDA := 0
BUILD ?= build-san
endif

ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1 but nvcc was not found; install the CUDA toolkit or build with CUDA=0)
endif
endif

# ---------------------------------------------------------------- flags
BUILD ?= build
# A user's CFLAGS (make CFLAGS=-g, or the environment) come after ours, so they win.
override CFLAGS := -O2 -ftree-vectorize -fvect-cost-model=dynamic -fno-math-errno -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -fopenmp -MMD -MP -Icommon -I. $(CFLAGS)
override CFLAGS += $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -pthread -fopenmp
ifeq ($(DNNL),1)
override CFLAGS += -DHAVE_DNNL=1
LDLIBS += -ldnnl
else
override CFLAGS += -DHAVE_DNNL=0
endif
NVCCFLAGS := -O2 -std=c++17 -Icommon -I. -MMD -MP -Xcompiler -Wall,-Wextra \
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90

ifeq ($(EMU),1)
override CFLAGS += -DHAVE_CUDA=1 -I$(CUDA_HOME)/include
NVCCFLAGS := -O1 -g -std=c++17 -Icommon -I. -MMD -MP -Wall -Wextra -DHAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS += -lstdc++
ifeq ($(EMU_ASAN),1)
override CFLAGS += -fsanitize=address,alignment -fno-omit-frame-pointer
NVCCFLAGS += -fsanitize=address,alignment -fno-omit-frame-pointer -fno-sanitize-recover=alignment
LDLIBS += -fsanitize=address,alignment
endif
else ifeq ($(CUDA),1)
override CFLAGS += -DHAVE_CUDA=1 -I$(CUDA_HOME)/include
NVCCFLAGS += -DHAVE_CUDA=1
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
  -lcudnn -lcublasLt -lcublas -lnccl -lcudart -lstdc++
else
override CFLAGS += -DHAVE_CUDA=0
endif
ifeq ($(SANITIZE),1)
override CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDLIBS += -fsanitize=address,undefined
endif
ifeq ($(MPI),1)
override CFLAGS += -DHAVE_MPI=1 $(shell $(MPICC) --showme:compile)
LDLIBS += $(shell $(MPICC) --showme:link)
EMU_MPI_FLAGS := -DHAVE_MPI=1 $(shell $(MPICC) --showme:compile)
EMU_MPI_LIBS := $(shell $(MPICC) --showme:link)
else
override CFLAGS += -DHAVE_MPI=0
EMU_MPI_FLAGS := -DHAVE_MPI=0
endif

# ---------------------------------------------------------------- sources
# The shared runtime: every .c (and .cu with CUDA) in the folders of common/
# (core, device, ops, data, train, models; common/README.md).
COMMON_SRC := $(wildcard common/*/*.c) $(if $(filter 1,$(CUDA)),$(wildcard common/*/*.cu))
# The emulator's stand-ins for the CUDA libraries go into the same archive.
ifeq ($(EMU),1)
COMMON_SRC += $(wildcard tests/emu/emu_*.cpp)
endif
COMMON_OBJ := $(COMMON_SRC:%=$(BUILD)/obj/%.o)
LIBCOMMON := $(BUILD)/libcommon.a

# Trainers: a task directory with a train.c builds build/bin/<bench> from its
# .c (and .cu) files.
BENCH_DIR_resnet := image_classification
BENCH_DIR_ssd := object_detection
BENCH_DIR_transformer := translation
BENCH_DIR_ncf := recommendation
BENCH_DIR_bert := language
BENCHES := resnet ssd transformer ncf bert
BUILT_BENCHES := $(foreach b,$(BENCHES),$(if $(wildcard $(BENCH_DIR_$(b))/train.c),$(b)))
task_src = $(wildcard $(1)/*.c) $(if $(filter 1,$(CUDA)),$(wildcard $(1)/*.cu))
TRAINER_BINS := $(BUILT_BENCHES:%=$(BUILD)/bin/%)

# Tools: every datasets/*.c is one program (converters, generators).
TOOL_BINS := $(patsubst datasets/%.c,$(BUILD)/bin/%,$(wildcard datasets/*.c))

# Tests: every tests/<part>/test_*.c is one program, build/tests/test_*,
# linked with the harness (tests/harness/), the task libraries and the runtime.
TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BINS := $(foreach s,$(TEST_SRC),$(BUILD)/tests/$(notdir $(s:.c=)))
HARNESS_OBJ := $(BUILD)/obj/tests/harness/harness.c.o

# The emulator's own tests (EMU=1 only): its library stand-ins against plain
# loops, its streams and events, and its shared-memory race check.
ifeq ($(EMU),1)
TEST_BINS += $(BUILD)/tests/test_emu_libs $(BUILD)/tests/test_emu_streams \
  $(BUILD)/tests/test_emu_racecheck
endif

# Benchmarks: every tests/bench/bench_*.c is one program.
BENCH_BINS := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/bench_*.c))

ALL_OBJ := $(COMMON_OBJ) $(HARNESS_OBJ)

# ---------------------------------------------------------------- rules
.PHONY: all deps test test-emu test-san test-matrix test-full-configs run seeds bench bench-cpu clean probe goldens fuzz
# Keep the objects of every program: make would otherwise delete them as
# intermediate files and compile them again next time.
.SECONDARY:
all: probe $(LIBCOMMON) $(TRAINER_BINS) $(TOOL_BINS) $(TEST_BINS) $(BENCH_BINS)

probe:
	@echo "build: CUDA=$(CUDA)$(if $(NVCC), (nvcc $(NVCC))) MPI=$(MPI)$(if $(MPICC), ($(MPICC))) libraries=$(if $(PKG_OK),found,MISSING) trainers=[$(strip $(BUILT_BENCHES))]"

# V=1 shows the full commands.
Q := $(if $(filter 1,$(V)),,@)

# Objects depend on the flags they were built with: `make CUDA=0` after `make`
# (or MPI=0, or a new library) rebuilds instead of mixing old objects in.
FLAGS_STAMP := $(BUILD)/flags.txt
FLAGS_NOW := $(CC) $(CFLAGS) | $(NVCC) $(NVCCFLAGS) | $(LDLIBS)
ifneq ($(filter-out deps clean test test-emu test-san test-matrix test-full-configs run seeds bench bench-cpu goldens,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(BUILD); [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' >$(FLAGS_STAMP))
endif

$(BUILD)/obj/%.c.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC    $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP) $(if $(filter 1,$(EMU)),tests/emu/emucc.py)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC  $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/obj/%.cpp.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX   $<")
	$(Q)$(CXX) $(filter-out -std=c++17,$(NVCCFLAGS)) -std=c++17 -I$(CUDA_HOME)/include \
	  $(shell pkg-config --cflags openblas) $(EMU_MPI_FLAGS) -c $< -o $@

$(LIBCOMMON): $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# A task's code apart from its main (model, data adapter, metric) is its
# library, build/lib<task folder>.a: its trainer, the converters in datasets/
# and the tests link it instead of copying its code. The linker takes from an
# archive only what a program calls, so a program links them all.
task_lib_src = $(filter-out $(1)/train.c,$(call task_src,$(1)))
# Every task folder with C code has its library, a trainer or not yet.
TASK_DIRS := $(foreach b,$(BENCHES),$(if $(wildcard $(BENCH_DIR_$(b))/*.c),$(BENCH_DIR_$(b))))
TASK_LIBS := $(TASK_DIRS:%=$(BUILD)/lib%.a)
define task_lib_rule
$(BUILD)/lib$(1).a: $(patsubst %,$(BUILD)/obj/%.o,$(call task_lib_src,$(1)))
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  AR    $$@")
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
ALL_OBJ += $(patsubst %,$(BUILD)/obj/%.o,$(call task_src,$(1)))
endef
$(foreach d,$(TASK_DIRS),$(eval $(call task_lib_rule,$(d))))

define trainer_rule
$(BUILD)/bin/$(1): $(BUILD)/obj/$(BENCH_DIR_$(1))/train.c.o $(BUILD)/lib$(BENCH_DIR_$(1)).a $(LIBCOMMON)
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  LD    $$@")
	$$(Q)$$(CC) $$^ -o $$@ $$(LDLIBS)
endef
$(foreach b,$(BUILT_BENCHES),$(eval $(call trainer_rule,$(b))))

$(BUILD)/bin/%: $(BUILD)/obj/datasets/%.c.o $(TASK_LIBS) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $^ -o $@ $(LDLIBS)

define test_rule
$(BUILD)/tests/$(notdir $(1:.c=)): $(BUILD)/obj/$(1).o $(HARNESS_OBJ) $(TASK_LIBS) $(LIBCOMMON)
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  LD    $$@")
	$$(Q)$$(CC) $$^ -o $$@ $$(LDLIBS)
endef
$(foreach s,$(TEST_SRC),$(eval $(call test_rule,$(s))))

$(BUILD)/tests/test_emu_%: $(BUILD)/obj/tests/emu/test_emu_%.cpp.o $(BUILD)/obj/tests/emu/emu_libs.cpp.o \
  $(BUILD)/obj/tests/emu/emu_runtime.cpp.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CXX) $^ -o $@ $(shell pkg-config --libs openblas) $(EMU_MPI_LIBS) $(filter -fsanitize=%,$(LDLIBS))

# The race check's test kernels are a .cu, compiled by emucc.py as the
# project's are.
ifeq ($(EMU),1)
$(BUILD)/tests/test_emu_racecheck: $(BUILD)/obj/tests/emu/test_emu_racecheck.cu.o $(LIBCOMMON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $^ -o $@ $(LDLIBS)
ALL_OBJ += $(BUILD)/obj/tests/emu/test_emu_racecheck.cu.o
endif

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.c.o $(TASK_LIBS) $(LIBCOMMON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(CC) $^ -o $@ $(LDLIBS)

ALL_OBJ += $(patsubst datasets/%.c,$(BUILD)/obj/datasets/%.c.o,$(wildcard datasets/*.c))
ALL_OBJ += $(patsubst %.c,$(BUILD)/obj/%.c.o,$(TEST_SRC) $(wildcard tests/bench/*.c))
-include $(ALL_OBJ:.o=.d)

# ---------------------------------------------------------------- commands
# test, run and bench first make sure the packages are there (quick when they
# are), then build in a fresh make so that the library probes see them.
deps:
	@bash scripts/deps.sh

test:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && bash tests/run_tests.sh $(BUILD)

# The C test programs against the emulated GPU, in their own build folder.
test-emu:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) EMU=1 BUILD=build-emu all && \
	  EMU=1 ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0} bash tests/run_tests.sh build-emu

# The C test programs (unit and op tests) on the sanitizer build.
test-san:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) SANITIZE=1 BUILD=build-san all && \
	  SANITIZE=1 bash tests/run_tests.sh build-san

# The tests whose results depend on summation order, under each OpenBLAS
# kernel set and thread count (tests/matrix.sh; MATRIX_SEEDS=5 adds the small
# ResNet's target from five seeds in each).
test-matrix:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && \
	  $(MAKE) --no-print-directory -j$$(nproc) EMU=1 BUILD=build-emu all && bash tests/matrix.sh $(BUILD) build-emu

# Every full config's model built and a few training steps taken on the CPU
# (tests/recipes/full_first_steps.sh); too slow for make test.
test-full-configs:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && \
	  bash tests/recipes/full_first_steps.sh $(BUILD)

BENCH ?= resnet
DEVICE ?= auto
run:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && \
	  bash scripts/run.sh "$(BENCH)" "$(BENCH_DIR_$(BENCH))" "$(SCALE)" "$(DEVICE)" $(BUILD) $(ARGS)

N ?= 5
OUT ?= logs/submission
SEED ?= 1
seeds:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && \
	  bash scripts/seeds.sh "$(BENCH)" "$(BENCH_DIR_$(BENCH))" "$(SCALE)" "$(DEVICE)" $(BUILD) \
	  "$(N)" "$(SYSTEM)" "$(OUT)" "$(SEED)" $(ARGS)

bench:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && bash tests/bench/run_all.sh $(BUILD)

# The small trainers' CPU training and eval steps beside PyTorch eager at 1
# and 2 threads (tests/bench/bench_cpu.py; PyTorch installed into
# $(BUILD)/torch-site when missing); writes tests/bench/results/cpu_*.
bench-cpu:
	@bash scripts/deps.sh && $(MAKE) --no-print-directory -j$$(nproc) all && bash tests/bench/bench_cpu.sh $(BUILD)

# The PyTorch golden files the CPU op tests compare against, from their
# generators (tests/golden/README.md); tests/ops/test_goldens.py checks the
# committed ones still match them.
goldens:
	$(PYTHON) tests/golden/golden.py

clean:
	rm -rf $(BUILD) build build-emu build-san build-fuzz
include tests/fuzz/fuzz.mk
