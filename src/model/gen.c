/* gen.c: al_gen_model (anyllm.h), models of RANDOM WEIGHTS, FOR BENCHMARKS ONLY: real
 * shapes and hyper-parameters from an architecture's descriptor (arch.h), a minimal
 * vocabulary, general.name "anyllm random benchmark model". They load and run everywhere
 * a real model of that shape does and so measure speed and memory, but their output is
 * noise. Each tensor is generated and quantized a chunk of rows at a time on worker
 * threads (quantize.h: quant_rows), so a 1.1 B-parameter model never needs its f32
 * weights in memory; every row's values depend only on the seed, the tensor and the
 * row, so the file is the same for any thread count.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "cpu/pool.h"
#include "format/gguf_write.h"
#include "format/quant.h"
#include "format/quantize.h"
#include "model/arch.h"
#include "util.h"

/* ---- the options ---------------------------------------------------------------------- */

/* al_gen_params checked, with the defaults filled in and the names resolved; sizes in
 * int64_t so that their products (tensor shapes) cannot overflow. */
typedef struct gen_opts {
    const char *out;
    const char *arch;        /* general.architecture */
    const arch_desc *ad;
    int64_t dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx, threads, swa;
    uint64_t seed;
    int64_t experts, experts_used, ffn_exp; /* mixture-of-experts architectures */
    int64_t yarn;            /* > 0: YaRN rope scaling by this factor over ctx */
    /* hybrid architectures (qwen35): the convolution's taps, a delta-net head's size,
     * its value and key heads, and one full-attention layer in this many */
    int64_t ssm_conv, ssm_state, ssm_heads, ssm_groups, full_attn;
    int64_t mtp;             /* next-token-prediction blocks after the trunk's */
    bool ssm_split;          /* qwen3next: attn_qkv + attn_gate, not the older ssm_in */
    int64_t q_lora, kv_lora; /* deepseek2 (al_gen_params) */
    int64_t head_dim_swa, swa_period, shared_kv, ple; /* gemma4 (al_gen_params) */
    double rope_base;
    bool tied, pure;
    const quant_scheme *scheme;
    void (*progress)(void *user, int done, int count);
    void *progress_user;
} gen_opts;

enum { GEN_DENSE_LEAD = 1 }; /* glm4moe's and deepseek2's leading dense layers */

static int64_t gen_head_dim(const gen_opts *o) {
    return o->head_dim ? o->head_dim : o->dim / o->heads;
}

/* glm4moe: a leading dense layer, then experts with a sigmoid router and a shared one. */
static bool gen_glm(const gen_opts *o) { return o->ad->sigmoid_only; }

/* deepseek2: latent attention, a leading dense layer, experts with shared ones. */
static bool gen_mla(const gen_opts *o) { return (o->ad->flags & ARCH_MLA) != 0; }

/* Leading dense layers before the experts. */
static int64_t gen_dense_lead(const gen_opts *o) {
    return gen_glm(o) || gen_mla(o) ? GEN_DENSE_LEAD : 0;
}

/* deepseek2's widths: the rope part of a head (a third, even), a value head (the
 * rest) and the V3-style router (q_lora > 0). */
static int64_t gen_mla_rot(const gen_opts *o) { return (gen_head_dim(o) / 3 + 1) / 2 * 2; }
static int64_t gen_mla_v(const gen_opts *o) { return gen_head_dim(o) - gen_mla_rot(o); }
static bool gen_mla_v3(const gen_opts *o) { return gen_mla(o) && o->q_lora > 0; }

/* gemma4: layers sized one by one (arch.h: ARCH_PER_LAYER) */
static bool gen_g4(const gen_opts *o) { return (o->ad->flags & ARCH_PER_LAYER) != 0; }
static bool gen_swa_layer(const gen_opts *o, int64_t il) {
    return (il + 1) % (o->swa_period ? o->swa_period : o->ad->swa_period) != 0;
}
static bool gen_shared(const gen_opts *o, int64_t il) { return il >= o->layers - o->shared_kv; }

/* Dimensions of a head that rotate: all of them, a quarter in a hybrid, half in
 * glm4moe (GLM-4.5's partial_rotary_factor); even. */
static int64_t gen_rot(const gen_opts *o) {
    const int64_t hd = gen_head_dim(o);
    if (gen_mla(o)) return gen_mla_rot(o);
    return o->full_attn ? (hd / 4 + 1) / 2 * 2 : gen_glm(o) ? (hd / 2 + 1) / 2 * 2 : hd;
}

/* The sizes' ranges, as the command line gives them; 0 is "the default" for those not
 * required. */
