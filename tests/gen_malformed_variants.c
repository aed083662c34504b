/* gen_malformed_variants.c: what each malformed model changes in the base model of
 * gen_malformed.c. One small function per variant; the table at the end names them.
 * Name prefixes: tok- (tokenizer), bpe- (byte-level BPE tokenizer), hp- (hyper-
 * parameters), shape- and type- (tensor shapes and types), val- (weight values),
 * tmpl- (chat template). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_malformed.h"

/* ---- helpers ------------------------------------------------------------------------ */

static void set_u32(gm_model *g, const char *k, uint32_t v) { gm_check(gguf_writer_set_u32(g->w, k, v), k); }
static void set_i32(gm_model *g, const char *k, int32_t v) { gm_check(gguf_writer_set_i32(g->w, k, v), k); }
static void set_u64(gm_model *g, const char *k, uint64_t v) { gm_check(gguf_writer_set_u64(g->w, k, v), k); }
static void set_f32(gm_model *g, const char *k, float v) { gm_check(gguf_writer_set_f32(g->w, k, v), k); }
static void set_str(gm_model *g, const char *k, const char *v) { gm_check(gguf_writer_set_str(g->w, k, v), k); }
static void del(gm_model *g, const char *k) { gguf_writer_remove(g->w, k); }

/* A string of n copies of unit (malloc'd). */
static char *repeat(const char *unit, size_t n) {
    size_t u = strlen(unit);
    char *s = malloc(u * n + 1);
    if (!s) {
        fprintf(stderr, "gen_malformed: out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) memcpy(s + i * u, unit, u);
    s[u * n] = 0;
    return s;
}

static void set_template_repeat(gm_model *g, const char *head, const char *unit, size_t n,
                                const char *tail) {
    char *body = repeat(unit, n);
    size_t len = strlen(head) + strlen(body) + strlen(tail) + 1;
    char *t = malloc(len);
    if (!t) exit(2);
    snprintf(t, len, "%s%s%s", head, body, tail);
    set_str(g, "tokenizer.chat_template", t);
    free(body);
    free(t);
}

static void set_all_types(gm_model *g, int32_t type) {
    for (int i = 0; i < g->n_tok; i++) g->ttype[i] = type;
    gm_write_vocab(g);
}

/* Sets every tensor's fill, or only those whose name contains part. */
static void fill_where(gm_model *g, const char *part, int fill) {
    for (int i = 0; i < g->n_t; i++)
        if (!part || strstr(g->t[i].name, part)) g->t[i].fill = fill;
}

static void type_where(gm_model *g, const char *part, uint32_t type) {
    for (int i = 0; i < g->n_t; i++)
        if (strstr(g->t[i].name, part)) g->t[i].type = type;
}

/* The hyper-parameters under another architecture's prefix. */
static void move_arch(gm_model *g, const char *arch) {
    static const char *const keys[] = {"context_length", "embedding_length", "block_count",
        "feed_forward_length", "attention.head_count", "attention.head_count_kv"};
    static const uint32_t vals[] = {128, GM_DIM, GM_LAYERS, GM_FFN, GM_HEADS, GM_KV_HEADS};
    char k[128];
    set_str(g, "general.architecture", arch);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        snprintf(k, sizeof k, "llama.%s", keys[i]);
        del(g, k);
        snprintf(k, sizeof k, "%s.%s", arch, keys[i]);
        set_u32(g, k, vals[i]);
    }
    del(g, "llama.rope.freq_base");
    del(g, "llama.attention.layer_norm_rms_epsilon");
}

/* ---- tokenizer: counts, scores, types ------------------------------------------------ */

static void tok_count_below_rows(gm_model *g) { g->n_tok -= 40; gm_write_vocab(g); }
static void tok_count_above_rows(gm_model *g) { gm_set_vocab_rows(g, 200); }
static void tok_count_one(gm_model *g) { gm_set_vocab_rows(g, 1); }
static void tok_empty(gm_model *g) { g->n_tok = 0; gm_write_vocab(g); }
static void tok_no_list(gm_model *g) { del(g, "tokenizer.ggml.tokens"); }
static void tok_scores_short(gm_model *g) { g->n_scores = g->n_tok - 1; gm_write_vocab(g); }
static void tok_scores_long(gm_model *g) { g->n_scores = g->n_tok + 50; gm_write_vocab(g); }
static void tok_scores_nan(gm_model *g) { g->score[300] = NAN; gm_write_vocab(g); }
static void tok_scores_inf(gm_model *g) {
    for (int i = 0; i < g->n_tok; i++) g->score[i] = i % 2 ? INFINITY : -INFINITY;
    gm_write_vocab(g);
}
static void tok_scores_strings(gm_model *g) {
    const char *s[] = {"a", "b"};
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.ggml.scores", s, NULL, 2), "scores");
}
static void tok_scores_scalar(gm_model *g) { set_f32(g, "tokenizer.ggml.scores", 1.0f); }
static void tok_types_short(gm_model *g) { g->n_types = 10; gm_write_vocab(g); }
static void tok_type_7(gm_model *g) { g->ttype[100] = 7; gm_write_vocab(g); }
static void tok_type_negative(gm_model *g) { g->ttype[100] = -1; gm_write_vocab(g); }
static void tok_type_huge(gm_model *g) { g->ttype[5] = INT32_MAX; gm_write_vocab(g); }
static void tok_types_user(gm_model *g) { set_all_types(g, GM_TOK_USER); }
static void tok_types_control(gm_model *g) { set_all_types(g, GM_TOK_CONTROL); }
static void tok_types_unused(gm_model *g) { set_all_types(g, GM_TOK_UNUSED); }
static void tok_types_undefined(gm_model *g) { set_all_types(g, 0); }
static void tok_types_byte(gm_model *g) { set_all_types(g, GM_TOK_BYTE); }
static void tok_types_unknown(gm_model *g) { set_all_types(g, GM_TOK_UNKNOWN); }
static void tok_types_u8(gm_model *g) {
    uint8_t t[GM_MAX_TOKENS];
    for (int i = 0; i < g->n_tok; i++) t[i] = (uint8_t)g->ttype[i];
    gm_check(gguf_writer_set_array(g->w, "tokenizer.ggml.token_type", GGUF_VT_U8, t,
                                   (uint64_t)g->n_tok), "types");
}
/* No byte fallback and no unknown token: text outside the letters cannot be spelt. */
static void tok_no_fallback(gm_model *g) {
    for (int i = 0; i < g->n_tok; i++)
        if (g->ttype[i] == GM_TOK_BYTE || g->ttype[i] == GM_TOK_UNKNOWN) g->ttype[i] = GM_TOK_NORMAL;
    gm_write_vocab(g);
    set_i32(g, "tokenizer.ggml.unknown_token_id", -1);
}

/* ---- tokenizer: special ids ----------------------------------------------------------- */

static void tok_bos_range(gm_model *g) { set_u32(g, "tokenizer.ggml.bos_token_id", 100000); }
static void tok_bos_negative(gm_model *g) { set_i32(g, "tokenizer.ggml.bos_token_id", -1); }
static void tok_bos_string(gm_model *g) { set_str(g, "tokenizer.ggml.bos_token_id", "1"); }
static void tok_bos_f32(gm_model *g) { set_f32(g, "tokenizer.ggml.bos_token_id", 1.5f); }
static void tok_eos_count(gm_model *g) { set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)g->n_tok); }
static void tok_eos_negative(gm_model *g) { set_i32(g, "tokenizer.ggml.eos_token_id", -7); }
static void tok_unk_u64(gm_model *g) { set_u64(g, "tokenizer.ggml.unknown_token_id", 1ull << 40); }
static void tok_eot_range(gm_model *g) { set_u32(g, "tokenizer.ggml.eot_token_id", UINT32_MAX); }
static void tok_pad_negative(gm_model *g) { set_i32(g, "tokenizer.ggml.padding_token_id", INT32_MIN); }
static void tok_add_eos_none(gm_model *g) {
    set_i32(g, "tokenizer.ggml.eos_token_id", -1);
    gm_check(gguf_writer_set_bool(g->w, "tokenizer.ggml.add_eos_token", true), "add eos");
}
static void tok_add_bos_u32(gm_model *g) { set_u32(g, "tokenizer.ggml.add_bos_token", 7); }
/* BOS and EOS are byte tokens and <unk> is a letter: odd, not wrong. */
static void tok_special_ids_odd(gm_model *g) {
    set_u32(g, "tokenizer.ggml.bos_token_id", 10);
    set_u32(g, "tokenizer.ggml.eos_token_id", 10);
    set_u32(g, "tokenizer.ggml.unknown_token_id", 270);
}

