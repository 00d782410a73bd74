# tests/fuzz/fuzz.mk: libFuzzer harnesses of the parsers that read untrusted
# input (tests/fuzz/README.md), included from the top-level Makefile.
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="record ckpt"]
#                     build, run each target FUZZ_SECONDS, print the table;
#                     non-zero exit when a target found something
#   make fuzz-build   build only: build-fuzz/bin/fuzz_<target>, seed corpora
#   make fuzz-coverage  line coverage of each target's parser files by its
#                     corpus so far (tests/fuzz/coverage.sh)
#   make fuzz-clean   remove build-fuzz/ (found inputs and corpora included)
# Everything is built with clang, AddressSanitizer, UndefinedBehaviorSanitizer
# and libFuzzer's coverage, CPU only (no CUDA, no MPI), into build-fuzz/.

FUZZ_BUILD := build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= record config image lmdb_record ckpt movielens_csv ncf_bin imagenet_val_csv \
  coco_json coco_results squad_json safetensors wordpiece subword wmt_text ckpt_named

FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# No OpenMP: the ops' parallel loops run on one thread (common/core/parallel.h).
FUZZ_CFLAGS := -O2 -g -std=c11 -Wall -Wextra -Werror -Wno-unknown-pragmas -D_GNU_SOURCE -pthread -MMD -MP \
  -Icommon -I. -Itests/fuzz -DHAVE_CUDA=0 -DHAVE_MPI=0 \
  $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(FUZZ_SAN) -fsanitize=fuzzer-no-link
# fuzz_util.c's ledger sees what the suite's code allocates and opens.
FUZZ_WRAP := $(foreach f,malloc calloc realloc posix_memalign free strdup getline __getdelim \
  fopen fclose open close mmap munmap,-Wl,--wrap=$(f))
FUZZ_LDLIBS := $(FUZZ_WRAP) $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -pthread

# The runtime's and the task libraries' C code (no CUDA), in one archive.
FUZZ_COMMON_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.c.o,$(wildcard common/*/*.c) \
  $(foreach d,$(TASK_DIRS),$(filter-out $(d)/train.c,$(wildcard $(d)/*.c))))
FUZZ_LIBCOMMON := $(FUZZ_BUILD)/libcommon.a
FUZZ_UTIL_OBJ := $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_util.c.o
FUZZ_ALL_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(filter-out tests/fuzz/fuzz_util.c \
  tests/fuzz/fuzz_seeds.c,$(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_BINS := $(FUZZ_ALL_TARGETS:%=$(FUZZ_BUILD)/bin/fuzz_%)

.PHONY: fuzz fuzz-build fuzz-probe fuzz-coverage fuzz-clean
fuzz:
	@$(MAKE) --no-print-directory -j$$(nproc) fuzz-build && \
	  bash tests/fuzz/run.sh $(FUZZ_BUILD) "$(FUZZ_SECONDS)" "$(FUZZ_TARGETS)"

fuzz-build: fuzz-probe $(FUZZ_BINS) $(FUZZ_BUILD)/seeds/.stamp

fuzz-probe:
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: $(FUZZ_CC) not found; it needs clang with libFuzzer (apt-get install clang)" >&2; exit 1; }
	@mkdir -p $(FUZZ_BUILD) && printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }\n' >$(FUZZ_BUILD)/probe.c && \
	  $(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_BUILD)/probe.c -o $(FUZZ_BUILD)/probe 2>/dev/null || \
	  { echo "make fuzz: $(FUZZ_CC) cannot link -fsanitize=fuzzer (libFuzzer runtime missing)" >&2; exit 1; }

# Objects follow the flags they were built with, as build/'s do.
FUZZ_FLAGS_STAMP := $(FUZZ_BUILD)/flags.txt
FUZZ_FLAGS_NOW := $(FUZZ_CC) $(FUZZ_CFLAGS) | $(FUZZ_LDLIBS)
ifneq ($(filter fuzz-build fuzz-coverage $(FUZZ_BUILD)/%,$(MAKECMDGOALS)),)
$(shell mkdir -p $(FUZZ_BUILD); [ "$$(cat $(FUZZ_FLAGS_STAMP) 2>/dev/null)" = '$(FUZZ_FLAGS_NOW)' ] || echo '$(FUZZ_FLAGS_NOW)' >$(FUZZ_FLAGS_STAMP))
endif

$(FUZZ_BUILD)/obj/%.c.o: %.c $(FUZZ_FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZCC $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_LIBCOMMON): $(FUZZ_COMMON_OBJ)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/bin/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.c.o $(FUZZ_UTIL_OBJ) $(FUZZ_LIBCOMMON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer $(filter %.o,$^) $(filter %.a,$^) -o $@ $(FUZZ_LDLIBS)

# The seed generator is an ordinary program (no fuzzer main).
$(FUZZ_BUILD)/bin/fuzz_seeds: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_seeds.c.o $(FUZZ_UTIL_OBJ) \
  $(FUZZ_LIBCOMMON)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link $^ -o $@ $(FUZZ_LDLIBS)

$(FUZZ_BUILD)/seeds/.stamp: $(FUZZ_BUILD)/bin/fuzz_seeds
	$(Q)rm -rf $(FUZZ_BUILD)/seeds && ASAN_OPTIONS=detect_leaks=0 $< $(FUZZ_BUILD)/seeds && touch $@

# The same harnesses with clang's source-based coverage instead of the
# sanitizers, to replay the corpora and count the lines they reach.
FUZZ_COV_CFLAGS := $(filter-out $(FUZZ_SAN) -O2,$(FUZZ_CFLAGS)) -O1 -fprofile-instr-generate \
  -fcoverage-mapping
FUZZ_COV_BINS := $(FUZZ_ALL_TARGETS:%=$(FUZZ_BUILD)/cov/bin/fuzz_%)

fuzz-coverage:
	@$(MAKE) --no-print-directory -j$$(nproc) fuzz-build $(FUZZ_COV_BINS) && \
	  bash tests/fuzz/coverage.sh $(FUZZ_BUILD) "$(FUZZ_TARGETS)"

$(FUZZ_BUILD)/cov/obj/%.c.o: %.c $(FUZZ_FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  COVCC $<")
	$(Q)$(FUZZ_CC) $(FUZZ_COV_CFLAGS) -c $< -o $@

$(FUZZ_BUILD)/cov/libcommon.a: $(FUZZ_COMMON_OBJ:$(FUZZ_BUILD)/obj/%=$(FUZZ_BUILD)/cov/obj/%)
	@$(if $(Q),echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/cov/bin/fuzz_%: $(FUZZ_BUILD)/cov/obj/tests/fuzz/fuzz_%.c.o \
  $(FUZZ_BUILD)/cov/obj/tests/fuzz/fuzz_util.c.o $(FUZZ_BUILD)/cov/libcommon.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD    $@")
	$(Q)$(FUZZ_CC) -fprofile-instr-generate -fsanitize=fuzzer $(filter %.o,$^) $(filter %.a,$^) \
	  -o $@ $(FUZZ_LDLIBS)

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

FUZZ_DEPS := $(FUZZ_COMMON_OBJ:.o=.d) $(FUZZ_UTIL_OBJ:.o=.d) \
  $(patsubst %,$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.c.d,$(FUZZ_ALL_TARGETS) seeds)
-include $(FUZZ_DEPS) $(FUZZ_DEPS:$(FUZZ_BUILD)/obj/%=$(FUZZ_BUILD)/cov/obj/%)