static al_status gen_ranges(const gen_opts *o) {
    const struct { const char *name; int64_t v, lo, hi; bool required; } r[] = {
        {"dim", o->dim, 1, 1 << 16, true},         {"layers", o->layers, 1, 1024, true},
        {"heads", o->heads, 1, 1024, true},        {"kv_heads", o->kv_heads, 1, 1024, true},
        {"head_dim", o->head_dim, 2, 4096, false}, {"swa", o->swa, 1, 1 << 20, false},
        {"ffn", o->ffn, 1, 1 << 18, true},         {"vocab", o->vocab, 259, 1 << 22, true},
        {"ctx", o->ctx, 1, 1 << 24, false},        {"n_threads", o->threads, 1, 256, false},
        {"experts", o->experts, 1, 4096, false},
        {"experts_used", o->experts_used, 1, 4096, false},
        {"ffn_exp", o->ffn_exp, 1, 1 << 18, false}, {"yarn", o->yarn, 1, 1024, false},
        {"ssm_conv", o->ssm_conv, 2, 16, false},   {"ssm_state", o->ssm_state, 2, 512, false},
        {"ssm_heads", o->ssm_heads, 1, 1024, false},
        {"ssm_groups", o->ssm_groups, 1, 1024, false},
        {"full_attn_interval", o->full_attn, 1, 1024, false}, {"mtp", o->mtp, 1, 4, false},
        {"q_lora", o->q_lora, 1, o->dim, false}, {"kv_lora", o->kv_lora, 1, o->dim, false},
        {"head_dim_swa", o->head_dim_swa, 2, 4096, false},
        {"swa_period", o->swa_period, 1, 1024, false},
        {"shared_kv", o->shared_kv, 1, o->layers, false}, {"ple", o->ple, 1, o->dim, false},
    };
    if (!o->arch || !o->dim || !o->layers || !o->heads || !o->kv_heads || !o->ffn || !o->vocab ||
        !o->scheme)
        return al_error(AL_ERR_ARG, "arch, dim, layers, heads, kv_heads, ffn, vocab and type "
                        "are required");
    for (size_t k = 0; k < sizeof r / sizeof *r; k++)
        if ((r[k].v != 0 || r[k].required) && (r[k].v < r[k].lo || r[k].v > r[k].hi))
            return al_error(AL_ERR_ARG, "%s %" PRId64 ": expected an integer in [%" PRId64
                            ", %" PRId64 "]%s", r[k].name, r[k].v, r[k].lo, r[k].hi,
                            r[k].required ? "" : " or 0 for the default");
    if (!(o->rope_base >= 0 && o->rope_base < 1e12))
        return al_error(AL_ERR_ARG, "rope_base %g: expected a positive number below 1e12 or 0 "
                        "for the architecture's", o->rope_base);
    return AL_OK;
}

/* The hybrid architectures' sizes: Qwen3.6-35B-A3B's proportions where not given (heads
 * of 128, of dim / 8 when smaller; value heads giving twice the embedding, half as many
 * key heads, a 4-tap convolution). */
static al_status gen_hybrid(gen_opts *o) {
    if (!(o->ad->flags & ARCH_HYBRID)) {
        if (o->full_attn || o->ssm_conv || o->ssm_state || o->ssm_heads || o->ssm_groups ||
            o->mtp)
            return al_error(AL_ERR_ARG, "ssm_conv, ssm_state, ssm_heads, ssm_groups, mtp and "
                            "full_attn_interval: %s has no recurrent layers", o->arch);
        return AL_OK;
    }
    if (!o->full_attn) o->full_attn = 4;
    if (!o->ssm_conv) o->ssm_conv = 4;
    if (!o->ssm_state) o->ssm_state = o->dim / 8 < 128 ? (o->dim / 8 < 2 ? 2 : o->dim / 8) : 128;
    if (!o->ssm_heads) o->ssm_heads = 2 * o->dim / o->ssm_state > 0 ? 2 * o->dim / o->ssm_state : 1;
    if (!o->ssm_groups) o->ssm_groups = o->ssm_heads % 2 ? o->ssm_heads : o->ssm_heads / 2;
    if (o->ssm_heads % o->ssm_groups)
        return al_error(AL_ERR_ARG, "ssm_heads %" PRId64 " is not a multiple of ssm_groups %"
                        PRId64, o->ssm_heads, o->ssm_groups);
    return AL_OK;
}

/* Checks the sizes against each other and the architecture, and fills in defaults. */
static al_status gen_check(gen_opts *o) {
    al_status st = gen_ranges(o);
    if (st != AL_OK) return st;
    if (!o->head_dim && (o->dim % o->heads || (o->dim / o->heads) % 2))
        return al_error(AL_ERR_ARG, "dim %" PRId64 " must be heads %" PRId64 " times an even "
                        "head size (or give head_dim)", o->dim, o->heads);
    if (o->head_dim % 2)
        return al_error(AL_ERR_ARG, "head_dim %" PRId64 " must be even", o->head_dim);
    if (o->heads % o->kv_heads)
        return al_error(AL_ERR_ARG, "heads %" PRId64 " is not a multiple of kv_heads %" PRId64,
                        o->heads, o->kv_heads);
    if (o->rope_base == 0) o->rope_base = o->ad->rope_base;
    if (o->swa && !(o->ad->flags & ARCH_SLIDING))
        return al_error(AL_ERR_ARG, "swa: %s has no sliding-window layers", o->arch);
    if (!o->swa) o->swa = 512;
    const bool moe = o->ad->flags & ARCH_MOE;
    const bool may = moe || o->ad->flags & ARCH_PER_LAYER; /* gemma4: experts or none */
    if ((moe || (may && (o->experts || o->experts_used || o->ffn_exp))) &&
        !(o->experts && o->experts_used && o->ffn_exp))
        return al_error(AL_ERR_ARG, "%s is a mixture of experts: experts, experts_used and "
                        "ffn_exp are required", o->arch);
    if (!may && (o->experts || o->experts_used || o->ffn_exp))
        return al_error(AL_ERR_ARG, "experts, experts_used and ffn_exp: %s has no experts",
                        o->arch);
    st = gen_hybrid(o);
    if (st != AL_OK) return st;
    if (o->ssm_split && !(o->ad->flags & ARCH_GDN_GROUPED))
        return al_error(AL_ERR_ARG, "ssm_split: %s has only the split projections", o->arch);
    if (o->experts_used > o->experts)
        return al_error(AL_ERR_ARG, "experts_used %" PRId64 " exceeds experts %" PRId64,
                        o->experts_used, o->experts);
    if ((o->q_lora || o->kv_lora) && !gen_mla(o))
        return al_error(AL_ERR_ARG, "q_lora and kv_lora: %s has no latent attention", o->arch);
    if (gen_mla(o) && gen_head_dim(o) < 6)
        return al_error(AL_ERR_ARG, "head_dim %" PRId64 ": latent attention needs at least 6",
                        gen_head_dim(o));
    if (gen_mla(o) && !o->kv_lora) o->kv_lora = 4 * gen_mla_v(o) < o->dim ? 4 * gen_mla_v(o) : o->dim;
    if ((o->head_dim_swa || o->swa_period || o->shared_kv || o->ple) && !gen_g4(o))
        return al_error(AL_ERR_ARG, "head_dim_swa, swa_period, shared_kv and ple: %s has none",
                        o->arch);
    if (gen_g4(o) && !o->head_dim_swa) o->head_dim_swa = (gen_head_dim(o) / 2 + 1) / 2 * 2;
    if (gen_g4(o) && o->head_dim_swa % 2)
        return al_error(AL_ERR_ARG, "head_dim_swa %" PRId64 " must be even", o->head_dim_swa);
    const int64_t first = o->layers - o->shared_kv;
    if (o->shared_kv && (first < 2 || !gen_swa_layer(o, first - 2) || gen_swa_layer(o, first - 1)))
        return al_error(AL_ERR_ARG, "shared_kv %" PRId64 ": layers %" PRId64 " and %" PRId64
                        " must be a sliding and a global one (swa_period)", o->shared_kv,
                        first - 2, first - 1);
    if (!o->threads) o->threads = pool_n_cpus() < 256 ? pool_n_cpus() : 256;
    if (!o->ctx) o->ctx = 4096;
    return AL_OK;
}