/* ---- tokenizer: token texts and models -------------------------------------------------- */

static void tok_empty_strings(gm_model *g) {
    for (int i = 300; i < 310; i++) gm_token_set(g, i, "", 0);
    gm_write_vocab(g);
}
static void tok_huge_token(gm_model *g) {
    char *s = repeat("a", 1 << 20);
    gm_token_set(g, 310, s, 1 << 20);
    free(s);
    g->ttype[310] = GM_TOK_USER; /* matched in raw text: the longest special */
    gm_write_vocab(g);
}
static void tok_invalid_utf8(gm_model *g) {
    static const char *const bad[] = {"\xff", "\xc0\x80", "\x80", "\xe2\x96", "\xed\xa0\x80",
                                      "\xf4\x90\x80\x80", "\xe2\x96\x81\xff", "a\xc3"};
    for (int i = 0; i < 8; i++) gm_token_set(g, 300 + i, bad[i], strlen(bad[i]));
    g->ttype[301] = GM_TOK_USER;
    g->ttype[302] = GM_TOK_CONTROL;
    gm_write_vocab(g);
}
static void tok_nul_in_token(gm_model *g) {
    gm_token_set(g, 300, "a\0b", 3);
    gm_token_set(g, 301, "\0", 1);
    g->ttype[301] = GM_TOK_USER;
    gm_write_vocab(g);
}
static void tok_duplicate(gm_model *g) {
    gm_token_set(g, 320, g->tok[321], g->tok_len[321]);
    gm_write_vocab(g);
}
static void tok_duplicate_empty(gm_model *g) {
    gm_token_set(g, 300, "[EMPTY_301]", 11); /* the name an empty token 301 gets */
    gm_token_set(g, 301, "", 0);
    gm_write_vocab(g);
}
static void tok_user_overlap(gm_model *g) {
    /* user tokens that are prefixes and suffixes of each other and of the markers */
    const char *u[] = {"<", "<|", "|>", "<|im", "im_start|>", "Hel", "o w"};
    for (int i = 0; i < 7; i++) {
        gm_token_set(g, 300 + i, u[i], strlen(u[i]));
        g->ttype[300 + i] = GM_TOK_USER;
    }
    gm_write_vocab(g);
}
static void tok_model_unknown(gm_model *g) { set_str(g, "tokenizer.ggml.model", "bert"); }
static void tok_model_empty(gm_model *g) { set_str(g, "tokenizer.ggml.model", ""); }
static void tok_model_missing(gm_model *g) { del(g, "tokenizer.ggml.model"); }
static void tok_model_u32(gm_model *g) { set_u32(g, "tokenizer.ggml.model", 1); }
static void tok_spm_pre(gm_model *g) { set_str(g, "tokenizer.ggml.pre", "no-such-pre"); }
static void tok_tokens_u32(gm_model *g) {
    uint32_t x[4] = {1, 2, 3, 4};
    gm_check(gguf_writer_set_array(g->w, "tokenizer.ggml.tokens", GGUF_VT_U32, x, 4), "tokens");
}

