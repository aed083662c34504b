/* quantize.h: float rows to GGUF block formats, and whole-model quantization.
 *
 * Three layers, each usable alone:
 *   1. quant_quantize_row(): one row of floats -> blocks of a type. Bit-exact with
 *      ggml's reference quantizers (quantize_row_*_ref, no importance matrix), which is
 *      what llama.cpp's llama-quantize runs, so a file quantized here holds the same
 *      bytes as one quantized there from the same weights.
 *   2. quant_scheme / quant_pick_type(): a model-level scheme ("Q4_K_M") and the type
 *      it gives each tensor, following llama.cpp's rules (output.weight in Q6_K, more
 *      bits for some attn_v and ffn_down layers, MXFP4_MOE's MXFP4 experts and Q8_0
 *      elsewhere, fallbacks for rows whose length the block size does not divide).
 *   3. quant_model(): GGUF in, GGUF out, streamed tensor by tensor with worker threads;
 *      anyllm.h's al_quantize() is this with the scheme and the types named by strings.
 *
 * Types quantized: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4.
 * Every function is thread-safe; none keeps state between calls.
 */
#ifndef AL_QUANTIZE_H
#define AL_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anyllm.h"

/* ---- rows ------------------------------------------------------------------------ */

/* True if quant_quantize_row() can produce the type. */
bool quant_can_quantize(uint32_t type);

/* Quantizes n floats from src into quant_row_bytes(type, n) bytes at dst. AL_ERR_ARG if n
 * is not a positive multiple of the type's block size, AL_ERR_UNSUPPORTED if the type
 * cannot be produced; dst is untouched on failure. */
al_status quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* Fills dst[0..n) with row `row` of some source. Called from worker threads, concurrently
 * for different rows, so it must not share mutable state without locking. */
typedef void (*quant_row_source)(void *ctx, int64_t row, float *dst, int64_t n);

/* Quantizes rows [row0, row0 + n_rows) of n_per_row floats each, taken from src, into
 * dst (n_rows * quant_row_bytes(type, n_per_row) bytes), on n_threads threads (<= 0:
 * one). The result does not depend on the number of threads. */
al_status quant_rows(uint32_t type, int64_t n_per_row, int64_t row0, int64_t n_rows,
                     quant_row_source src, void *ctx, void *dst, int n_threads);

/* ---- schemes: the type of each tensor --------------------------------------------- */

typedef struct quant_scheme {
    const char *name;   /* "Q4_K_M" */
    uint32_t ftype;     /* general.file_type, in llama.cpp's LLAMA_FTYPE numbering */
    uint32_t type;      /* the type of most weight matrices (al_type) */
    const char *help;   /* one line for usage messages */
} quant_scheme;

/* The scheme named (case-insensitive; "Q4_K" and "Q5_K" are llama.cpp's aliases of
 * Q4_K_M and Q5_K_M), or NULL. */
const quant_scheme *quant_scheme_find(const char *name);

/* The schemes, for usage messages: *n is set to their number. */
const quant_scheme *quant_schemes(int *n);

/* "F32, F16, ..., MXFP4_MOE": the schemes' names for messages, into buf (size > 0 bytes,
 * cut short where they do not fit); returns buf. */
const char *quant_scheme_names(char *buf, size_t size);

/* What quant_pick_type() needs to know of the whole model. */
typedef struct quant_model_desc {
    int n_layer;       /* {arch}.block_count */
    int n_attn_v;      /* number of attn_v.weight tensors (llama.cpp counts these) */
    bool has_output;   /* an output.weight exists; if not, token_embd is the output */
    bool pure;         /* every quantizable tensor gets the scheme's type: no mix */
} quant_model_desc;

/* The type a tensor gets under the scheme, given its name, shape and current type.
 * Tensors that are not weight matrices (1-D, norms, biases, ...) keep cur_type. If the
 * scheme's choice does not divide ne[0] into blocks, the result is llama.cpp's fallback
 * (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16) and *fell_back (if not NULL) is
 * set. */
uint32_t quant_pick_type(const quant_scheme *s, const quant_model_desc *m, const char *name,
                         uint32_t n_dims, const int64_t ne[4], uint32_t cur_type,
                         bool *fell_back);

/* ---- whole files ------------------------------------------------------------------- */

/* Sent to the progress callback once per tensor, after it is written. */
typedef struct quant_progress {
    int index, count;          /* this is tensor index + 1 of count */
    const char *name;
    uint32_t from_type, to_type;
    uint32_t n_dims;           /* dimensions up to the last above 1 */
    const int64_t *ne;         /* [4] */
    uint64_t from_bytes, to_bytes;
    bool fell_back;            /* the scheme's type did not fit ne[0] */
} quant_progress;

typedef struct quant_params {
    const quant_scheme *scheme;
    int n_threads;             /* <= 0: one */
    bool pure;                 /* see quant_model_desc */
    void (*progress)(void *ud, const quant_progress *p);   /* may be NULL */
    void *progress_ud;
} quant_params;

typedef struct quant_report {
    uint64_t in_bytes, out_bytes;  /* tensor data */
    int n_tensors, n_quantized, n_fallback;
} quant_report;

/* Reads in_path (a GGUF whose tensors are F32, F16 or BF16), writes out_path with every
 * key kept, general.file_type and general.quantization_version set, split.* keys
 * dropped, and the tensors in llama.cpp's order (by layer, then by name) quantized as
 * the scheme says. Tensor data is streamed: memory use is bounded by a chunk of rows
 * per thread, not by the model. The file is written as out_path.partial and renamed
 * at the end: on failure out_path is untouched and *report (may be NULL) is zeroed. Fails with AL_ERR_UNSUPPORTED for an input that is already
 * quantized, AL_ERR_ARG when out_path is in_path. */
al_status quant_model(const char *in_path, const char *out_path, const quant_params *p,
                      quant_report *report);

#endif /* AL_QUANTIZE_H */
