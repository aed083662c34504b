/* gen_malformed.c: writes semantically malformed models (make test, tests/malformed.sh).
 *
 * Usage: gen_malformed OUT_DIR     writes OUT_DIR/NAME.gguf for every variant
 *        gen_malformed --list      prints the variant names
 *
 * Every file is valid GGUF framing (written by src/gguf_write.c) around a tiny llama
 * model that is wrong in one way: its tokenizer, its hyper-parameters, its tensor
 * shapes or types, its weight values or its chat template. The base model, written as
 * "base-valid.gguf", is correct and must run; each variant starts from it and changes
 * one thing, so that a failure points at the one check or code path that is missing.
 * tests/malformed.sh runs each file through the sanitizer build of the CLI, where a
 * clear refusal and a successful run are both fine but a sanitizer report, a signal or
 * a hang is not.
 *
 * The base: llama, n_embd 32, 2 layers, 4 heads (2 kv, head size 8), ffn 64, context
 * 128, f32 weights, a SentencePiece vocabulary of 328 tokens (<unk> <s> </s>, the two
 * ChatML markers, 256 byte tokens, letters and a few words) and a ChatML template with
 * a default system prompt. The variants are listed in gen_malformed_variants.c.
 */
#include "gen_malformed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/quantize.h"

/* ---- the description being built -------------------------------------------------- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gen_malformed: out of memory\n");
        exit(2);
    }
    return p;
}

void gm_check(al_status st, const char *what) {
    if (st == AL_OK) return;
    fprintf(stderr, "gen_malformed: %s: %s\n", what, al_last_error());
    exit(2);
}

void gm_token(gm_model *g, const char *text, size_t len, float score, int32_t type) {
    if (g->n_tok == GM_MAX_TOKENS) {
        fprintf(stderr, "gen_malformed: more than %d tokens\n", GM_MAX_TOKENS);
        exit(2);
    }
    int i = g->n_tok++;
    g->tok[i] = xmalloc(len + 1);
    memcpy(g->tok[i], text, len);
    g->tok[i][len] = 0;
    g->tok_len[i] = len;
    g->score[i] = score;
    g->ttype[i] = type;
}

void gm_token_set(gm_model *g, int i, const char *text, size_t len) {
    free(g->tok[i]);
    g->tok[i] = xmalloc(len + 1);
    memcpy(g->tok[i], text, len);
    g->tok[i][len] = 0;
    g->tok_len[i] = len;
}

/* Writes the token list, scores and types as they stand, each with its own count so
 * that variants can make them disagree. */
void gm_write_vocab(gm_model *g) {
    int n_scores = g->n_scores >= 0 ? g->n_scores : g->n_tok;
    int n_types = g->n_types >= 0 ? g->n_types : g->n_tok;
    gm_check(gguf_writer_set_str_array(g->w, "tokenizer.ggml.tokens", (const char *const *)g->tok,
                                       g->tok_len, (uint64_t)g->n_tok), "tokens");
    gm_check(gguf_writer_set_array(g->w, "tokenizer.ggml.scores", GGUF_VT_F32, g->score,
                                   (uint64_t)n_scores), "scores");
    gm_check(gguf_writer_set_array(g->w, "tokenizer.ggml.token_type", GGUF_VT_I32, g->ttype,
                                   (uint64_t)n_types), "token types");
}