/* ---- byte-level BPE --------------------------------------------------------------------- */

/* GPT-2's spelling of a byte as a code point, written as UTF-8. */
static size_t byte_text(int b, char *out) {
    int n = 0, cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int c = 0; c < b; c++)
            n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static const char *const k_merges[] = {"H e", "l l", "He ll", "Hell o", "\xc4\xa0 w", "o r",
                                       "\xc4\xa0w or", "l d", "\xc4\xa0wor ld"};

/* Replaces the vocabulary by a valid byte-level BPE one (gpt2, default pre-tokenizer):
 * the 256 byte spellings, the merges' results and three control tokens. */
static void bpe_base(gm_model *g) {
    for (int i = 0; i < g->n_tok; i++) free(g->tok[i]);
    g->n_tok = 0;
    for (int b = 0; b < 256; b++) {
        char s[4];
        gm_token(g, s, byte_text(b, s), 0, GM_TOK_NORMAL);
    }
    const char *words[] = {"He", "ll", "Hell", "Hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld",
                           "\xc4\xa0world"};
    for (int i = 0; i < 9; i++) gm_token(g, words[i], strlen(words[i]), 0, GM_TOK_NORMAL);
    gm_token(g, "<|endoftext|>", 13, 0, GM_TOK_CONTROL);
    gm_token(g, "<|im_start|>", 12, 0, GM_TOK_CONTROL);
    gm_token(g, "<|im_end|>", 10, 0, GM_TOK_CONTROL);
    gm_write_vocab(g);
    set_str(g, "tokenizer.ggml.model", "gpt2");
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.ggml.merges", k_merges, NULL, 9), "merges");
    set_u32(g, "tokenizer.ggml.bos_token_id", 265);
    set_u32(g, "tokenizer.ggml.eos_token_id", 265);
    del(g, "tokenizer.ggml.unknown_token_id");
    gm_check(gguf_writer_set_bool(g->w, "tokenizer.ggml.add_bos_token", false), "add bos");
    gm_set_vocab_rows(g, g->n_tok);
}

static void set_merges(gm_model *g, const char *const *m, const uint64_t *lens, int n) {
    bpe_base(g);
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.ggml.merges", m, lens, (uint64_t)n), "merges");
}
static void bpe_merges_absent(gm_model *g) {
    const char *m[] = {"x y", "zz qq", "H e", "\xc4\xa0 w", "Hello \xc4\xa0world", "e l"};
    set_merges(g, m, NULL, 6);
}
static void bpe_merges_malformed(gm_model *g) {
    const char *m[] = {"H e", "abc", "", " ", "a ", "  ", "\xff \xfe"};
    set_merges(g, m, NULL, 7);
}
static void bpe_merges_spaces(gm_model *g) {
    const char *m[] = {"  a", "a  b", "H e"}; /* a left part that is a space; a double space */
    set_merges(g, m, NULL, 3);
}
static void bpe_merges_nul(gm_model *g) {
    const char *m[] = {"H\0 e", "l \0"};
    const uint64_t lens[] = {4, 3};
    set_merges(g, m, lens, 2);
}
static void bpe_merges_repeated(gm_model *g) {
    const char *m[] = {"l l", "l l", "l l", "H e", "H e", "He ll", "He ll"};
    set_merges(g, m, NULL, 7);
}
static void bpe_no_merges(gm_model *g) { bpe_base(g); del(g, "tokenizer.ggml.merges"); }
static void bpe_merges_u32(gm_model *g) {
    bpe_base(g);
    uint32_t x[2] = {1, 2};
    gm_check(gguf_writer_set_array(g->w, "tokenizer.ggml.merges", GGUF_VT_U32, x, 2), "merges");
}
static void bpe_pre_unknown(gm_model *g) { bpe_base(g); set_str(g, "tokenizer.ggml.pre", "foo-bar"); }
static void bpe_pre_empty(gm_model *g) { bpe_base(g); set_str(g, "tokenizer.ggml.pre", ""); }
static void bpe_pre_long(gm_model *g) {
    bpe_base(g);
    char *s = repeat("x", 300);
    set_str(g, "tokenizer.ggml.pre", s);
    free(s);
}
static void bpe_pre_u32(gm_model *g) { bpe_base(g); set_u32(g, "tokenizer.ggml.pre", 3); }
static void bpe_pre_llama3(gm_model *g) { bpe_base(g); set_str(g, "tokenizer.ggml.pre", "llama-bpe"); }
static void bpe_missing_bytes(gm_model *g) {
    bpe_base(g);
    for (int b = 0; b < 256; b += 2) gm_token_set(g, b, "", 0); /* half the alphabet gone */
    gm_write_vocab(g);
}
static void bpe_invalid_utf8(gm_model *g) {
    bpe_base(g);
    gm_token_set(g, 256, "\xff\xfe", 2);
    gm_token_set(g, 257, "\xc4", 1);
    gm_write_vocab(g);
    const char *m[] = {"\xff \xfe", "H e", "\xc4 \xa0"};
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.ggml.merges", m, NULL, 3), "merges");
}
static void bpe_types_user(gm_model *g) { bpe_base(g); set_all_types(g, GM_TOK_USER); }
static void bpe_types_byte(gm_model *g) { bpe_base(g); set_all_types(g, GM_TOK_BYTE); }
static void bpe_scores_absent(gm_model *g) {
    bpe_base(g);
    del(g, "tokenizer.ggml.scores");
    del(g, "tokenizer.ggml.token_type");
}