/* The public parameters as gen_opts, the names resolved (an unknown one first, as the
 * command line would meet it), then checked. */
static al_status gen_opts_from(const char *out, const al_gen_params *p, gen_opts *o) {
    *o = (gen_opts){
        .out = out, .arch = p->arch, .dim = p->dim, .layers = p->layers, .heads = p->heads,
        .kv_heads = p->kv_heads, .head_dim = p->head_dim, .ffn = p->ffn, .vocab = p->vocab,
        .ctx = p->ctx, .threads = p->n_threads, .swa = p->swa, .seed = p->seed,
        .experts = p->experts, .experts_used = p->experts_used, .ffn_exp = p->ffn_exp,
        .yarn = p->yarn, .ssm_conv = p->ssm_conv, .ssm_state = p->ssm_state,
        .ssm_heads = p->ssm_heads, .ssm_groups = p->ssm_groups,
        .full_attn = p->full_attn_interval, .mtp = p->mtp, .ssm_split = p->ssm_split,
        .q_lora = p->q_lora, .kv_lora = p->kv_lora, .head_dim_swa = p->head_dim_swa,
        .swa_period = p->swa_period, .shared_kv = p->shared_kv, .ple = p->ple,
        .rope_base = p->rope_base, .tied = p->tied, .pure = p->pure, .progress = p->progress,
        .progress_user = p->progress_user};
    char names[256];
    if (p->arch && !(o->ad = arch_find(p->arch)))
        return al_error(AL_ERR_ARG, "arch %s: expected one of %s", p->arch,
                        arch_names(names, sizeof names));
    if (p->type && !(o->scheme = quant_scheme_find(p->type)))
        return al_error(AL_ERR_ARG, "unknown type '%s' (one of %s)", p->type,
                        quant_scheme_names(names, sizeof names));
    return gen_check(o);
}

/* ---- the vocabulary and the metadata ------------------------------------------------- */

enum { N_SPECIAL = 3, N_BYTES = 256 };

/* Token i of the vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
 * then distinct filler pieces: words of letters a..z in bijective base 26, alternately
 * with and without the SentencePiece word marker U+2581. */
static void token_text(int64_t i, char *buf, size_t size) {
    static const char *const special[N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    if (i < N_SPECIAL) {
        snprintf(buf, size, "%s", special[i]);
        return;
    }
    if (i < N_SPECIAL + N_BYTES) {
        snprintf(buf, size, "<0x%02X>", (unsigned)(i - N_SPECIAL));
        return;
    }
    int64_t k = i - N_SPECIAL - N_BYTES;
    char word[16];
    int n = 0;
    for (int64_t v = k / 2 + 1; v > 0 && n < (int)sizeof word; v = (v - 1) / 26)
        word[n++] = (char)('a' + (v - 1) % 26);
    size_t len = 0;
    if (k % 2 == 0) len = (size_t)snprintf(buf, size, "\xe2\x96\x81"); /* U+2581 */
    for (int j = n - 1; j >= 0 && len + 1 < size; j--) buf[len++] = word[j];
    buf[len] = '\0';
}

static al_status gen_vocab(gguf_writer *w, int64_t n_vocab) {
    char **toks = al_calloc((size_t)n_vocab, sizeof *toks);
    float *scores = al_calloc((size_t)n_vocab, sizeof *scores);
    int32_t *types = al_calloc((size_t)n_vocab, sizeof *types);
    al_status st = AL_OK;
    if (!toks || !scores || !types) st = al_error(AL_ERR_NOMEM, "out of memory for the vocabulary");
    for (int64_t i = 0; st == AL_OK && i < n_vocab; i++) {
        char buf[32];
        token_text(i, buf, sizeof buf);
        const size_t len = strlen(buf) + 1;
        if ((toks[i] = al_malloc(len))) memcpy(toks[i], buf, len);
        else st = al_error(AL_ERR_NOMEM, "out of memory for the vocabulary");
        /* token_type: 1 normal, 2 unknown, 3 control, 6 byte; later pieces merge last */
        types[i] = i == 0 ? 2 : i < N_SPECIAL ? 3 : i < N_SPECIAL + N_BYTES ? 6 : 1;
        scores[i] = i < N_SPECIAL + N_BYTES ? 0.0f : -(float)(i - N_SPECIAL - N_BYTES);
    }
    if (st == AL_OK) st = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (st == AL_OK)
        st = gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", (const char *const *)toks, NULL,
                                       (uint64_t)n_vocab);
    if (st == AL_OK) st = gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_VT_F32, scores, (uint64_t)n_vocab);
    if (st == AL_OK) st = gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_VT_I32, types, (uint64_t)n_vocab);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == AL_OK) st = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    for (int64_t i = 0; toks && i < n_vocab; i++) al_free(toks[i]);
    al_free(toks);
    al_free(scores);
    al_free(types);
    return st;
}

