/* gen_malformed.h: the model description shared by gen_malformed.c (the base model and
 * the writing) and gen_malformed_variants.c (what each variant changes). */
#ifndef GEN_MALFORMED_H
#define GEN_MALFORMED_H

#include <stdbool.h>
#include <stdint.h>

#include "format/gguf_write.h"
#include "format/quant.h"

enum {
    GM_DIM = 32, GM_LAYERS = 2, GM_HEADS = 4, GM_KV_HEADS = 2, GM_FFN = 64,
    GM_MAX_TENSORS = 64, GM_MAX_TOKENS = 1024,
};

/* Token types as GGUF numbers them (tokenizer.ggml.token_type). */
enum { GM_TOK_NORMAL = 1, GM_TOK_UNKNOWN = 2, GM_TOK_CONTROL = 3, GM_TOK_USER = 4,
       GM_TOK_UNUSED = 5, GM_TOK_BYTE = 6 };

/* How a tensor's values are made (before conversion to its type). */
enum { GM_FILL_RANDOM, GM_FILL_ONES, GM_FILL_ZERO, GM_FILL_NAN, GM_FILL_INF, GM_FILL_HUGE,
       GM_FILL_DENORMAL, GM_FILL_ALL_NAN, GM_FILL_BAD_SCALE };

typedef struct gm_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    int fill;
} gm_tensor;

typedef struct gm_model {
    gguf_writer *w; /* the keys, set as they go */
    /* the vocabulary, written by gm_write_vocab(); counts < 0 mean n_tok */
    char *tok[GM_MAX_TOKENS];
    uint64_t tok_len[GM_MAX_TOKENS];
    float score[GM_MAX_TOKENS];
    int32_t ttype[GM_MAX_TOKENS];
    int n_tok, n_scores, n_types;
    /* the tensors, added to the writer in this order when the file is written */
    gm_tensor t[GM_MAX_TENSORS];
    int n_t;
    /* a tensor whose ne[0] is rewritten in the file after writing (malloc'd name) */
    char *patch_name;
    int64_t patch_ne0;
} gm_model;

typedef struct gm_variant {
    const char *name;        /* the file's name, without .gguf */
    void (*fn)(gm_model *g); /* NULL: the base model as it is */
} gm_variant;

extern const gm_variant gm_variants[]; /* ends with {NULL, NULL} */

/* Exits with a message if st is not AL_OK. */
void gm_check(al_status st, const char *what);
void gm_token(gm_model *g, const char *text, size_t len, float score, int32_t type);
void gm_token_set(gm_model *g, int i, const char *text, size_t len);
void gm_write_vocab(gm_model *g);
gm_tensor *gm_find(gm_model *g, const char *name);
gm_tensor *gm_add(gm_model *g, const char *name, int n_dims, int64_t ne0, int64_t ne1, int fill);
void gm_remove(gm_model *g, const char *name);
void gm_set_vocab_rows(gm_model *g, int64_t rows);

#endif /* GEN_MALFORMED_H */