/* ---- hyper-parameters ----------------------------------------------------------------- */

#define HP_U32(fn, key, v) static void fn(gm_model *g) { set_u32(g, "llama." key, v); }
#define HP_F32(fn, key, v) static void fn(gm_model *g) { set_f32(g, "llama." key, v); }
HP_U32(hp_heads_0, "attention.head_count", 0)
HP_U32(hp_heads_huge, "attention.head_count", 1u << 30)
HP_U32(hp_heads_max, "attention.head_count", UINT32_MAX)
HP_U32(hp_kv_0, "attention.head_count_kv", 0)
HP_U32(hp_kv_above_heads, "attention.head_count_kv", 8)
HP_U32(hp_heads_not_multiple_kv, "attention.head_count_kv", 3)
HP_U32(hp_head_dim_mismatch, "attention.key_length", 16)
HP_U32(hp_head_dim_small, "attention.key_length", 4)
HP_U32(hp_head_dim_0, "attention.key_length", 0)
HP_U32(hp_head_dim_huge, "attention.key_length", 1u << 30)
HP_U32(hp_value_length, "attention.value_length", 3)
HP_U32(hp_rope_dim_odd, "rope.dimension_count", 7)
HP_U32(hp_rope_dim_above, "rope.dimension_count", 16)
HP_U32(hp_rope_dim_0, "rope.dimension_count", 0)
HP_U32(hp_rope_dim_2, "rope.dimension_count", 2)
HP_U32(hp_ctx_0, "context_length", 0)
HP_U32(hp_ctx_1, "context_length", 1)
HP_U32(hp_ctx_huge, "context_length", 1u << 30)
HP_F32(hp_rope_base_0, "rope.freq_base", 0.0f)
HP_F32(hp_rope_base_nan, "rope.freq_base", NAN)
HP_F32(hp_rope_base_negative, "rope.freq_base", -10000.0f)
HP_F32(hp_rope_base_inf, "rope.freq_base", INFINITY)
HP_F32(hp_rope_base_tiny, "rope.freq_base", 1e-38f)
HP_F32(hp_eps_0, "attention.layer_norm_rms_epsilon", 0.0f)
HP_F32(hp_eps_nan, "attention.layer_norm_rms_epsilon", NAN)
HP_F32(hp_eps_negative, "attention.layer_norm_rms_epsilon", -1e-5f)
HP_F32(hp_eps_huge, "attention.layer_norm_rms_epsilon", 1e30f)
HP_F32(hp_eps_denormal, "attention.layer_norm_rms_epsilon", 1e-40f)
HP_U32(hp_blocks_0, "block_count", 0)
HP_U32(hp_blocks_3, "block_count", 3)
HP_U32(hp_blocks_1, "block_count", 1)
HP_U32(hp_blocks_huge, "block_count", 1u << 30)
HP_U32(hp_blocks_max, "block_count", UINT32_MAX)
HP_U32(hp_ffn_mismatch, "feed_forward_length", 96)
HP_U32(hp_ffn_0, "feed_forward_length", 0)
HP_U32(hp_dim_0, "embedding_length", 0)
HP_U32(hp_dim_mismatch, "embedding_length", 64)
HP_U32(hp_dim_huge, "embedding_length", 1u << 30)
static void hp_ctx_u64(gm_model *g) { set_u64(g, "llama.context_length", 1ull << 40); }
static void hp_heads_not_dividing(gm_model *g) {
    set_u32(g, "llama.attention.head_count", 5);
    set_u32(g, "llama.attention.head_count_kv", 5);
}
static void hp_heads_negative(gm_model *g) { set_i32(g, "llama.attention.head_count", -4); }
static void hp_heads_string(gm_model *g) { set_str(g, "llama.attention.head_count", "4"); }
static void hp_rope_base_string(gm_model *g) { set_str(g, "llama.rope.freq_base", "1e4"); }
static void hp_heads_f32(gm_model *g) { set_f32(g, "llama.attention.head_count", 4.0f); }
static void hp_no_dim(gm_model *g) { del(g, "llama.embedding_length"); }
static void hp_no_heads(gm_model *g) { del(g, "llama.attention.head_count"); }
static void hp_no_kv_heads(gm_model *g) { del(g, "llama.attention.head_count_kv"); }
static void hp_scaling_yarn(gm_model *g) { set_str(g, "llama.rope.scaling.type", "yarn"); }
static void hp_scaling_factor_0(gm_model *g) {
    set_str(g, "llama.rope.scaling.type", "linear");
    set_f32(g, "llama.rope.scaling.factor", 0.0f);
}
static void hp_scaling_factor_nan(gm_model *g) {
    set_str(g, "llama.rope.scaling.type", "linear");
    set_f32(g, "llama.rope.scaling.factor", NAN);
}
static void hp_scale_linear_huge(gm_model *g) { set_f32(g, "llama.rope.scale_linear", 1e9f); }
static void hp_arch_unknown(gm_model *g) { set_str(g, "general.architecture", "gptj"); }
static void hp_arch_empty(gm_model *g) { set_str(g, "general.architecture", ""); }
static void hp_arch_missing(gm_model *g) { del(g, "general.architecture"); }
static void hp_arch_u32(gm_model *g) { set_u32(g, "general.architecture", 1); }
static void hp_arch_long(gm_model *g) {
    char *s = repeat("llama", 100);
    set_str(g, "general.architecture", s);
    free(s);
}
static void hp_qwen2_no_bias(gm_model *g) { move_arch(g, "qwen2"); }
static void hp_qwen2_bad_bias(gm_model *g) {
    move_arch(g, "qwen2");
    const int64_t kvd = GM_KV_HEADS * (GM_DIM / GM_HEADS);
    for (int il = 0; il < GM_LAYERS; il++) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.attn_q.bias", il);
        gm_add(g, n, 1, GM_DIM, 1, GM_FILL_RANDOM);
        snprintf(n, sizeof n, "blk.%d.attn_k.bias", il);
        gm_add(g, n, 1, kvd, 1, GM_FILL_RANDOM);
        snprintf(n, sizeof n, "blk.%d.attn_v.bias", il);
        gm_add(g, n, 1, GM_DIM, 1, GM_FILL_NAN); /* kvd expected */
    }
}