/* The delta-net sizes, the full-attention period and the rope sections of a hybrid
 * architecture (a partial rope: a quarter of each head turns, as in Qwen3.5). */
static al_status gen_hybrid_metadata(gguf_writer *w, const gen_opts *o) {
    const struct { const char *suffix; int64_t v; } u32s[] = {
        {"ssm.conv_kernel", o->ssm_conv}, {"ssm.state_size", o->ssm_state},
        {"ssm.inner_size", o->ssm_heads * o->ssm_state}, {"ssm.time_step_rank", o->ssm_heads},
        {"ssm.group_count", o->ssm_groups}, {"full_attention_interval", o->full_attn},
    };
    char key[128];
    al_status st = AL_OK;
    for (size_t i = 0; st == AL_OK && i < sizeof u32s / sizeof *u32s; i++) {
        snprintf(key, sizeof key, "%s.%s", o->arch, u32s[i].suffix);
        st = gguf_writer_set_u32(w, key, (uint32_t)u32s[i].v);
    }
    snprintf(key, sizeof key, "%s.nextn_predict_layers", o->arch);
    if (st == AL_OK && o->mtp) st = gguf_writer_set_u32(w, key, (uint32_t)o->mtp);
    if (o->ad->flags & ARCH_GDN_GROUPED) return st; /* qwen3next: a plain partial rope */
    const int32_t pairs = (int32_t)(gen_rot(o) / 2);
    const int32_t sec[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
    snprintf(key, sizeof key, "%s.rope.dimension_sections", o->arch);
    if (st == AL_OK) st = gguf_writer_set_array(w, key, GGUF_VT_I32, sec, 4);
    return st;
}

/* The routers and the leading dense layers: glm4moe as GLM-4.5-Air (one dense layer,
 * one shared expert, sigmoid scores normalized and scaled by 2.5); deepseek2 as
 * DeepSeek-V2-Lite (two shared experts, softmax probabilities as they are) or, with
 * q_lora, as DeepSeek-V3 (one shared expert, sigmoid scores plus a bias, normalized
 * and scaled by 2.5, experts in 4 groups of which 2 are used). */
static al_status gen_router_metadata(gguf_writer *w, const gen_opts *o) {
    char key[128];
    const bool v3 = gen_mla_v3(o), sig = gen_glm(o) || v3;
    const bool groups = v3 && o->experts % 4 == 0 && o->experts_used <= o->experts / 2;
    const struct { const char *suffix; int64_t v; } u32s[] = {
        {"leading_dense_block_count", GEN_DENSE_LEAD},
        {"expert_shared_count", gen_mla(o) && !v3 ? 2 : 1}, {"expert_gating_func", sig ? 2 : 1},
        {"expert_group_count", groups ? 4 : 0}, {"expert_group_used_count", groups ? 2 : 0}};
    al_status st = AL_OK;
    for (size_t i = 0; st == AL_OK && i < sizeof u32s / sizeof *u32s; i++) {
        snprintf(key, sizeof key, "%s.%s", o->arch, u32s[i].suffix);
        if (u32s[i].v) st = gguf_writer_set_u32(w, key, (uint32_t)u32s[i].v);
    }
    snprintf(key, sizeof key, "%s.expert_weights_norm", o->arch);
    if (st == AL_OK) st = gguf_writer_set_bool(w, key, sig);
    snprintf(key, sizeof key, "%s.expert_weights_scale", o->arch);
    if (st == AL_OK) st = gguf_writer_set_f32(w, key, sig ? 2.5f : 1.0f);
    return st;
}

/* Latent attention's sizes; the cached row is key_length (kv_lora + rope), its value
 * part value_length, as llama.cpp's converter writes them. */
static al_status gen_mla_metadata(gguf_writer *w, const gen_opts *o) {
    const struct { const char *suffix; int64_t v; } u32s[] = {
        {"attention.q_lora_rank", o->q_lora}, {"attention.kv_lora_rank", o->kv_lora},
        {"attention.key_length", o->kv_lora + gen_mla_rot(o)},
        {"attention.value_length", o->kv_lora}, {"attention.key_length_mla", gen_head_dim(o)},
        {"attention.value_length_mla", gen_mla_v(o)}};
    char key[128];
    al_status st = AL_OK;
    /* q_lora_rank even when 0: llama.cpp requires it but of DeepSeek-V2-Lite's own
     * layer counts */
    for (size_t i = 0; st == AL_OK && i < sizeof u32s / sizeof *u32s; i++) {
        snprintf(key, sizeof key, "%s.%s", o->arch, u32s[i].suffix);
        st = gguf_writer_set_u32(w, key, (uint32_t)u32s[i].v);
    }
    return st;
}

/* gemma4's: the sliding layers' sizes and pattern (an array, as its files have it), the
 * shared caches, the per-layer inputs' width, a soft-cap, and the feed-forward widths
 * per layer where layers share caches (theirs twice as wide) */
static al_status gen_g4_metadata(gguf_writer *w, const gen_opts *o) {
    const struct { const char *suffix; int64_t v; } u32s[] = {
        {"attention.key_length_swa", o->head_dim_swa},
        {"attention.value_length_swa", o->head_dim_swa},
        {"rope.dimension_count_swa", o->head_dim_swa}, {"attention.shared_kv_layers", o->shared_kv},
        {"embedding_length_per_layer_input", o->ple}};
    char key[128];
    al_status st = AL_OK;
    for (size_t i = 0; st == AL_OK && i < sizeof u32s / sizeof *u32s; i++) {
        snprintf(key, sizeof key, "%s.%s", o->arch, u32s[i].suffix);
        st = gguf_writer_set_u32(w, key, (uint32_t)u32s[i].v);
    }
    bool swa[1024];
    int32_t ff[1024];
    for (int64_t il = 0; il < o->layers; il++) {
        swa[il] = gen_swa_layer(o, il);
        ff[il] = (int32_t)(gen_shared(o, il) ? 2 * o->ffn : o->ffn);
    }
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", o->arch);
    if (st == AL_OK) st = gguf_writer_set_array(w, key, GGUF_VT_BOOL, swa, (uint64_t)o->layers);
    snprintf(key, sizeof key, "%s.feed_forward_length", o->arch);
    if (st == AL_OK && o->shared_kv)
        st = gguf_writer_set_array(w, key, GGUF_VT_I32, ff, (uint64_t)o->layers);
    snprintf(key, sizeof key, "%s.final_logit_softcapping", o->arch);
    if (st == AL_OK) st = gguf_writer_set_f32(w, key, 30.0f);
    return st;
}

static al_status gen_metadata(gguf_writer *w, const gen_opts *o) {
    struct { const char *suffix; int64_t v; } u32s[] = {
        {"context_length", o->ctx},          {"embedding_length", o->dim},
        {"block_count", o->layers + o->mtp}, {"feed_forward_length", o->ffn},
        {"attention.head_count", o->heads},
        {"attention.head_count_kv", gen_mla(o) ? 1 : o->kv_heads},
        {"rope.dimension_count", gen_rot(o)},
    };
    char key[128];
    al_status st = gguf_writer_set_str(w, "general.architecture", o->arch);
    if (st == AL_OK) st = gguf_writer_set_str(w, "general.name", "anyllm random benchmark model");
    if (st == AL_OK)
        st = gguf_writer_set_str(w, "general.description", "random weights for benchmarks only, "
                                 "written by anyllm gen-model; not a language model");
    for (size_t i = 0; st == AL_OK && i < sizeof u32s / sizeof *u32s; i++) {
        /* gemma4's widths per layer: an array (gen_g4_metadata) */
        if (gen_g4(o) && o->shared_kv && !strcmp(u32s[i].suffix, "feed_forward_length")) continue;
        snprintf(key, sizeof key, "%s.%s", o->arch, u32s[i].suffix);
        st = gguf_writer_set_u32(w, key, (uint32_t)u32s[i].v);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", o->arch);
    if (st == AL_OK) st = gguf_writer_set_f32(w, key, (float)o->rope_base);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", o->arch);
    if (st == AL_OK) st = gguf_writer_set_f32(w, key, o->ad->norm_eps);
    snprintf(key, sizeof key, "%s.attention.key_length", o->arch);
    if (st == AL_OK && gen_mla(o)) st = gen_mla_metadata(w, o);
    else if (st == AL_OK && o->head_dim) st = gguf_writer_set_u32(w, key, (uint32_t)o->head_dim);
    /* other readers (llama.cpp) take V's head size from n_embd / n_head without it */
    snprintf(key, sizeof key, "%s.attention.value_length", o->arch);
    if (st == AL_OK && o->head_dim && !gen_mla(o)) st = gguf_writer_set_u32(w, key, (uint32_t)o->head_dim);
    const struct { const char *suffix; int64_t v; } moe[] = {
        {"expert_count", o->experts}, {"expert_used_count", o->experts_used},
        {"expert_feed_forward_length", o->ffn_exp},
    };
    for (size_t i = 0; st == AL_OK && o->experts && i < 3; i++) {
        snprintf(key, sizeof key, "%s.%s", o->arch, moe[i].suffix);
        st = gguf_writer_set_u32(w, key, (uint32_t)moe[i].v);
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", o->arch);
    if (st == AL_OK && o->yarn) st = gguf_writer_set_str(w, key, "yarn");
    snprintf(key, sizeof key, "%s.rope.scaling.factor", o->arch);
    if (st == AL_OK && o->yarn) st = gguf_writer_set_f32(w, key, (float)o->yarn);
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", o->arch);
    if (st == AL_OK && o->yarn) st = gguf_writer_set_u32(w, key, (uint32_t)o->ctx);
    /* DeepSeek-V2-Lite's: 0.1 times its mscale_all_dim of 0.707 */
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_log_multiplier", o->arch);
    if (st == AL_OK && o->yarn && gen_mla(o)) st = gguf_writer_set_f32(w, key, 0.0707f);
    snprintf(key, sizeof key, "%s.attention.sliding_window", o->arch);
    if (st == AL_OK && o->ad->flags & ARCH_SLIDING)
        st = gguf_writer_set_u32(w, key, (uint32_t)o->swa);
    if (st == AL_OK && o->full_attn) st = gen_hybrid_metadata(w, o);
    if (st == AL_OK && gen_dense_lead(o)) st = gen_router_metadata(w, o);
    if (st == AL_OK && gen_g4(o)) st = gen_g4_metadata(w, o);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (st == AL_OK) st = gguf_writer_set_u32(w, "general.file_type", o->scheme->ftype);
    if (st == AL_OK) st = gen_vocab(w, o->vocab);
    return st;
}

/* ---- tensors ------------------------------------------------------------------------- */

/* FILL_SCALE: 0.5 + |noise| (gemma4's output scales); FILL_ROPE: gemma4's proportional
 * rope factors, 1 for the first half of the pairs and 1e4 (next to no turning) after;
 * FILL_CONST: std everywhere */
typedef enum { FILL_RANDOM, FILL_ONES, FILL_NEGATIVE, FILL_SCALE, FILL_ROPE, FILL_CONST } fill_kind;

typedef struct gen_tensor {
    char name[64];
    int64_t ne[3];      /* ne[1] = 1 for a vector; ne[2] experts of a stacked tensor, or 1 */
    fill_kind fill;
    float std;          /* of FILL_RANDOM */
    uint32_t type;
    bool fell_back;
    int64_t layer;      /* the block it belongs to, or -1 */
} gen_tensor;

/* The row source: row `row` of tensor `id` from the seed alone. */
typedef struct gen_source {
    uint64_t seed, id;
    const gen_tensor *t;
} gen_source;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Triangular noise (the sum of two uniforms): bell-shaped enough for weights, cheap,
 * and scaled so its standard deviation is t->std (the triangle on [-a, a] has std
 * a / sqrt(6)). */
static void gen_row(void *ctx, int64_t row, float *dst, int64_t n) {
    const gen_source *g = ctx;
    if (g->t->fill == FILL_ONES || g->t->fill == FILL_ROPE || g->t->fill == FILL_CONST) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = g->t->fill == FILL_CONST ? g->t->std
                     : g->t->fill == FILL_ROPE && i >= n / 2 ? 1e4f : 1.0f;
        return;
    }
    uint64_t s = g->seed * 0xD1B54A32D192ED03ull ^ (g->id << 40) ^ (uint64_t)row;
    splitmix64(&s);
    const float a = g->t->std * 2.4494897f / 4294967296.0f;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = splitmix64(&s);
        dst[i] = ((float)(uint32_t)r + (float)(uint32_t)(r >> 32) - 4294967296.0f) * a;
        if (g->t->fill == FILL_NEGATIVE) dst[i] = -0.1f - fabsf(dst[i]);
        if (g->t->fill == FILL_SCALE) dst[i] = 0.5f + fabsf(dst[i]);
    }
}

static void add_tensor(gen_tensor *ts, int *n, int max, const char *name, int64_t ne0,
                       int64_t ne1, int64_t ne2, fill_kind fill, float std) {
    if (*n >= max) return;
    ts[*n] = (gen_tensor){.ne = {ne0, ne1, ne2}, .fill = fill, .std = std, .layer = -1};
    snprintf(ts[*n].name, sizeof ts[*n].name, "%s", name);
    (*n)++;
}

static int gen_dims(const gen_tensor *t) {
    return t->ne[2] > 1 ? 3 : t->ne[1] > 1 ? 2 : 1;
}

static int64_t gen_dim(const gen_opts *o, arch_dim d) {
    switch (d) {
    case D_ONE: return 1;
    case D_SCALAR: return 1;
    case D_PLE: return o->ple;
    case D_EMBD: return o->dim;
    case D_Q: return o->heads * gen_head_dim(o);
    case D_KV: return o->kv_heads * gen_head_dim(o);
    case D_HEAD: return gen_head_dim(o);
    case D_FF: return o->ffn;
    case D_N_HEAD: return o->heads;
    case D_EXPERT: return o->experts;
    case D_FF_EXP: return o->ffn_exp;
    case D_Q_GATE: return 2 * o->heads * gen_head_dim(o);
    case D_SSM_CONV: return 2 * o->ssm_groups * o->ssm_state + o->ssm_heads * o->ssm_state;
    case D_SSM_INNER: return o->ssm_heads * o->ssm_state;
    case D_SSM_STATE: return o->ssm_state;
    case D_SSM_VHEADS: return o->ssm_heads;
    case D_SSM_KERNEL: return o->ssm_conv;
    /* glm4moe: one expert's width; deepseek2: its shared experts' */
    case D_FF_SHEXP:
        return gen_glm(o) || gen_mla_v3(o) ? o->ffn_exp : gen_mla(o) ? 2 * o->ffn_exp : o->ffn;
    case D_Q_LORA: return o->q_lora;
    case D_KV_LORA: return o->kv_lora;
    case D_KV_A: return o->kv_lora + gen_mla_rot(o);
    case D_NOPE: return gen_head_dim(o) - gen_mla_rot(o);
    case D_V_MLA: return gen_mla_v(o);
    case D_Q_MLA: return o->heads * gen_head_dim(o);
    case D_O_MLA: return o->heads * gen_mla_v(o);
    case D_SSM_QKVZ: return 2 * o->ssm_groups * o->ssm_state + 2 * o->ssm_heads * o->ssm_state;
    case D_SSM_BA: return 2 * o->ssm_heads;
    }
    return 1;
}

/* A dimension of layer il's tensors: gemma4's sliding layers have heads of their own,
 * its shared layers a feed-forward twice as wide. */
static int64_t gen_layer_dim(const gen_opts *o, int64_t il, arch_dim d) {
    if (!gen_g4(o) || il >= o->layers) return gen_dim(o, d);
    const int64_t hd = gen_swa_layer(o, il) ? o->head_dim_swa : gen_head_dim(o);
    switch (d) {
    case D_Q: return o->heads * hd;
    case D_KV: return o->kv_heads * hd;
    case D_HEAD: return hd;
    case D_FF: return gen_shared(o, il) ? 2 * o->ffn : o->ffn;
    default: return gen_dim(o, d);
    }
}

/* gemma4's layer tensors: keys only where a layer keeps its cache, values only on the
 * sliding layers (the global ones take the keys' projection), the per-layer inputs'
 * where there are any. */
static bool gen_g4_writes(const gen_opts *o, const arch_tensor *at, int64_t il) {
    switch (at->slot) {
    case L_WK: case L_K_NORM: return !gen_shared(o, il);
    case L_WV: return !gen_shared(o, il) && gen_swa_layer(o, il);
    case L_PLE_GATE: case L_PLE_PROJ: case L_PLE_NORM: return o->ple > 0;
    case L_GATE_INP: case L_GATE_INP_S: case L_PRE_NORM_2: case L_POST_NORM_1: case L_POST_NORM_2:
    case L_GATE_EXPS: case L_UP_EXPS: case L_DOWN_EXPS: case L_DOWN_EXPS_S: return o->experts > 0;
    default: return true;
    }
}

/* Whether al_gen_model writes layer tensor `at`: qwen3next's optional projections come in
 * one of two layouts (--ssm-split). */
static bool gen_writes(const gen_opts *o, const arch_tensor *at, bool recr, bool dense) {
    if (!arch_where_has(at->where, recr, dense)) return false;
    if (gen_mla(o)) { /* one query form; V3's router bias */
        if (at->slot == L_WQ) return !o->q_lora;
        if (at->slot == L_WQ_A || at->slot == L_Q_A_NORM || at->slot == L_WQ_B) return o->q_lora;
        if (at->slot == L_EXP_PROBS_B) return gen_mla_v3(o);
    }
    if (!(o->ad->flags & ARCH_GDN_GROUPED)) return true;
    if (at->slot == L_SSM_IN) return !o->ssm_split;
    if (at->slot == L_SSM_QKV || at->slot == L_SSM_Z) return o->ssm_split;
    return true;
}

/* A next-token-prediction block's own tensors, after its attention and FFN: the
 * projection of [embedding | hidden state] and the norms of both. */
static void gen_plan_nextn(gen_tensor *ts, int *n, int max, int64_t il, int64_t dim) {
    static const char *const norms[] = {"enorm", "hnorm", "shared_head_norm"};
    char name[64];
    snprintf(name, sizeof name, "blk.%" PRId64 ".nextn.eh_proj.weight", il);
    add_tensor(ts, n, max, name, 2 * dim, dim, 1, FILL_RANDOM, 0.02f);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "blk.%" PRId64 ".nextn.%s.weight", il, norms[i]);
        add_tensor(ts, n, max, name, dim, 1, 1, FILL_ONES, 0);
    }
}

