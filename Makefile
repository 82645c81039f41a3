# zinf build. `make` builds build/bin/{zinfc,zinfrun,zinfdump,...};
# `make test` runs every suite (plain, then under ASan+UBSan, then a clang
# warnings pass); `make bench` runs the benchmarks; `make deps` installs the
# Debian packages the build needs (and does nothing when they are there);
# `make fuzz` runs the libFuzzer targets of tests/fuzz (docs/testing.md).
#
# Layout conventions (so modules can be added without editing this file):
#   runtime/base/*.c  the tools every layer uses (arena, json, errors,
#                     suggestions, half floats): libzinfbase.a (sees only itself)
#   runtime/plan/*.c  the plan layer: libzinfplan.a (sees itself and base)
#   lang/*.c          libzinflang.a (sees lang, the plan layer)
#   compiler/*.c      libzinfcompiler.a (sees compiler, lang, the plan layer)
#   runtime/ROOM/*.c  libzinfrt.a, one folder per job (RT_ROOMS below); each
#                     room sees the rooms ROOM_SEES_<room> names, the plan
#                     layer and base: never lang or compiler, nor a room above
#                     it, so a wrong include fails to build
#   runtime/main_*.c  the runtime's programs (they see every room)
#   runtime/ref/*.c   the reference executor, libzinfref.a (sees all; it
#                     runs a compiler Graph on the host kernels)
#   */main_NAME.c                        the main() of build/bin/NAME, linked
#                                        with its folder's libraries
#   tests/unit/test_NAME.c               a Check suite -> build/tests/test_NAME
#   tests/bench/bench_NAME.c             a benchmark   -> build/bench/bench_NAME
#   tests/tools/NAME.c                   a helper program of the e2e tests
#                                        -> build/tools/NAME
#   lang/lexer.re, lang/grammar.y        generated into $(BUILD)/gen

BUILD ?= build
# Two jobs by default (the machines this is built on have 2 cores), unless
# the caller chose; sub-makes share the top one's job server.
ifeq ($(MAKELEVEL),0)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j2
endif
endif
# `make V=1` shows every command.
Q := $(if $(V),,@)
CC ?= cc
CUDA ?= /usr/local/cuda
SAN ?=
OPT ?= -O2

ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
endif
# The libFuzzer build (make fuzz, with CC=clang): coverage for libFuzzer plus ASan and UBSan.
ifeq ($(SAN),fuzz)
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
endif