/* ---- tensor shapes and types ---------------------------------------------------------- */

static void set_shape(gm_model *g, const char *name, int n_dims, int64_t a, int64_t b,
                      int64_t c) {
    gm_tensor *t = gm_find(g, name);
    t->n_dims = (uint32_t)n_dims;
    t->ne[0] = a;
    t->ne[1] = b;
    t->ne[2] = c;
}
static void shape_embd_transposed(gm_model *g) { set_shape(g, "token_embd.weight", 2, g->n_tok, GM_DIM, 1); }
static void shape_gate_transposed(gm_model *g) { set_shape(g, "blk.1.ffn_gate.weight", 2, GM_FFN, GM_DIM, 1); }
static void shape_wk_as_wq(gm_model *g) { set_shape(g, "blk.0.attn_k.weight", 2, GM_DIM, GM_DIM, 1); }
static void shape_wq_1d(gm_model *g) { set_shape(g, "blk.0.attn_q.weight", 1, GM_DIM * GM_DIM, 1, 1); }
static void shape_wk_3d(gm_model *g) { set_shape(g, "blk.0.attn_k.weight", 3, GM_DIM, 8, 2); }
static void shape_wq_4d_ones(gm_model *g) {
    set_shape(g, "blk.0.attn_q.weight", 4, GM_DIM, GM_DIM, 1);
}
static void shape_norm_2d(gm_model *g) { set_shape(g, "blk.0.attn_norm.weight", 2, GM_DIM, 2, 1); }
static void shape_norm_2d_one(gm_model *g) { set_shape(g, "output_norm.weight", 2, GM_DIM, 1, 1); }
static void shape_norm_short(gm_model *g) { set_shape(g, "blk.1.ffn_norm.weight", 1, GM_DIM - 1, 1, 1); }
static void shape_output_rows(gm_model *g) { set_shape(g, "output.weight", 2, GM_DIM, 100, 1); }
static void shape_zero_dim(gm_model *g) { set_shape(g, "blk.0.ffn_down.weight", 2, GM_FFN, 0, 1); }
static void shape_missing_embd(gm_model *g) { gm_remove(g, "token_embd.weight"); }
static void shape_missing_out_norm(gm_model *g) { gm_remove(g, "output_norm.weight"); }
static void shape_missing_down(gm_model *g) { gm_remove(g, "blk.1.ffn_down.weight"); }
static void shape_missing_wq(gm_model *g) { gm_remove(g, "blk.0.attn_q.weight"); }
static void shape_tied_output(gm_model *g) { gm_remove(g, "output.weight"); }
static void shape_no_tensors(gm_model *g) { g->n_t = 0; }
static void shape_extra(gm_model *g) {
    gm_add(g, "blk.7.attn_q.weight", 2, GM_DIM, GM_DIM, GM_FILL_RANDOM);
    gm_add(g, "something.else", 3, 4, 4, GM_FILL_NAN)->ne[2] = 4;
}
static void shape_rope_freqs_short(gm_model *g) { gm_add(g, "rope_freqs.weight", 1, 3, 1, GM_FILL_ONES); }
static void shape_rope_freqs_nan(gm_model *g) {
    gm_add(g, "rope_freqs.weight", 1, GM_DIM / GM_HEADS / 2, 1, GM_FILL_ALL_NAN);
}
static void shape_rope_freqs_zero(gm_model *g) {
    gm_add(g, "rope_freqs.weight", 1, GM_DIM / GM_HEADS / 2, 1, GM_FILL_ZERO);
}
static void type_norm_q8_0(gm_model *g) { type_where(g, "attn_norm", AL_TYPE_Q8_0); }
static void type_norm_q4_0(gm_model *g) { type_where(g, "norm", AL_TYPE_Q4_0); }
static void type_embd_q4_0(gm_model *g) { type_where(g, "token_embd", AL_TYPE_Q4_0); }
static void type_wq_f16(gm_model *g) { type_where(g, "attn_q", AL_TYPE_F16); }
static void type_all_bf16(gm_model *g) { type_where(g, ".", AL_TYPE_BF16); }
static void type_norms_f16(gm_model *g) { type_where(g, "norm", AL_TYPE_F16); }
static void type_mixed(gm_model *g) {
    type_where(g, "attn_k", AL_TYPE_Q5_0);
    type_where(g, "attn_v", AL_TYPE_Q5_1);
    type_where(g, "ffn_up", AL_TYPE_Q4_1);
    type_where(g, "output.", AL_TYPE_Q8_0);
}
static void type_row_partial_block(gm_model *g) {
    type_where(g, "token_embd", AL_TYPE_Q4_0);
    g->patch_name = strdup("token_embd.weight");
    g->patch_ne0 = 33;
}
static void type_f32_row_longer(gm_model *g) {
    g->patch_name = strdup("output.weight");
    g->patch_ne0 = 40;
}
static void type_q8_0_bad_scales(gm_model *g) {
    type_where(g, "blk.", AL_TYPE_Q8_0);
    type_where(g, "token_embd", AL_TYPE_Q8_0);
    fill_where(g, "blk.0", GM_FILL_BAD_SCALE);
    fill_where(g, "token_embd", GM_FILL_BAD_SCALE);
}
static void type_q4_0_bad_scales(gm_model *g) {
    type_where(g, ".", AL_TYPE_Q4_0);
    fill_where(g, "output", GM_FILL_BAD_SCALE);
}