/* The tensors of the architecture's descriptor (arch.c), with their types under the
 * scheme: norms are ones, biases small, matrices ~0.02. The MTP blocks come last, so
 * that the trunk's tensors are the same with and without them. Returns the count (at
 * most max). */
static int gen_plan(const gen_opts *o, gen_tensor *ts, int max) {
    int n = 0;
    add_tensor(ts, &n, max, "token_embd.weight", o->dim, o->vocab, 1, FILL_RANDOM, 0.02f);
    add_tensor(ts, &n, max, "output_norm.weight", o->dim, 1, 1, FILL_ONES, 0);
    if (!o->tied)
        add_tensor(ts, &n, max, "output.weight", o->dim, o->vocab, 1, FILL_RANDOM, 0.02f);
    if (gen_g4(o)) { /* the global layers' rope factors, the per-layer inputs' tables */
        bool global = false;
        for (int64_t il = 0; il < o->layers; il++) global |= !gen_swa_layer(o, il);
        if (global)
            add_tensor(ts, &n, max, "rope_freqs.weight", gen_head_dim(o) / 2, 1, 1, FILL_ROPE, 0);
        const int64_t all = o->layers * o->ple;
        if (o->ple) {
            add_tensor(ts, &n, max, "per_layer_token_embd.weight", all, o->vocab, 1, FILL_RANDOM,
                       0.02f);
            add_tensor(ts, &n, max, "per_layer_model_proj.weight", o->dim, all, 1, FILL_RANDOM,
                       0.02f);
            add_tensor(ts, &n, max, "per_layer_proj_norm.weight", o->ple, 1, 1, FILL_ONES, 0);
        }
    }
    for (int64_t il = 0; il < o->layers + o->mtp; il++) {
        const int n0 = n;
        const bool recr = o->full_attn && il < o->layers && (il + 1) % o->full_attn != 0;
        const bool dense = il < gen_dense_lead(o);
        for (int k = 0; k < o->ad->n_layer_tensors; k++) {
            const arch_tensor *at = &o->ad->layer[k];
            if (!gen_writes(o, at, recr, dense) || (gen_g4(o) && !gen_g4_writes(o, at, il)))
                continue;
            const bool norm = arch_slot_is_norm(at->slot), vec = at->ne1 == D_ONE;
            char name[64];
            snprintf(name, sizeof name, "blk.%" PRId64 ".%s", il, at->name);
            /* the decay rate a = -exp(A_log) is negative: a state that grew would
             * not be a delta-net's */
            const fill_kind fill = norm ? FILL_ONES : at->slot == L_SSM_A ? FILL_NEGATIVE
                                   : at->slot == L_OUT_SCALE || at->slot == L_GATE_INP_S ||
                                             at->slot == L_DOWN_EXPS_S ? FILL_SCALE : FILL_RANDOM;
            add_tensor(ts, &n, max, name, gen_layer_dim(o, il, at->ne0),
                       gen_layer_dim(o, il, at->ne1), gen_layer_dim(o, il, at->ne2), fill,
                       norm ? 0 : vec ? 0.01f : 0.02f);
            if (ts[n - 1].fill == FILL_SCALE) ts[n - 1].std = 0.1f;
            /* gemma4 does not scale q.k: its trained Q/K norms do; norms of ones would
             * give scores of sqrt(head_dim) and a softmax that any rounding tips over */
            if (gen_g4(o) && (at->slot == L_Q_NORM || at->slot == L_K_NORM)) {
                ts[n - 1].fill = FILL_CONST;
                ts[n - 1].std = powf((float)gen_layer_dim(o, il, D_HEAD), -0.25f);
            }
            if (at->slot == L_SSM_CONV || at->slot == L_SSM_A) ts[n - 1].std = 0.5f;
        }
        if (il >= o->layers) gen_plan_nextn(ts, &n, max, il, o->dim);
        for (int i = n0; i < n; i++) ts[i].layer = il;
    }
    quant_model_desc m = {.n_layer = (int)o->layers, .n_attn_v = (int)o->layers,
                          .has_output = !o->tied, .pure = o->pure};
    for (int i = 0; i < n; i++) {
        const int64_t ne[4] = {ts[i].ne[0], ts[i].ne[1], ts[i].ne[2], 1};
        ts[i].type = quant_pick_type(o->scheme, &m, ts[i].name, gen_dims(&ts[i]), ne,
                                     AL_TYPE_F32, &ts[i].fell_back);
        /* llama.cpp convolves with f32 taps only */
        if (strstr(ts[i].name, "ssm_conv1d")) ts[i].type = AL_TYPE_F32;
    }
    return n;
}