gm_tensor *gm_find(gm_model *g, const char *name) {
    for (int i = 0; i < g->n_t; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

gm_tensor *gm_add(gm_model *g, const char *name, int n_dims, int64_t ne0, int64_t ne1, int fill) {
    if (g->n_t == GM_MAX_TENSORS) {
        fprintf(stderr, "gen_malformed: more than %d tensors\n", GM_MAX_TENSORS);
        exit(2);
    }
    gm_tensor *t = &g->t[g->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = (uint32_t)n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    t->type = AL_TYPE_F32;
    t->fill = fill;
    return t;
}

void gm_remove(gm_model *g, const char *name) {
    gm_tensor *t = gm_find(g, name);
    if (!t) return;
    int i = (int)(t - g->t);
    memmove(&g->t[i], &g->t[i + 1], (size_t)(g->n_t - i - 1) * sizeof *t);
    g->n_t--;
}

/* Sets the rows of the embedding and output matrices (the model's n_vocab). */
void gm_set_vocab_rows(gm_model *g, int64_t rows) {
    gm_find(g, "token_embd.weight")->ne[1] = rows;
    gm_tensor *out = gm_find(g, "output.weight");
    if (out) out->ne[1] = rows;
}

/* ---- the base model --------------------------------------------------------------- */

static const char k_chatml[] =
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful "
    "assistant.<|im_end|>\\n' }}{% endif %}{% for message in messages %}{{'<|im_start|>' + "
    "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static void base_vocab_spm(gm_model *g) {
    static const char *const words[] = {"\xe2\x96\x81", "\xe2\x96\x81H", "\xe2\x96\x81He",
        "\xe2\x96\x81Hello", "\xe2\x96\x81wor", "\xe2\x96\x81world", "ll", "llo", "ello", "or",
        "orld", "\xe2\x96\x81user", "\xe2\x96\x81" "assistant", "\xe2\x96\x81system"};
    gm_token(g, "<unk>", 5, 0, GM_TOK_UNKNOWN);
    gm_token(g, "<s>", 3, 0, GM_TOK_CONTROL);
    gm_token(g, "</s>", 4, 0, GM_TOK_CONTROL);
    gm_token(g, "<|im_start|>", 12, 0, GM_TOK_CONTROL);
    gm_token(g, "<|im_end|>", 10, 0, GM_TOK_CONTROL);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        gm_token(g, s, 6, 0, GM_TOK_BYTE);
    }
    for (int c = 0; c < 26; c++) {
        char s[8] = {(char)('a' + c)};
        gm_token(g, s, 1, -10.0f - (float)c, GM_TOK_NORMAL);
        char sp[8] = "\xe2\x96\x81";
        sp[3] = (char)('a' + c);
        gm_token(g, sp, 4, -40.0f - (float)c, GM_TOK_NORMAL);
    }
    gm_token(g, "H", 1, -9.0f, GM_TOK_NORMAL);
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        gm_token(g, words[i], strlen(words[i]), -1.0f - (float)i * 0.1f, GM_TOK_NORMAL);
}

static void base_keys(gm_model *g) {
    gguf_writer *w = g->w;
    gm_check(gguf_writer_set_str(w, "general.architecture", "llama"), "arch");
    gm_check(gguf_writer_set_str(w, "general.name", "malformed-test"), "name");
    gm_check(gguf_writer_set_u32(w, "llama.context_length", 128), "ctx");
    gm_check(gguf_writer_set_u32(w, "llama.embedding_length", GM_DIM), "dim");
    gm_check(gguf_writer_set_u32(w, "llama.block_count", GM_LAYERS), "layers");
    gm_check(gguf_writer_set_u32(w, "llama.feed_forward_length", GM_FFN), "ffn");
    gm_check(gguf_writer_set_u32(w, "llama.attention.head_count", GM_HEADS), "heads");
    gm_check(gguf_writer_set_u32(w, "llama.attention.head_count_kv", GM_KV_HEADS), "kv heads");
    gm_check(gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f), "rope");
    gm_check(gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f), "eps");
    gm_check(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), "tok model");
    gm_write_vocab(g);
    gm_check(gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0), "unk");
    gm_check(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1), "bos");
    gm_check(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2), "eos");
    gm_check(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true), "add bos");
    gm_check(gguf_writer_set_str(w, "tokenizer.chat_template", k_chatml), "template");
}

static void base_tensors(gm_model *g) {
    int64_t e = GM_DIM, kvd = GM_KV_HEADS * (GM_DIM / GM_HEADS), f = GM_FFN;
    gm_add(g, "token_embd.weight", 2, e, g->n_tok, GM_FILL_RANDOM);
    gm_add(g, "output_norm.weight", 1, e, 1, GM_FILL_ONES);
    gm_add(g, "output.weight", 2, e, g->n_tok, GM_FILL_RANDOM);
    for (int il = 0; il < GM_LAYERS; il++) {
        static const struct { const char *s; int which0, which1; } L[] = {
            {"attn_norm.weight", 0, -1}, {"attn_q.weight", 0, 0}, {"attn_k.weight", 0, 1},
            {"attn_v.weight", 0, 1},     {"attn_output.weight", 0, 0},
            {"ffn_norm.weight", 0, -1},  {"ffn_gate.weight", 0, 2}, {"ffn_up.weight", 0, 2},
            {"ffn_down.weight", 2, 0}};
        const int64_t width[] = {e, kvd, f};
        for (size_t i = 0; i < sizeof L / sizeof *L; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", il, L[i].s);
            if (L[i].which1 < 0) gm_add(g, name, 1, e, 1, GM_FILL_ONES);
            else gm_add(g, name, 2, width[L[i].which0], width[L[i].which1], GM_FILL_RANDOM);
        }
    }
}

static void model_init(gm_model *g) {
    memset(g, 0, sizeof *g);
    g->n_scores = g->n_types = -1;
    gm_check(gguf_writer_create(&g->w), "writer");
    base_vocab_spm(g);
    base_keys(g);
    base_tensors(g);
}