/* ---- weight values ---------------------------------------------------------------------- */

static void val_embd_nan(gm_model *g) { fill_where(g, "token_embd", GM_FILL_NAN); }
static void val_embd_inf(gm_model *g) { fill_where(g, "token_embd", GM_FILL_INF); }
static void val_wq_inf(gm_model *g) { fill_where(g, "attn_q", GM_FILL_INF); }
static void val_all_huge(gm_model *g) { fill_where(g, NULL, GM_FILL_HUGE); }
static void val_all_denormal(gm_model *g) { fill_where(g, NULL, GM_FILL_DENORMAL); }
static void val_all_zero(gm_model *g) { fill_where(g, NULL, GM_FILL_ZERO); }
static void val_norm_nan(gm_model *g) { fill_where(g, "norm", GM_FILL_ALL_NAN); }
static void val_output_nan(gm_model *g) { fill_where(g, "output.", GM_FILL_ALL_NAN); }
static void val_all_nan(gm_model *g) { fill_where(g, NULL, GM_FILL_ALL_NAN); }
static void val_f16_nan(gm_model *g) {
    type_where(g, "blk.", AL_TYPE_F16);
    fill_where(g, "blk.", GM_FILL_NAN);
}
static void val_f16_overflow(gm_model *g) {
    type_where(g, ".", AL_TYPE_F16);
    fill_where(g, "ffn", GM_FILL_HUGE); /* 3e38 is Inf as f16 */
}

/* ---- chat templates ------------------------------------------------------------------------ */

static void tmpl_empty(gm_model *g) { set_str(g, "tokenizer.chat_template", ""); }
static void tmpl_missing(gm_model *g) { del(g, "tokenizer.chat_template"); }
static void tmpl_u32(gm_model *g) { set_u32(g, "tokenizer.chat_template", 7); }
static void tmpl_unknown(gm_model *g) { set_str(g, "tokenizer.chat_template", "{{ messages }}"); }
static void tmpl_invalid_utf8(gm_model *g) {
    set_str(g, "tokenizer.chat_template", "<|im_start|>system\n\xff\xfe\xc0\x80<|im_end|>\xed\xa0\x80");
}
static void tmpl_huge(gm_model *g) { set_template_repeat(g, "", "x", 1 << 20, ""); }
static void tmpl_huge_chatml(gm_model *g) { set_template_repeat(g, "<|im_start|>", "{{ x }}", 1 << 17, ""); }
/* Thousands of system openings with no end: each search for the end runs to the end of
 * the text, so a scan per opening is quadratic. */
static void tmpl_repeat_system(gm_model *g) {
    set_template_repeat(g, "", "<|im_start|>system\n", 50000, "");
}
static void tmpl_repeat_system_escaped(gm_model *g) {
    set_template_repeat(g, "", "<|im_start|>system\\n", 50000, "");
}
static void tmpl_repeat_system_quoted(gm_model *g) {
    set_template_repeat(g, "", "<|im_start|>system\n'", 50000, "<|im_end|>");
}
static void tmpl_repeat_turns(gm_model *g) {
    set_template_repeat(g, "", "<|im_start|>system\nhi<|im_end|>", 20000, "");
}
static void tmpl_huge_default_system(gm_model *g) {
    set_template_repeat(g, "'<|im_start|>system\\n", "ab\\\\ ", 1 << 18, "<|im_end|>'");
}
/* Every token user-defined and a long default system prompt: chat cuts each user token
 * out of the rendered text before tokenizing it. */
static void tmpl_huge_system_all_user(gm_model *g) {
    set_all_types(g, GM_TOK_USER);
    set_template_repeat(g, "'<|im_start|>system\\n", "Hello world. ", 1 << 15, "<|im_end|>'");
}
static void tmpl_escape_at_end(gm_model *g) {
    set_str(g, "tokenizer.chat_template", "<|im_start|>system\nabc\\<|im_end|>");
}
static void tmpl_system_unterminated(gm_model *g) {
    set_str(g, "tokenizer.chat_template", "<|im_start|>system\\");
}
static void tmpl_nul_inside(gm_model *g) {
    static const char t[] = "<|im_start|>system\n\0hidden<|im_end|>";
    const char *s[] = {t};
    const uint64_t len[] = {sizeof t - 1};
    /* a one-element string array is not a string: then set the string with the NUL */
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.chat_template", s, len, 1), "template");
}
static void tmpl_llama3(gm_model *g) { set_str(g, "tokenizer.chat_template", "<|start_header_id|>"); }
static void tmpl_gemma(gm_model *g) { set_str(g, "tokenizer.chat_template", "<start_of_turn>"); }
static void tmpl_phi3(gm_model *g) { set_str(g, "tokenizer.chat_template", "<|user|><|end|>"); }
static void tmpl_llama2(gm_model *g) { set_str(g, "tokenizer.chat_template", "[INST]<<SYS>>"); }
static void tmpl_mistral(gm_model *g) { set_str(g, "tokenizer.chat_template", "[INST]"); }
static void tmpl_markers_no_tokens(gm_model *g) {
    gm_token_set(g, 3, "<|im_sta", 8); /* the template's markers are not tokens */
    gm_token_set(g, 4, "rt|>", 4);
    gm_write_vocab(g);
}

/* ---- the list -------------------------------------------------------------------------- */