/* Generates and writes one tensor, a chunk of rows at a time. */
static al_status gen_tensor_data(gguf_writer *w, const gen_opts *o, const gen_tensor *t, int id,
                                 uint8_t *buf, uint64_t buf_bytes) {
    const uint64_t row_bytes = quant_row_bytes(t->type, t->ne[0]);
    int64_t chunk = (int64_t)(buf_bytes / row_bytes);
    gen_source src = {.seed = (uint64_t)o->seed, .id = (uint64_t)id, .t = t};
    al_status st = AL_OK;
    const int64_t n_rows = t->ne[1] * t->ne[2];
    for (int64_t r = 0; r < n_rows && st == AL_OK; r += chunk) {
        const int64_t k = n_rows - r < chunk ? n_rows - r : chunk;
        st = quant_rows(t->type, t->ne[0], r, k, gen_row, &src, buf, (int)o->threads);
        if (st == AL_OK) st = gguf_writer_write(w, buf, row_bytes * (uint64_t)k);
    }
    return st;
}

static al_status gen_write(const gen_opts *o, gen_tensor *ts, int n, uint64_t *n_bytes) {
    gguf_writer *w = NULL;
    uint8_t *buf = NULL;
    uint64_t buf_bytes = 32u << 20, total = 0;
    al_status st = gguf_writer_create(&w);
    if (st == AL_OK) st = gen_metadata(w, o);
    for (int i = 0; st == AL_OK && i < n; i++) {
        st = gguf_writer_add_tensor(w, ts[i].name, gen_dims(&ts[i]), ts[i].ne, ts[i].type);
        const uint64_t rb = quant_row_bytes(ts[i].type, ts[i].ne[0]);
        if (rb > buf_bytes) buf_bytes = rb;
    }
    if (st == AL_OK && !(buf = al_malloc((size_t)buf_bytes)))
        st = al_error(AL_ERR_NOMEM, "out of memory for %" PRIu64 " bytes", buf_bytes);
    if (st == AL_OK) st = gguf_writer_open(w, o->out);
    for (int i = 0; st == AL_OK && i < n; i++) {
        st = gen_tensor_data(w, o, &ts[i], i, buf, buf_bytes);
        total += gguf_writer_tensor_bytes(w, (uint64_t)i);
        /* a block is done at its last tensor: the next is another block's, or none */
        if (st == AL_OK && o->progress && ts[i].layer >= 0 &&
            (i + 1 == n || ts[i + 1].layer != ts[i].layer))
            o->progress(o->progress_user, (int)ts[i].layer + 1, (int)(o->layers + o->mtp));
    }
    if (st == AL_OK) st = gguf_writer_close(w);
    gguf_writer_destroy(w);
    al_free(buf);
    *n_bytes = total;
    return st;
}