PKGS_CFLAGS := $(shell pkg-config --cflags ompi-c openblas check liburing 2>/dev/null)
PKGS_LIBS := $(shell pkg-config --libs ompi-c openblas liburing 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

WARN := -Wall -Wextra -Werror
# What each layer may include (docs/architecture.md); tests see everything.
INC_BASE := -Iruntime/base
INC_PLAN := -Iruntime/plan $(INC_BASE)
INC_LANG := -Ilang $(INC_PLAN) -I$(BUILD)/gen
INC_COMPILER := -Icompiler $(INC_LANG) -I$(CUDA)/include
# The runtime's rooms, lowest first, and the rooms each may see besides
# itself (and the plan layer and base). A room never sees one above it.
RT_ROOMS := io comm tok chat hostk gpu store data report exec hf probe decode
ROOM_SEES_io :=
ROOM_SEES_comm :=
ROOM_SEES_tok :=
ROOM_SEES_chat :=
ROOM_SEES_hostk :=
ROOM_SEES_gpu := comm
ROOM_SEES_store := io
ROOM_SEES_data := tok chat
ROOM_SEES_report := hostk
ROOM_SEES_exec := store io comm gpu hostk
ROOM_SEES_hf := exec store io comm gpu hostk
ROOM_SEES_probe := exec store io comm gpu hostk
ROOM_SEES_decode := hf exec store io comm gpu hostk
inc_room = $(foreach r,$(1) $(ROOM_SEES_$(1)),-Iruntime/$(r)) $(INC_PLAN) -I$(CUDA)/include
# The runtime's programs see every room.
INC_RT := -Iruntime $(foreach r,$(RT_ROOMS),-Iruntime/$(r)) $(INC_PLAN) -I$(CUDA)/include
# (compiler/ before the CUDA headers: its nvrtc.h is not the toolkit's)
INCLUDES := -Iruntime/ref -Iruntime $(foreach r,$(RT_ROOMS),-Iruntime/$(r)) -Icompiler $(INC_LANG) -I$(CUDA)/include
room_of = $(word 2,$(subst /, ,$(1)))
inc_for = $(if $(filter runtime/base/%,$(1)),$(INC_BASE),$(if $(filter runtime/plan/%,$(1)),$(INC_PLAN),$(if $(filter runtime/ref/%,$(1)),$(INCLUDES),$(if $(filter $(addprefix runtime/,$(addsuffix /%,$(RT_ROOMS))),$(1)),$(call inc_room,$(call room_of,$(1))),$(if $(filter runtime/%,$(1)),$(INC_RT),$(if $(filter compiler/%,$(1)),$(INC_COMPILER),$(if $(filter lang/% $(BUILD)/gen/lexer.c $(BUILD)/gen/grammar.c,$(1)),$(INC_LANG),$(if $(filter $(BUILD)/gen/unicode_table.c,$(1)),$(call inc_room,tok),$(INCLUDES)))))))))
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -g $(OPT) $(SANFLAGS) -fopenmp $(PKGS_CFLAGS) \
	-DZINF_STDLIB_DIR='"$(abspath stdlib)"' -DZINF_VERSION='"0.1.0"'
CFLAGS_ALL := $(BASE_CFLAGS) $(WARN) $(CFLAGS)
# Generated parsers are not ours to lint beyond what they can bear.
GEN_CFLAGS := $(BASE_CFLAGS) -Wall -Werror -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable $(CFLAGS)
LDLIBS := $(PKGS_LIBS) -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lnvrtc -lz -lzstd -ldl -lpthread -lm -fopenmp $(SANFLAGS)

not_main = $(foreach f,$(1),$(if $(findstring /main_,$(f)),,$(f)))
BASE_SRC := $(wildcard runtime/base/*.c)
PLAN_SRC := $(wildcard runtime/plan/*.c)
LANG_SRC := $(call not_main,$(wildcard lang/*.c))
COMPILER_SRC := $(call not_main,$(wildcard compiler/*.c))
RT_SRC := $(foreach r,$(RT_ROOMS),$(wildcard runtime/$(r)/*.c))
REF_SRC := $(call not_main,$(wildcard runtime/ref/*.c))
LIB_SRC := $(BASE_SRC) $(PLAN_SRC) $(LANG_SRC) $(COMPILER_SRC) $(RT_SRC) $(REF_SRC)
MAIN_SRC := $(wildcard lang/main_*.c compiler/main_*.c runtime/main_*.c runtime/ref/main_*.c)
GEN_SRC :=
ifneq ($(wildcard lang/lexer.re),)
GEN_SRC += $(BUILD)/gen/lexer.c
endif
ifneq ($(wildcard lang/grammar.y),)
GEN_SRC += $(BUILD)/gen/grammar.c
endif
# The Unicode class table of runtime/tok/unicode.h (zinftok's pre-tokenizers),
# generated from Python's unicodedata into the build tree.
PYTHON ?= python3
GEN_SRC += $(BUILD)/gen/unicode_table.c
TEST_SRC := $(wildcard tests/unit/test_*.c)
BENCH_SRC := $(wildcard tests/bench/bench_*.c)
TOOL_SRC := $(wildcard tests/tools/*.c)

objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_BASE := $(BUILD)/libzinfbase.a
LIB_PLAN := $(BUILD)/libzinfplan.a
LIB_LANG := $(BUILD)/libzinflang.a
LIB_COMPILER := $(BUILD)/libzinfcompiler.a
LIB_RT := $(BUILD)/libzinfrt.a
LIB_REF := $(BUILD)/libzinfref.a
BINS := $(foreach m,$(MAIN_SRC),$(BUILD)/bin/$(patsubst main_%.c,%,$(notdir $(m))))
TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
TOOLS := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOL_SRC))
# Tests, benchmarks and fuzz harnesses link every layer, in dependency order.
LIB := $(LIB_REF) $(LIB_COMPILER) $(LIB_LANG) $(LIB_RT) $(LIB_PLAN) $(LIB_BASE)
# A program links its folder's layer and what that layer may use.
libs_for = $(if $(filter runtime/ref/%,$(1)),$(LIB),$(if $(filter runtime/%,$(1)),$(LIB_RT) $(LIB_PLAN) $(LIB_BASE),$(LIB_COMPILER) $(LIB_LANG) $(LIB_PLAN) $(LIB_BASE)))

# Objects of tests and benchmarks are intermediates of pattern rules: keep them.
.SECONDARY:

.PHONY: demo install all deps test test-concurrent unit check-unit golden golden-update e2e bench clean clang-check asan fuzz fuzz-bins gpu-compile-all
all: $(BINS) $(TESTS) $(BENCHES) $(TOOLS)

# Objects that include the generated parser header must wait for it.
$(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC) $(MAIN_SRC)) $(BUILD)/obj/gen/lexer.o: | $(BUILD)/gen/grammar.h

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS_ALL) $(call inc_for,$<) -MMD -MP -c $< -o $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(GEN_CFLAGS) $(call inc_for,$<) -MMD -MP -c $< -o $@

$(BUILD)/gen/lexer.c: lang/lexer.re
	@mkdir -p $(dir $@)
	@echo "  RE2C  $<"
	$(Q)re2c -W --no-generation-date --no-version -o $@ $<

$(BUILD)/gen/unicode_table.c: runtime/tok/unicode_table.py
	@mkdir -p $(dir $@)
	@echo "  GEN   $@"
	$(Q)$(PYTHON) runtime/tok/unicode_table.py > $@.tmp && mv $@.tmp $@

ifneq ($(wildcard lang/grammar.y),)
# One run of lemon makes both files (a grouped target, so parallel make runs
# it once); lemon leaves an unchanged header's time alone, so touch both.
$(BUILD)/gen/grammar.c $(BUILD)/gen/grammar.h &: lang/grammar.y
	@mkdir -p $(BUILD)/gen
	@echo "  LEMON $<"
	$(Q)cp lang/grammar.y $(BUILD)/gen/grammar.y
	$(Q)lemon -q -T$$(ls /usr/share/lemon/lempar.c /usr/share/lemon/lempar.tpl 2>/dev/null | head -1) -d$(BUILD)/gen $(BUILD)/gen/grammar.y
	@touch $(BUILD)/gen/grammar.c $(BUILD)/gen/grammar.h
else
$(BUILD)/gen/grammar.h:
	@mkdir -p $(BUILD)/gen && touch $@
endif

$(LIB_BASE): $(call objs,$(BASE_SRC))
$(LIB_PLAN): $(call objs,$(PLAN_SRC))
$(LIB_LANG): $(call objs,$(LANG_SRC)) $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(filter %/lexer.c %/grammar.c,$(GEN_SRC)))
$(LIB_COMPILER): $(call objs,$(COMPILER_SRC))
$(LIB_RT): $(call objs,$(RT_SRC)) $(BUILD)/obj/gen/unicode_table.o
$(LIB_REF): $(call objs,$(REF_SRC))
$(LIB):
	@rm -f $@
	@echo "  AR    $@"
	$(Q)ar rcs $@ $^

define main_rule
$(BUILD)/bin/$(patsubst main_%.c,%,$(notdir $(1))): $(patsubst %.c,$(BUILD)/obj/%.o,$(1)) $(call libs_for,$(1))
	@mkdir -p $$(dir $$@)
	@echo "  LINK  $$@"
	$$(Q)$$(CC) -o $$@ $$^ $$(LDLIBS)
endef
$(foreach m,$(MAIN_SRC),$(eval $(call main_rule,$(m))))

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

$(BUILD)/tools/%: $(BUILD)/obj/tests/tools/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

# ---- fuzzing (tests/fuzz, docs/testing.md) ----
# Each harness tests/fuzz/fuzz_NAME.c is linked twice: in every build with
# tests/fuzz/replay_main.c as $(BUILD)/fuzz-replay/NAME, which runs it on the
# files it is given (tests/e2e/san_fuzz_replay.sh replays the regression and
# seed corpora under ASan+UBSan), and by `make fuzz` with libFuzzer as
# $(FUZZ_BUILD)/fuzz_NAME. FUZZ_TARGETS chooses which run, FUZZ_SECONDS how
# long each; FUZZ_JOBS is libFuzzer's -fork.
FUZZ_SRC := $(wildcard tests/fuzz/*.c)
FUZZ_HARNESSES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_TARGETS ?= $(FUZZ_HARNESSES)
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_BUILD := build/fuzz
# A harness's objects: its own, plus its custom mutator where it has one.
fuzz_objs = $(BUILD)/obj/tests/fuzz/fuzz_$(1).o $(if $(wildcard tests/fuzz/$(1)_mutator.c),$(BUILD)/obj/tests/fuzz/$(1)_mutator.o)
REPLAYS := $(patsubst %,$(BUILD)/fuzz-replay/%,$(FUZZ_HARNESSES)) $(BUILD)/fuzz-replay/shrink_kernels
all: $(REPLAYS)

define fuzz_rule
$(BUILD)/fuzz-replay/$(1): $(call fuzz_objs,$(1)) $(BUILD)/obj/tests/fuzz/replay_main.o $(LIB)
	@mkdir -p $$(dir $$@)
	@echo "  LINK  $$@"
	$$(Q)$$(CC) -o $$@ $$^ $$(LDLIBS)
$(BUILD)/fuzz_$(1): $(call fuzz_objs,$(1)) $(LIB)
	@echo "  LINK  $$@"
	$$(Q)$$(CC) -fsanitize=fuzzer -o $$@ $$^ $$(LDLIBS)
endef
$(foreach h,$(FUZZ_HARNESSES),$(eval $(call fuzz_rule,$(h))))

$(BUILD)/fuzz-replay/shrink_kernels: $(BUILD)/obj/tests/fuzz/shrink_kernels.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	$(Q)$(CC) -o $@ $^ $(LDLIBS)

fuzz-bins: $(patsubst %,$(BUILD)/fuzz_%,$(FUZZ_HARNESSES))

# Seeds from this build's zinfc, the libFuzzer binaries in their own tree
# (clang, SAN=fuzz), then each target in turn.
fuzz: all
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) SAN=fuzz CC=clang fuzz-bins
	@sh tests/fuzz/run.sh $(BUILD) $(FUZZ_BUILD) "$(FUZZ_TARGETS)" $(FUZZ_SECONDS) $(FUZZ_JOBS)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

deps:
	@sh tests/deps.sh

# The whole suite: plain build, sanitizer build, clang warnings pass.
test: all
	@sh tests/run.sh $(BUILD) plain
	@if $(MAKE) --no-print-directory BUILD=build/asan SAN=1 all; then sh tests/run.sh build/asan asan; \
	 else mkdir -p build/asan && echo "fail asan/build (the sanitizer build did not compile)" > build/asan/results; fi
	@if $(MAKE) --no-print-directory clang-check; then echo "pass clang-check" > $(BUILD)/clang-results; \
	 else echo "fail clang-check" > $(BUILD)/clang-results; fi
	@sh tests/summary.sh $(BUILD)/results build/asan/results $(BUILD)/clang-results

# The MPI-using suites 4 at a time, ROUNDS rounds (tests/concurrent.sh):
# two runs of the suite on one machine must not disturb each other.
ROUNDS ?= 20
test-concurrent: all
	@sh tests/concurrent.sh $(BUILD) $(ROUNDS) $(SUITES)

unit: all
	@sh tests/run.sh $(BUILD) plain unit

golden-update: all
	@sh tests/golden/run.sh $(BUILD) update

bench: all
	@sh tests/bench/run.sh $(BUILD)

# Every example model for every built-in GPU target, kernels for its arch
# (make test runs a subset: tests/e2e/gpu_compile_all.sh).
gpu-compile-all: all
	@sh tests/e2e/gpu_compile_all.sh $(BUILD) all

# clang must accept every source with the same warnings as errors.
clang-check: $(BUILD)/gen/grammar.h $(GEN_SRC)
	@if command -v clang >/dev/null; then \
	  set -e; $(foreach f,$(LIB_SRC) $(MAIN_SRC) $(TEST_SRC) $(BENCH_SRC) $(TOOL_SRC) $(FUZZ_SRC),\
	    clang -std=c11 -D_GNU_SOURCE -fsyntax-only $(WARN) -Wno-unknown-warning-option -Wno-unknown-pragmas $(call inc_for,$(f)) $(PKGS_CFLAGS) -DZINF_STDLIB_DIR='"x"' -DZINF_VERSION='"x"' $(f);) \
	   echo "clang-check: $(words $(LIB_SRC) $(MAIN_SRC) $(TEST_SRC) $(BENCH_SRC) $(TOOL_SRC) $(FUZZ_SRC)) files clean"; \
	else echo "clang-check: clang not installed, skipped"; fi

# The main job: gpt2-tiny, 2 MPI ranks, parameters and optimizer state on
# an NVMe directory, trained on a token file made from a text every Debian
# machine has. Planned for this machine as zinfprobe measures it (the
# first time; then from the cache, docs/tuning.md), so the step time it
# predicts is this machine's. Prints the plan's memory and the falling loss.
DEMO := $(BUILD)/demo
DEMO_TEXT := $(firstword $(wildcard /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 README.md))
DEMO_STEPS ?= 40
demo: all
	@rm -rf $(DEMO)/ckpt $(DEMO)/tiny.safetensors
	@mkdir -p $(DEMO)/nvme
	$(BUILD)/bin/zinftok $(DEMO_TEXT) -o $(DEMO)/train.bin
	$(BUILD)/bin/zinfc examples/gpt2-tiny-offload.zl --target probe --ranks 2 -o $(DEMO)/tiny.plan --explain
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1 \
	  mpirun -np 2 --oversubscribe $(BUILD)/bin/zinfrun $(DEMO)/tiny.plan --data $(DEMO)/train.bin \
	  --steps $(DEMO_STEPS) --nvme $(DEMO)/nvme --checkpoint-dir $(DEMO)/ckpt --export $(DEMO)/tiny.safetensors

# `make install PREFIX=~/.local` copies the programs to PREFIX/bin; they
# keep reading the stdlib from this checkout (ZINF_STDLIB overrides it).
PREFIX ?= /usr/local
install: all
	install -d $(PREFIX)/bin
	install -m 755 $(BINS) $(PREFIX)/bin

clean:
	rm -rf build

# `make print-VAR` prints a variable (tests/e2e/layering.sh reads the
# include flags of each layer).
print-%:
	@echo '$($*)'
# `make print-room-ROOM` prints the include flags of a runtime room.
print-room-%:
	@echo '$(call inc_room,$*)'