#define V(name, fn) {name, fn},
const gm_variant gm_variants[] = {
    V("base-valid", NULL)
    V("tok-count-below-embd-rows", tok_count_below_rows)
    V("tok-count-above-embd-rows", tok_count_above_rows)
    V("tok-embd-one-row", tok_count_one)
    V("tok-empty-vocab", tok_empty)
    V("tok-no-token-list", tok_no_list)
    V("tok-tokens-u32-array", tok_tokens_u32)
    V("tok-scores-short", tok_scores_short)
    V("tok-scores-long", tok_scores_long)
    V("tok-scores-nan", tok_scores_nan)
    V("tok-scores-inf", tok_scores_inf)
    V("tok-scores-strings", tok_scores_strings)
    V("tok-scores-scalar", tok_scores_scalar)
    V("tok-types-short", tok_types_short)
    V("tok-type-7", tok_type_7)
    V("tok-type-negative", tok_type_negative)
    V("tok-type-int-max", tok_type_huge)
    V("tok-types-u8-array", tok_types_u8)
    V("tok-types-all-user", tok_types_user)
    V("tok-types-all-control", tok_types_control)
    V("tok-types-all-unused", tok_types_unused)
    V("tok-types-all-undefined", tok_types_undefined)
    V("tok-types-all-byte", tok_types_byte)
    V("tok-types-all-unknown", tok_types_unknown)
    V("tok-no-byte-fallback-no-unk", tok_no_fallback)
    V("tok-bos-out-of-range", tok_bos_range)
    V("tok-bos-negative-add-bos", tok_bos_negative)
    V("tok-bos-string", tok_bos_string)
    V("tok-bos-f32", tok_bos_f32)
    V("tok-eos-equals-count", tok_eos_count)
    V("tok-eos-negative", tok_eos_negative)
    V("tok-unk-u64-huge", tok_unk_u64)
    V("tok-eot-u32-max", tok_eot_range)
    V("tok-pad-int-min", tok_pad_negative)
    V("tok-add-eos-without-eos", tok_add_eos_none)
    V("tok-add-bos-u32", tok_add_bos_u32)
    V("tok-special-ids-odd", tok_special_ids_odd)
    V("tok-empty-strings", tok_empty_strings)
    V("tok-huge-user-token", tok_huge_token)
    V("tok-invalid-utf8", tok_invalid_utf8)
    V("tok-nul-in-token", tok_nul_in_token)
    V("tok-duplicate", tok_duplicate)
    V("tok-duplicate-of-empty-name", tok_duplicate_empty)
    V("tok-user-tokens-overlap", tok_user_overlap)
    V("tok-model-unknown", tok_model_unknown)
    V("tok-model-empty", tok_model_empty)
    V("tok-model-missing", tok_model_missing)
    V("tok-model-u32", tok_model_u32)
    V("tok-spm-unknown-pre", tok_spm_pre)
    V("bpe-valid", bpe_base)
    V("bpe-merges-absent-tokens", bpe_merges_absent)
    V("bpe-merges-malformed", bpe_merges_malformed)
    V("bpe-merges-spaces", bpe_merges_spaces)
    V("bpe-merges-nul", bpe_merges_nul)
    V("bpe-merges-repeated", bpe_merges_repeated)
    V("bpe-no-merges", bpe_no_merges)
    V("bpe-merges-u32-array", bpe_merges_u32)
    V("bpe-pre-unknown", bpe_pre_unknown)
    V("bpe-pre-empty", bpe_pre_empty)
    V("bpe-pre-long", bpe_pre_long)
    V("bpe-pre-u32", bpe_pre_u32)
    V("bpe-pre-llama3", bpe_pre_llama3)
    V("bpe-missing-byte-tokens", bpe_missing_bytes)
    V("bpe-invalid-utf8", bpe_invalid_utf8)
    V("bpe-types-all-user", bpe_types_user)
    V("bpe-types-all-byte", bpe_types_byte)
    V("bpe-no-scores-no-types", bpe_scores_absent)
    V("hp-heads-0", hp_heads_0)
    V("hp-heads-2pow30", hp_heads_huge)
    V("hp-heads-u32-max", hp_heads_max)
    V("hp-heads-negative", hp_heads_negative)
    V("hp-heads-string", hp_heads_string)
    V("hp-heads-f32", hp_heads_f32)
    V("hp-heads-not-dividing-dim", hp_heads_not_dividing)
    V("hp-kv-heads-0", hp_kv_0)
    V("hp-kv-heads-above-heads", hp_kv_above_heads)
    V("hp-heads-not-multiple-of-kv", hp_heads_not_multiple_kv)
    V("hp-head-dim-mismatch", hp_head_dim_mismatch)
    V("hp-head-dim-small", hp_head_dim_small)
    V("hp-head-dim-0", hp_head_dim_0)
    V("hp-head-dim-2pow30", hp_head_dim_huge)
    V("hp-value-length-3", hp_value_length)
    V("hp-rope-dim-odd", hp_rope_dim_odd)
    V("hp-rope-dim-above-head", hp_rope_dim_above)
    V("hp-rope-dim-0", hp_rope_dim_0)
    V("hp-rope-dim-2", hp_rope_dim_2)
    V("hp-ctx-0", hp_ctx_0)
    V("hp-ctx-1", hp_ctx_1)
    V("hp-ctx-2pow30", hp_ctx_huge)
    V("hp-ctx-u64-2pow40", hp_ctx_u64)
    V("hp-rope-base-0", hp_rope_base_0)
    V("hp-rope-base-nan", hp_rope_base_nan)
    V("hp-rope-base-negative", hp_rope_base_negative)
    V("hp-rope-base-inf", hp_rope_base_inf)
    V("hp-rope-base-1e-38", hp_rope_base_tiny)
    V("hp-rope-base-string", hp_rope_base_string)
    V("hp-eps-0", hp_eps_0)
    V("hp-eps-nan", hp_eps_nan)
    V("hp-eps-negative", hp_eps_negative)
    V("hp-eps-1e30", hp_eps_huge)
    V("hp-eps-denormal", hp_eps_denormal)
    V("hp-rope-scaling-yarn", hp_scaling_yarn)
    V("hp-rope-scaling-factor-0", hp_scaling_factor_0)
    V("hp-rope-scaling-factor-nan", hp_scaling_factor_nan)
    V("hp-rope-scale-linear-1e9", hp_scale_linear_huge)
    V("hp-blocks-0", hp_blocks_0)
    V("hp-blocks-3-for-2", hp_blocks_3)
    V("hp-blocks-1-for-2", hp_blocks_1)
    V("hp-blocks-2pow30", hp_blocks_huge)
    V("hp-blocks-u32-max", hp_blocks_max)
    V("hp-ffn-mismatch", hp_ffn_mismatch)
    V("hp-ffn-0", hp_ffn_0)
    V("hp-dim-0", hp_dim_0)
    V("hp-dim-mismatch", hp_dim_mismatch)
    V("hp-dim-2pow30", hp_dim_huge)
    V("hp-no-dim", hp_no_dim)
    V("hp-no-heads", hp_no_heads)
    V("hp-no-kv-heads", hp_no_kv_heads)
    V("hp-arch-unknown", hp_arch_unknown)
    V("hp-arch-empty", hp_arch_empty)
    V("hp-arch-missing", hp_arch_missing)
    V("hp-arch-u32", hp_arch_u32)
    V("hp-arch-500-chars", hp_arch_long)
    V("hp-qwen2-no-biases", hp_qwen2_no_bias)
    V("hp-qwen2-bad-v-bias", hp_qwen2_bad_bias)
    V("shape-embd-transposed", shape_embd_transposed)
    V("shape-ffn-gate-transposed", shape_gate_transposed)
    V("shape-wk-as-wide-as-wq", shape_wk_as_wq)
    V("shape-wq-1d", shape_wq_1d)
    V("shape-wk-3d", shape_wk_3d)
    V("shape-wq-4d-ones", shape_wq_4d_ones)
    V("shape-norm-2d", shape_norm_2d)
    V("shape-norm-2d-one-row", shape_norm_2d_one)
    V("shape-norm-short", shape_norm_short)
    V("shape-output-rows-mismatch", shape_output_rows)
    V("shape-zero-dim", shape_zero_dim)
    V("shape-missing-token-embd", shape_missing_embd)
    V("shape-missing-output-norm", shape_missing_out_norm)
    V("shape-missing-ffn-down", shape_missing_down)
    V("shape-missing-attn-q", shape_missing_wq)
    V("shape-tied-output", shape_tied_output)
    V("shape-no-tensors", shape_no_tensors)
    V("shape-extra-tensors", shape_extra)
    V("shape-rope-freqs-short", shape_rope_freqs_short)
    V("shape-rope-freqs-nan", shape_rope_freqs_nan)
    V("shape-rope-freqs-zero", shape_rope_freqs_zero)
    V("type-attn-norm-q8_0", type_norm_q8_0)
    V("type-norms-q4_0", type_norm_q4_0)
    V("type-embd-q4_0", type_embd_q4_0)
    V("type-wq-f16", type_wq_f16)
    V("type-all-bf16", type_all_bf16)
    V("type-norms-f16", type_norms_f16)
    V("type-mixed", type_mixed)
    V("type-row-partial-block", type_row_partial_block)
    V("type-f32-row-longer-than-data", type_f32_row_longer)
    V("type-q8_0-nan-inf-scales", type_q8_0_bad_scales)
    V("type-q4_0-nan-inf-scales", type_q4_0_bad_scales)
    V("val-embd-nan", val_embd_nan)
    V("val-embd-inf", val_embd_inf)
    V("val-wq-inf", val_wq_inf)
    V("val-all-huge", val_all_huge)
    V("val-all-denormal", val_all_denormal)
    V("val-all-zero", val_all_zero)
    V("val-norms-nan", val_norm_nan)
    V("val-output-nan", val_output_nan)
    V("val-all-nan", val_all_nan)
    V("val-f16-nan", val_f16_nan)
    V("val-f16-overflow", val_f16_overflow)
    V("tmpl-empty", tmpl_empty)
    V("tmpl-missing", tmpl_missing)
    V("tmpl-u32", tmpl_u32)
    V("tmpl-unknown-format", tmpl_unknown)
    V("tmpl-invalid-utf8", tmpl_invalid_utf8)
    V("tmpl-huge-unknown", tmpl_huge)
    V("tmpl-huge-chatml", tmpl_huge_chatml)
    V("tmpl-repeat-system-open", tmpl_repeat_system)
    V("tmpl-repeat-system-open-escaped", tmpl_repeat_system_escaped)
    V("tmpl-repeat-system-quoted", tmpl_repeat_system_quoted)
    V("tmpl-repeat-system-turns", tmpl_repeat_turns)
    V("tmpl-huge-default-system", tmpl_huge_default_system)
    V("tmpl-huge-system-all-user", tmpl_huge_system_all_user)
    V("tmpl-escape-at-end", tmpl_escape_at_end)
    V("tmpl-system-unterminated", tmpl_system_unterminated)
    V("tmpl-string-array", tmpl_nul_inside)
    V("tmpl-llama3", tmpl_llama3)
    V("tmpl-gemma", tmpl_gemma)
    V("tmpl-phi3", tmpl_phi3)
    V("tmpl-llama2", tmpl_llama2)
    V("tmpl-mistral", tmpl_mistral)
    V("tmpl-markers-not-tokens", tmpl_markers_no_tokens)
    {NULL, NULL},
};