/* ---- the public calls ------------------------------------------------------------------ */

al_gen_params al_gen_default_params(void) {
    return (al_gen_params){.ctx = 4096, .seed = 1};
}

const char *al_gen_arch_names(char *buf, size_t size) {
    if (buf == NULL || size == 0) return "";
    return arch_names(buf, size);
}

al_status al_gen_model(const char *out_path, const al_gen_params *p, al_gen_report *report) {
    if (report) *report = (al_gen_report){0};
    if (out_path == NULL || p == NULL)
        return al_error(AL_ERR_ARG, "al_gen_model: NULL %s", out_path ? "params" : "out_path");
    gen_opts o;
    al_status st = gen_opts_from(out_path, p, &o);
    if (st != AL_OK) return st;
    /* the trunk's and the MTP blocks' tensors, the embeddings, the output and its norm */
    const int max = 7 + (o.ad->n_layer_tensors + 4) * (int)(o.layers + o.mtp);
    gen_tensor *ts = al_calloc((size_t)max, sizeof *ts);
    if (!ts) return al_error(AL_ERR_NOMEM, "out of memory for %d tensors", max);
    const int n = gen_plan(&o, ts, max);
    al_gen_report rep = {.type = o.scheme->name, .n_tensors = n, .n_threads = (int)o.threads};
    for (int i = 0; i < n; i++) {
        rep.n_params += (uint64_t)(ts[i].ne[0] * ts[i].ne[1] * ts[i].ne[2]);
        rep.n_fallback += ts[i].fell_back;
    }
    st = gen_write(&o, ts, n, &rep.n_bytes);
    al_free(ts);
    if (st == AL_OK && report) *report = rep;
    return st;
}