static void model_free(gm_model *g) {
    gguf_writer_destroy(g->w);
    for (int i = 0; i < g->n_tok; i++) free(g->tok[i]);
    free(g->patch_name);
}

/* ---- tensor data ------------------------------------------------------------------- */

static float fill_value(int fill, uint64_t i, uint32_t *rng) {
    *rng = *rng * 1664525u + 1013904223u;
    float r = (float)(*rng >> 8) / (float)(1u << 24) - 0.5f; /* [-0.5, 0.5) */
    switch (fill) {
    case GM_FILL_ONES: return 1.0f + 0.1f * r;
    case GM_FILL_ZERO: return 0.0f;
    case GM_FILL_NAN: return i % 7 == 3 ? NAN : r;
    case GM_FILL_INF: return i % 5 == 1 ? (i % 2 ? INFINITY : -INFINITY) : r;
    case GM_FILL_HUGE: return r < 0 ? -3e38f : 3e38f;
    case GM_FILL_DENORMAL: return r * 1e-39f;
    case GM_FILL_ALL_NAN: return NAN;
    default: return r;
    }
}

/* A block's scale is its first two bytes (an f16) in every block type the variants
 * use (Q4_0, Q8_0); GM_FILL_BAD_SCALE makes them NaN and Inf. */
static void break_scales(uint8_t *row, uint64_t n_bytes, uint32_t type) {
    const quant_traits *tr = quant_get_traits(type);
    if (!tr || tr->block_size == 1) return;
    for (uint64_t b = 0; b + tr->type_size <= n_bytes; b += tr->type_size) {
        uint16_t h = (b / tr->type_size) % 2 ? 0x7C00 : 0x7E00; /* Inf, NaN */
        memcpy(row + b, &h, 2);
    }
}

static void write_tensor(gm_model *g, const gm_tensor *t, uint32_t *rng) {
    int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t rb = quant_row_bytes(t->type, ne0);
    if (rb == 0 || ne0 == 0 || rows == 0) return; /* nothing or unknown: the writer refuses */
    float *src = xmalloc((size_t)ne0 * sizeof *src);
    uint8_t *dst = xmalloc((size_t)rb);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne0; i++)
            src[i] = fill_value(t->fill, (uint64_t)(r * ne0 + i), rng);
        if (t->type == AL_TYPE_F32) memcpy(dst, src, (size_t)rb);
        else gm_check(quant_quantize_row(t->type, src, dst, ne0), t->name);
        if (t->fill == GM_FILL_BAD_SCALE) break_scales(dst, rb, t->type);
        gm_check(gguf_writer_write(g->w, dst, rb), t->name);
    }
    free(src);
    free(dst);
}

/* Rewrites ne[0] of the named tensor in a written file, where the writer would refuse
 * the shape (a row that is not whole blocks of its type). */
static int patch_ne0(const char *path, const char *name, int64_t ne0) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    size_t len = strlen(name);
    for (size_t i = 8; i + len + 12 <= n; i++) {
        uint64_t l;
        memcpy(&l, buf + i - 8, 8);
        if (l != len || memcmp(buf + i, name, len)) continue;
        /* name, then u32 n_dims, then i64 ne[0] */
        fseek(f, (long)(i + len + 4), SEEK_SET);
        fwrite(&ne0, 8, 1, f);
        return fclose(f);
    }
    fclose(f);
    return -1;
}

static void model_write(gm_model *g, const char *path) {
    for (int i = 0; i < g->n_t; i++)
        gm_check(gguf_writer_add_tensor(g->w, g->t[i].name, g->t[i].n_dims, g->t[i].ne,
                                        g->t[i].type), g->t[i].name);
    gm_check(gguf_writer_open(g->w, path), path);
    uint32_t rng = 12345;
    for (int i = 0; i < g->n_t; i++) write_tensor(g, &g->t[i], &rng);
    gm_check(gguf_writer_close(g->w), path);
    if (g->patch_name && patch_ne0(path, g->patch_name, g->patch_ne0) != 0) {
        fprintf(stderr, "gen_malformed: %s: cannot patch tensor '%s'\n", path, g->patch_name);
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_malformed OUT_DIR | --list\n");
        return 2;
    }
    bool list = !strcmp(argv[1], "--list");
    int n = 0;
    for (const gm_variant *v = gm_variants; v->name; v++, n++) {
        if (list) {
            printf("%s\n", v->name);
            continue;
        }
        gm_model *g = xmalloc(sizeof *g);
        model_init(g);
        if (v->fn) v->fn(g);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gguf", argv[1], v->name);
        model_write(g, path);
        model_free(g);
        free(g);
    }
    if (!list) printf("gen_malformed: %d files in %s\n", n, argv[1]);
    return 0;
}
