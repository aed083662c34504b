/* ops.h: inside the CPU backend: the reference ops, the kernel table of each
 * instruction set, and the data layouts the fast kernels share.
 *
 * Two implementations of every op live behind one backend object (cpu.c):
 *   - the reference ops (ops_ref.c): plain C, written for clarity, the oracle;
 *   - the fast ops (matmul.c, cpu.c), which drive the kernels of one instruction set
 *     (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c), chosen once at start-up.
 *
 * Quantized matmul (the fast path). Each weight type is read as unsigned 8-bit
 * integers u with a scale dw and an offset m per sub-block of B = 16 or 32 elements,
 * so that w = dw * u + m (Q4_0: u = q, m = -8 dw; Q4_K: dw = d*sc, m = -dmin*mn; ...).
 * Activations are quantized once per matmul, 8 bits per element with a scale per 32
 * (cpu_act_fmt): legacy types as ggml quantizes them, so that the integer products are
 * those of llama.cpp (Q8_0: d = amax/127 rounded to fp16; ggml's Q8_1 for Q4_1/Q5_1 is
 * the same plus d * sum(qa) in fp16, which is kept exact here); K-quants with an exact
 * scale per 32, where ggml takes Q8_K's one per 256. Either way a = da * qa, qa in
 * [-127, 127]. Then per sub-block
 *     sum_i w_i a_i = dw * da * sum_i u_i qa_i + m * da * sum_i qa_i,
 * where the integer sums are exact (vpdpbusd / pmaddubsw). Types whose offset is a
 * constant multiple of dw (Q4_0: m = -8 dw) fold it into the integer sum, which then
 * starts at -8 * sum(qa). The order of the float operations per (row, token) is the
 * same whatever the batch size, the tiling or the thread count, so a token gives
 * bit-identical logits alone or in a batch.
 *
 * Panels. Weight rows are unpacked R at a time into a panel where a vector's lanes are
 * R rows: one broadcast 4-byte group of an activation then multiplies R rows at once,
 * and no horizontal sum is ever needed. Per sub-block a panel holds
 *     u8  q[B/4][R][4]   (4 consecutive elements of each row, row-major in lanes)
 *     f32 dw[R], m[R]
 * Activations of TT tokens form a tile with the same structure, tokens for rows:
 *     u8  q[B/4][TT][4],  f32 da[TT],  32-bit aux[TT]
 * where aux is -offset * sum(qa) (int32) for a constant offset, else the float da *
 * sum(qa). A sub-block of 16 (Q6_K, Q3_K) has the da of its group of 32.
 * Float weights (F32, F16, BF16) are unpacked into f32 panels [k][R] and multiply f32
 * activations directly. R and TT are per ISA (16 and 8 for AVX-512, 8 and 4 for AVX2;
 * the scalar kernels take R = TT = 1, where panels and tiles are plain rows).
 *
 * AMX. Where the CPU has AMX-INT8 and the kernel grants its tile state, a batch of more
 * tokens than a tile (prompt processing) on AVX-512 multiplies on AMX tiles instead
 * (kernels_amx.c); token generation keeps the VNNI kernels. One TDPBSSD/TDPBSUD per
 * sub-block gives the int32 sums of 16 tokens x 16 rows at once. Its B operand is the
 * AVX-512 panel as it is ([B/4][16][4]); its A operand wants each token's B bytes
 * contiguous, so a batch's tiles of CPU_AMX_TOK = 16 tokens take a layout of their own,
 *     u8  q[16][B],  f32 da[16],  32-bit aux[16]
 * per sub-block (the same bytes as the tile above): A is 512 contiguous bytes, where
 * 16 rows a token's row apart made the tile load half again slower, and the dot
 * product and its epilogue ~25% slower per sub-block. Types with a constant offset get a signed panel (q - offset), so
 * that the products include the -offset * sum(qa) that VNNI starts from. The float
 * epilogue per sub-block is mk_q_body's, operation for operation, so AMX and VNNI
 * give the same bits (tests/test_kernels.c test_matmul_amx).
 */
#ifndef AL_CPU_OPS_H
#define AL_CPU_OPS_H

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "pool.h"
#include "format/quant.h"

/* ---- instruction sets --------------------------------------------------------------- */

typedef enum cpu_isa {
    CPU_ISA_REF,    /* the plain-C reference ops */
    CPU_ISA_SCALAR, /* the fast algorithms in portable C */
    CPU_ISA_AVX2,   /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512, /* AVX-512 F/BW/VL/DQ + VNNI */
    CPU_ISA_COUNT
} cpu_isa;

/* How the fast matmul rounds its activations. Q8 is ggml's: 8 bits per element, a
 * scale per block (llama.cpp's numerics). Q8X2 adds a second 8-bit pass over what the
 * first one left (x - hi), so the kernel multiplies hi + lo: about 15 bits, close
 * enough to f32 that greedy decoding follows the reference path and the GPU, at
 * twice the integer work. The value is the number of passes. */
typedef enum { CPU_ACT_Q8 = 1, CPU_ACT_Q8X2 = 2 } cpu_act_mode;

const char *cpu_isa_name(cpu_isa isa);
bool cpu_isa_available(cpu_isa isa); /* the CPU and OS can run it */
cpu_isa cpu_isa_best(void);

/* The CPU backend, n_threads workers (0 = cores), as settings s (anyllm.h; NULL: the
 * defaults) say. act: how the fast kernels round activations, "q8", "q8x2" or
 * "precise" (= q8x2; cpu_act_mode); NULL = s->act, else q8. The registry makes it
 * through cpu_backend_desc. */
al_status cpu_backend_create(int n_threads, const char *act, const al_cpu_settings *s,
                             al_backend **out);
/* AL_ERR_ARG, naming the field and the value, unless every CPU setting is valid. */
al_status cpu_settings_check(const al_cpu_settings *s);

/* A CPU backend running one instruction set's kernels. An ISA the CPU lacks is
 * refused with AL_ERR_UNSUPPORTED. cpu_backend_create() picks the ISA from its
 * settings (cpu.isa; the CLI's ANYLLM_ISA) or the CPU. */
al_status cpu_backend_create_isa(int n_threads, cpu_isa isa, cpu_act_mode act, al_backend **out);
/* Turns AMX on or off for a backend's batches (cpu_backend_create_isa leaves it off;
 * cpu_backend_create turns it on where it can, unless cpu.amx = 0). On is refused
 * with AL_ERR_UNSUPPORTED where cpu_amx_unavailable() says why, or the backend does
 * not run the AVX-512 kernels. */
al_status cpu_backend_set_amx(al_backend *be, bool on);
/* Whether weight_pack moves weights into the x16 layout where the kernels and the
 * shape allow (on by default; cpu_backend_create: off for cpu.x16 = 0). Weights
 * already packed stay so. */
void cpu_backend_set_x16(al_backend *be, bool on);
/* Whether the fast backend's moe_ffn fuses a few tokens' experts (on by default;
 * cpu_backend_create: off for cpu.moe_fuse = 0). Off, the plain ops run: the same
 * bits, for comparisons and benchmarks. */
void cpu_backend_set_moe_fuse(al_backend *be, bool on);
/* Whether the fast backend's matmul_multi, matmul_glu and matmul_add fuse a few
 * tokens' matmuls (on by default; cpu_backend_create: off for cpu.fuse = 0). Off,
 * the plain ops run: the same bits. */
void cpu_backend_set_fuse(al_backend *be, bool on);

/* ---- layouts ------------------------------------------------------------------------ */

enum {
    CPU_MAX_ROWS = 16,      /* the largest panel (R) of any ISA */
    CPU_MAX_TILE = 8,       /* the largest activation tile (TT) of any ISA */
    CPU_ATTN_KEYS = 32,     /* keys per online-softmax step; steps start at multiples */
    CPU_ATTN_MAX_DIM = 576, /* larger heads use the reference attention (576: latent rows) */
    CPU_ATTN_FEW = 8,       /* the most queries per tile of the AVX-512 decode kernel */
    CPU_DELTA_MAX_DIM = 512, /* the largest delta-net head (model.c refuses more) */
};

/* Bytes of one sub-block of B elements in a panel of R rows or a tile of R tokens. */
static inline int64_t cpu_sb_bytes(int r, int b) {
    return (int64_t)r * (b + 8);
}

/* Decodes one weight block (32 or 256 elements) into unsigned integers u[block] and
 * per-sub-block dw[block/sub], m[block/sub]: element i = dw[i/sub] * u[i] + m[i/sub]. */
typedef void (*cpu_decode_fn)(const uint8_t *blk, uint8_t *u, float *dw, float *m);

typedef struct cpu_qtype {
    int block;     /* elements per weight block: 32 or 256 */
    int sub;       /* B: elements per sub-block with its own dw and m: 16 or 32 */
    int type_size; /* bytes per weight block */
    int offset;    /* m = -offset * dw for every sub-block; 0: m varies (mins) */
    int bits;      /* u < 2^bits (MXFP4: 5) */
    cpu_decode_fn decode;
} cpu_qtype;

/* The quantized weight types of the fast path; NULL for the others (F32, F16, BF16,
 * Q8_1, Q8_K and unknown ids). */
const cpu_qtype *cpu_qtype_get(uint32_t type);

/* How many 4-byte groups of a sub-block of b (a power of two that divides b / 4) have
 * products, u * qa in pairs, whose sum fits in int16: each group adds at most
 * 2 (2^bits - 1) 127 per lane (qa >= -127), so 8 for 4-bit weights, 4 for 5, 2 for 6. */
static inline int cpu_n16(const cpu_qtype *qt) {
    const int per = 2 * ((1 << qt->bits) - 1) * 127;
    int n = 1;
    while (2 * n <= qt->sub / 4 && 2 * n * per <= 32767)
        n *= 2;
    return n;
}

/* GELU's tanh approximation, 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3),
 * is x / (1 + exp(-2z)) (as 1 + tanh(z) = 2 / (1 + exp(-2z))): the fast kernels take
 * this form, one exp and no cancellation for negative x, with
 * 2z = x (CPU_GELU_K0 + CPU_GELU_K1 x^2). */
#define CPU_GELU_K0 1.5957691216057308f  /* 2 sqrt(2/pi) */
#define CPU_GELU_K1 0.07135481627260025f /* 2 sqrt(2/pi) 0.044715 */

/* ---- kernel signatures ------------------------------------------------------------- */

/* How a matmul quantizes its activations: 8 bits with a scale per group of 32 elements
 * (ggml's Q8_0 blocks, CPU_ACT_GROUP), sub-blocks of b, and the tile's aux word:
 * -offset * sum(qa) when offset > 0, else da * sum(qa). The scale is rounded to fp16 as
 * ggml's Q8_0 does for the legacy types (llama.cpp's numerics), and kept exact where
 * exact_scale: the K-quants, and the second pass of CPU_ACT_Q8X2, whose small scales
 * fp16 would flush.
 *
 * K-quants take the same groups of 32. ggml rounds their activations to Q8_K, one scale
 * per 256: where a block of 256 holds an outlier, the other 224 elements lose bits to
 * it. A scale per 32 costs one multiply per sub-block and leaves about half of Q8_K's
 * error against the exact result (docs/cpu.md: Activation rounding). */
enum { CPU_ACT_GROUP = 32 };
typedef struct cpu_act_fmt {
    int b, offset;
    bool exact_scale;
} cpu_act_fmt;

/* Quantizes x[n] (n a multiple of CPU_ACT_GROUP) into row `slot` of a tile of tt tokens.
 * Every ISA rounds alike, bit for bit. */
typedef void (*cpu_quant_fn)(const float *x, int64_t n, cpu_act_fmt f, uint8_t *tile, int slot,
                             int tt);

/* Unpacks weight blocks [blk0, blk0 + n_blk) of n_rows rows (1..R; the missing rows of
 * a panel repeat the last one) into a panel. w is row 0; rows are row_bytes apart. */
typedef void (*cpu_pack_q_fn)(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                              int64_t blk0, int64_t n_blk, uint8_t *panel);

/* The same from a weight in the x16 layout: w is the panel's row 0, as in the rows
 * layout, and row0 that row's place in its group of 16 (0, or 8 for a second panel of
 * R = 8). The panel is full. */
typedef void (*cpu_pack_x16_fn)(uint32_t type, const uint8_t *w, uint64_t row_bytes, int row0,
                                int64_t blk0, int64_t n_blk, uint8_t *panel);
/* Rewrites groups of 16 rows into the x16 layout (cpu_x16_pack, below). */
typedef void (*cpu_x16_pack_fn)(uint32_t type, const uint8_t *src, uint8_t *dst,
                                uint64_t row_bytes, int64_t n_blk, int64_t g0, int64_t g1);

/* The same for float weights: elements [k0, k0 + nk) into an f32 panel [nk][R]. */
typedef void (*cpu_pack_f_fn)(uint32_t type, const uint8_t *w, uint64_t row_bytes, int n_rows,
                              int64_t k0, int64_t nk, float *panel);

/* One microkernel call: out[t][r] for t < n_tok, r < n_rows over one K chunk. */
typedef struct cpu_mk_args {
    const void *panel; /* quantized: n_sb sub-blocks; float: [n_k][R]; NULL: the weights
                        * in place (w..., cpu_kernels.inplace_types) */
    const uint8_t *w;  /* in place: row 0 of the panel, blocks from w_blk0 */
    uint64_t w_row_bytes;
    int64_t w_blk0;
    uint32_t w_type;
    bool w_x16;        /* in place: w is in the AL_LAYOUT_X16 layout (cpu_x16_pack) */
    int w_x16_row;     /* in place, x16: the panel's row 0 within its group of 16 */
    bool x16_group;    /* in place, x16, w_x16_row 0, R 8: the call takes the whole group,
                        * rows 0..15 of out (cpu_kernels.x16_group) */
    bool w_x16_pf;     /* in place, x16: prefetch ahead of the reads where the kernel
                        * would leave the stream to the hardware (cpu_backend.x16_pf) */
    const void *act;   /* quantized: the tile at the same sub-block; float: x[t*ldx + k];
                        * AMX: the tile (AMX layout) at the same sub-block */
    const float *pass_hi; /* AMX: the call is the second activation pass (lo), summed
                           * from zero, and out becomes (out + hi) + lo, hi [t][16] the
                           * first pass's sums over the same chunk */
    int64_t n_sb;      /* quantized: sub-blocks in the chunk */
    int64_t n_k;       /* float: elements in the chunk */
    int64_t ldx;       /* float: floats between activation rows */
    int bsize;         /* quantized: B */
    bool mins;         /* quantized: m varies per sub-block (no constant offset) */
    bool signed_w;     /* quantized: the panel holds signed weights (AVX2 Q8_0), m = 0 */
    int n16;           /* quantized, unsigned weights: the products of this many 4-byte
                        * groups fit an int16 sum (cpu_n16; AVX2's pmaddubsw) */
    int n_tok;         /* 1..TT */
    bool narrow;       /* in place, one token: act is a tile of that token alone, the
                        * layout of TT = n_tok (1; 2: its hi and lo, cpu_kernels.narrow) */
    int n_rows;        /* 1..R valid lanes */
    float *out;        /* out[t*ldo + r] */
    int64_t ldo;
    bool first;        /* the first chunk: start from 0, not from out */
    const float *bias; /* the last chunk: added before the store; else NULL */
} cpu_mk_args;
typedef void (*cpu_mk_fn)(const cpu_mk_args *a);

/* One attention call, shared by its tiles. */
typedef struct cpu_attn_args {
    const float *q; /* [n_tokens][n_head * head_dim] */
    int64_t ldq;
    const float *k, *v; /* ring caches [cap][n_head_kv * head_dim]: position p in row p % cap */
    int64_t ldk;
    float *out; /* [n_tokens][n_head * head_dim] */
    int64_t ldo;
    int n_head, n_head_kv, head_dim, n_past, n_tokens;
    int cap;     /* rows of the caches */
    int pos0;    /* the position in row 0: position p lies in row (p - pos0) % cap */
    bool one_head; /* the caches hold kv head kvh alone (a thread's copy), rows of
                    * head_dim: fast_attention copies one head's keys and values where
                    * its rows, a cache row of every head apart, conflict in the caches */
    int window;  /* > 0: a query at p sees p - window + 1 .. p; 0: 0 .. p */
    float scale; /* multiplies q.k: al_attn_shape.scale, or 1 / sqrt(head_dim) */
    const float *sinks; /* [n_head] logits in the denominator only (al_attn_shape), or NULL */
    /* key_hi > 0: the call sees only the keys in [key_lo, key_hi) (multiples of
     * CPU_ATTN_KEYS but for key_hi at the query's end) of those the query sees, and
     * saves each query's running maximum and sum at ms[2 (t n_head + h)] and [+ 1]
     * (token t, head h), with which fast_attention merges the ranges' outputs. A
     * query that sees no key of the range saves a sum of 0 (its output unused). */
    int key_lo, key_hi;
    float *ms;
    /* then_n > 0: keys [then_kb, then_kb + then_n) of kv head then_kvh, the first step
     * of the call the thread likely makes next: a kernel may ask the caches for them
     * during its last step, so that the next call does not start on cold rows. A hint,
     * read by no arithmetic; then_n <= CPU_ATTN_KEYS. */
    int then_kvh, then_kb, then_n;
    /* A typed cache (backend.h: al_backend_ops.kv_types): k or v is NULL, and kq or vq
     * holds rows of k_type or v_type, k_ldb or v_ldb bytes apart, kv head kvh at byte
     * kvh * (its head's bytes) of a row. The kernels then read each step's keys and
     * values through cpu_attn_stage, which converts them with kv_rows into the tile's
     * scratch: the cache is read as it is stored, and no copy of it is made. */
    uint32_t k_type, v_type;
    const uint8_t *kq, *vq;
    int64_t k_ldb, v_ldb;
    /* n (a multiple of the type's block) elements of type from src into dst as floats,
     * each exactly the value quant_dequantize gives */
    void (*kv_rows)(uint32_t type, const uint8_t *src, float *dst, int n);
} cpu_attn_args;

/* Queries [q0, q0 + nq) of kv head kvh (query j is token j / G, head kvh*G + j % G,
 * G = n_head / n_head_kv), nq <= attn_lanes. scratch holds cpu_attn_scratch floats.
 *
 * Every kernel visits key positions in steps of CPU_ATTN_KEYS that start at multiples
 * of it, from the step holding the tile's first visible key to its last, so that the
 * steps a query sees do not depend on its tile mates; keys a lane does not see add
 * exact zeros. A lane's running maximum starts at -FLT_MAX, not -inf: a lane whose
 * window starts after the tile's first step sees only masked (-inf) scores there, and
 * its rescale exp(max - new max) would be exp(-inf - -inf) = NaN; from -FLT_MAX it is
 * exp(0) = 1, which leaves the lane's zero sums zero. Once a lane sees a key, the
 * rescale is exp(-FLT_MAX - score) = 0, as it was from -inf, so a causal attention
 * (window 0) gives the same bits either way.
 *
 * A sink is one more score with a zero value, seen before every key: its lane starts
 * with the sink as the running maximum and e^(sink - sink) = 1 as the running sum
 * (cpu_attn_lane_start), and the steps rescale that 1 like any other term. */
typedef void (*cpu_attn_fn)(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch);

/* The key positions each lane j of a tile sees, lo[j] .. pos[j] (lanes from nq on
 * repeat the last query), and the tile's span: returns the end of its last step and
 * sets *begin to the start of its first. */
static inline int cpu_attn_tile_keys(const cpu_attn_args *a, int q0, int nq, int lanes, int *lo,
                                     int *pos, int *begin) {
    const int g = a->n_head / a->n_head_kv;
    int p_end = 0, p_lo = a->n_past + a->n_tokens;
    for (int j = 0; j < lanes; j++) {
        const int p = a->n_past + (q0 + (j < nq ? j : nq - 1)) / g;
        pos[j] = p;
        lo[j] = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        if (a->key_hi > 0) { /* a range of the keys (cpu_attn_args) */
            if (lo[j] < a->key_lo) lo[j] = a->key_lo;
            if (pos[j] > a->key_hi - 1) pos[j] = a->key_hi - 1;
        }
        if (pos[j] + 1 > p_end) p_end = pos[j] + 1;
        if (lo[j] < p_lo) p_lo = lo[j];
    }
    *begin = p_lo / CPU_ATTN_KEYS * CPU_ATTN_KEYS;
    return p_end;
}

/* A range's running maximum and sum of each query of the tile (cpu_attn_args.ms). */
static inline void cpu_attn_save_ms(const cpu_attn_args *a, int kvh, int q0, int nq,
                                    const float *mx, const float *sum) {
    const int g = a->n_head / a->n_head_kv;
    for (int j = 0; j < nq; j++) {
        const int qi = q0 + j, t = qi / g, h = kvh * g + qi % g;
        a->ms[2 * (t * a->n_head + h)] = mx[j];
        a->ms[2 * (t * a->n_head + h) + 1] = sum[j];
    }
}

/* The running maximum and sum each lane j of a tile starts from (lanes from nq on
 * repeat the last query): -FLT_MAX and 0 without sinks (cpu_attn_fn), else the lane's
 * sink and e^0 = 1. A sink of -inf is no sink: it starts from -FLT_MAX and e^-inf = 0,
 * as without one. */
static inline void cpu_attn_lane_start(const cpu_attn_args *a, int kvh, int q0, int nq,
                                       int lanes, float *mx, float *sum) {
    const int g = a->n_head / a->n_head_kv;
    for (int j = 0; j < lanes; j++) {
        mx[j] = -FLT_MAX;
        sum[j] = 0.0f;
        if (!a->sinks) continue;
        const float sink = a->sinks[kvh * g + (q0 + (j < nq ? j : nq - 1)) % g];
        if (sink > mx[j]) mx[j] = sink;
        sum[j] = expf(sink - mx[j]);
    }
}

/* The offset in floats, from a->k or a->v, of kv head kvh in cache row r. */
static inline int64_t cpu_attn_row_off(const cpu_attn_args *a, int kvh, int r) {
    return (int64_t)r * a->ldk + (a->one_head ? 0 : (int64_t)kvh * a->head_dim);
}

/* Offsets in floats, from a->k or a->v, of kv head kvh at key positions [kb, kb + n):
 * position p lies in row (p - pos0) % cap. One division per step, not per key. */
static inline void cpu_attn_key_rows(const cpu_attn_args *a, int kvh, int kb, int n,
                                     int64_t *off) {
    int r = (kb - a->pos0) % a->cap;
    if (r >= 0 && r + n <= a->cap) { /* no wrap (nearly always): a loop that vectorizes */
        const int64_t o = cpu_attn_row_off(a, kvh, r);
        for (int i = 0; i < n; i++)
            off[i] = o + (int64_t)i * a->ldk;
        return;
    }
    for (int i = 0; i < n; i++) {
        off[i] = cpu_attn_row_off(a, kvh, r);
        if (++r == a->cap) r = 0;
    }
}

/* The rows a kernel's step at kb asks the caches for while it runs (n of them, into
 * next; returns n): the next step's, or at a range's last step the hint's (then_n);
 * none in a thread's copy of one head (one_head), one stream the hardware follows. */
static inline int cpu_attn_next_rows(const cpu_attn_args *a, int kvh, int kb, int64_t *next) {
    const int end = a->key_hi > 0 ? a->key_hi : a->n_past + a->n_tokens; /* a range's end */
    const int left = end - (kb + CPU_ATTN_KEYS);
    if (a->one_head) return 0;
    if (left > 0) {
        const int n = left < CPU_ATTN_KEYS ? left : CPU_ATTN_KEYS;
        cpu_attn_key_rows(a, kvh, kb + CPU_ATTN_KEYS, n, next);
        return n;
    }
    if (a->then_n > 0) cpu_attn_key_rows(a, a->then_kvh, a->then_kb, a->then_n, next);
    return a->then_n > 0 ? a->then_n : 0;
}

/* Floats of per-thread scratch the attention kernels need: their tile's, then a step's
 * keys and values from a typed cache (cpu_attn_stage). */
static inline int64_t cpu_attn_tile_scratch(int lanes, int head_dim) {
    return ((int64_t)lanes * (2 * head_dim + CPU_ATTN_KEYS + 8) + 15) / 16 * 16;
}
static inline int64_t cpu_attn_scratch(int lanes, int head_dim) {
    return cpu_attn_tile_scratch(lanes, head_dim) + 2 * CPU_ATTN_KEYS * (int64_t)head_dim;
}

/* The step at keys [kb, kb + n) of kv head kvh as a kernel reads it: a itself where the
 * caches are f32; for a typed cache (cpu_attn_args.kq), tmp over the step's keys and
 * values converted into stage ([CPU_ATTN_KEYS][head_dim] keys, then values), as a copy
 * of one head (one_head) whose row i holds position kb + i. The step's arithmetic is
 * then that of an f32 cache holding the converted values, bit for bit. Asks the caches
 * for the next step's rows meanwhile, as the f32 kernels do for theirs. */
static inline const cpu_attn_args *cpu_attn_stage(const cpu_attn_args *a, int kvh, int kb, int n,
                                                  cpu_attn_args *tmp, float *stage) {
    if (!a->kq) return a;
    const int hd = a->head_dim;
    const int64_t khb = a->k_ldb / a->n_head_kv, vhb = a->v_ldb / a->n_head_kv; /* a head's */
    const uint8_t *kp = a->kq + khb * kvh, *vp = a->vq + vhb * kvh;
    float *ks = stage, *vs = stage + CPU_ATTN_KEYS * hd;
    int r = (kb - a->pos0) % a->cap; /* one division per step, none per key */
    for (int i = 0; i < n; i++) {
        a->kv_rows(a->k_type, kp + r * a->k_ldb, ks + (int64_t)i * hd, hd);
        a->kv_rows(a->v_type, vp + r * a->v_ldb, vs + (int64_t)i * hd, hd);
        if (++r == a->cap) r = 0;
    }
    /* r is now the next step's first row (a short step is a range's last) */
    const int end = a->key_hi > 0 ? a->key_hi : a->n_past + a->n_tokens;
    for (int i = 0; n == CPU_ATTN_KEYS && i < CPU_ATTN_KEYS && kb + n + i < end; i++) {
        for (int64_t b = 0; b < khb; b += 64) __builtin_prefetch(kp + r * a->k_ldb + b, 0, 2);
        for (int64_t b = 0; b < vhb; b += 64) __builtin_prefetch(vp + r * a->v_ldb + b, 0, 2);
        if (++r == a->cap) r = 0;
    }
    *tmp = *a;
    tmp->k = ks, tmp->v = vs, tmp->ldk = hd;
    tmp->kq = tmp->vq = NULL;
    tmp->one_head = true, tmp->cap = CPU_ATTN_KEYS, tmp->pos0 = kb;
    tmp->then_n = 0;
    return tmp;
}

/* ---- gated delta-net layers (delta.c) ------------------------------------------------- */

/* One value head of a delta_net call (backend.h: al_delta_shape): rows [r0, r1) of its
 * state, over the call's n positions one after another. Each row's arithmetic depends
 * on nothing but the row, the position's q, k, v and gates, so a position gives the
 * same bits whatever else is in its batch, whichever rows a thread takes. */
typedef struct cpu_delta_args {
    float *S;                /* the head's state [d][d]; row r: value dimension r */
    int d, r0, r1;
    int64_t n;               /* positions */
    const float *q, *k, *v;  /* position 0's query and key of the head's key head, as
                              * the convolution gives them (l2-normed by the kernel),
                              * and its value; position t's at + t ld */
    int64_t ld;
    const float *alpha, *beta; /* position 0's raw gates of the head; t's at + t
                                * ld_alpha, + t ld_beta */
    int64_t ld_alpha, ld_beta;
    float dt_bias, a;        /* the head's dt_bias and a (cpu_delta_gates) */
    float eps;
    float *out;              /* position 0's output of the head; t's at + t ldo */
    int64_t ldo;
    float *scratch;          /* 2 d floats, 64-byte aligned: the normed q and k */
} cpu_delta_args;
typedef void (*cpu_delta_fn)(const cpu_delta_args *a);

/* A position's decay e^g, g = softplus(alpha + dt_bias) a, and b = sigmoid(beta), as
 * the reference computes them (libm's expf and log1pf, whatever the ISA). */
static inline void cpu_delta_gates(const cpu_delta_args *a, int64_t t, float *decay, float *b) {
    const float x = a->alpha[t * a->ld_alpha] + a->dt_bias;
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    *decay = expf(softplus * a->a);
    *b = 1.0f / (1.0f + expf(-a->beta[t * a->ld_beta]));
}

enum { CPU_CONV_MAX_K = 16 }; /* wider convolutions take the reference's */

/* Channels [c0, c1) of an ssm_conv call (backend.h) over its n positions: input s of
 * the sequence is state row s for s < K - 1 (zeros where fresh), else x row s - K + 1. */
typedef struct cpu_conv_args {
    const float *x;      /* [n][C], rows ldx floats apart */
    int64_t ldx;
    float *state;        /* [K - 1][C], rows lds floats apart */
    int64_t lds;
    const float *w;      /* channel c's K taps at w + c ldw */
    int64_t ldw;
    float *out;          /* [n][C], rows ldo floats apart */
    int64_t ldo;
    int64_t n, c0, c1;
    int k;
    bool fresh;
} cpu_conv_args;
typedef void (*cpu_conv_fn)(const cpu_conv_args *a);

/* Input s of a convolution's sequence (cpu_conv_args), or NULL for a fresh state's. */
static inline const float *cpu_conv_input(const cpu_conv_args *a, int64_t s) {
    const int64_t k1 = a->k - 1;
    if (s >= k1) return a->x + (s - k1) * a->ldx;
    return a->fresh ? NULL : a->state + s * a->lds;
}

/* The per-ISA kernels of delta_net, ssm_conv and sigmoid_mul: delta_avx512.c,
 * delta_avx2.c, and the portable ones in delta.c. */
void cpu_delta_scalar(const cpu_delta_args *a);
void cpu_conv_scalar(const cpu_conv_args *a);
void cpu_sigmoid_mul_scalar(float *x, const float *g, int64_t n);
void cpu_delta_avx2(const cpu_delta_args *a);
void cpu_conv_avx2(const cpu_conv_args *a);
void cpu_sigmoid_mul_avx2(float *x, const float *g, int64_t n);
void cpu_delta_512(const cpu_delta_args *a);
void cpu_conv_512(const cpu_conv_args *a);
void cpu_sigmoid_mul_512(float *x, const float *g, int64_t n);

typedef struct cpu_kernels {
    cpu_isa isa;
    int rows;              /* R: panel rows (lanes of the matmul kernels) */
    int tile;              /* TT: tokens per activation tile */
    bool narrow;           /* mk_q reads a single token's tile of the TT = 1 layout (2:
                            * its two passes) in place (cpu_mk_args.narrow) */
    int attn_lanes;        /* queries per attention tile */
    int attn_align;        /* attn needs head_dim to be a multiple of this */
    bool attn_ranges;      /* attn takes a range of keys (cpu_attn_args.key_hi) */
    uint64_t signed_types; /* bit t: pack_q[t] writes signed weights, offset 0 */
    cpu_quant_fn quantize;
    cpu_pack_q_fn pack_q[AL_TYPE_COUNT]; /* NULL: cpu_pack_q_generic */
    cpu_mk_fn mk_q;
    uint64_t inplace_types; /* bit t: mk_q also reads type t in place (panel NULL) for
                             * 1 or 2 tokens over a full panel, skipping the pack: few
                             * tokens use each packed panel once, so storing and
                             * reloading it is pure cost */
    uint64_t x16_types; /* bit t: a type t weight may take AL_LAYOUT_X16 (R 8 or 16),
                         * which mk_q reads in place (as inplace_types, whatever those
                         * are) and pack_x16[t] packs */
    cpu_pack_x16_fn pack_x16[AL_TYPE_COUNT];
    cpu_x16_pack_fn x16_pack; /* the rewrite at load (cpu_x16_pack's bytes) */
    /* mk_q in place takes a whole x16 group of 16 rows where asked (cpu_mk_args): one
     * pass reads each of the group's cache lines once, where a panel of 8 rows reads
     * half of every line and the other panel reads them again from cache */
    bool x16_group;
    cpu_pack_f_fn pack_f;
    cpu_mk_fn mk_f;
    cpu_attn_fn attn;
    void (*kv_rows)(uint32_t type, const uint8_t *src, float *dst, int n); /* cpu_attn_args */
    /* NULL, or a kernel for tiles of at most attn_few_lanes queries (token generation:
     * the G = n_head / n_head_kv queries of a kv head), which gives attn's bits */
    cpu_attn_fn attn_few;
    int attn_few_lanes;
    void (*rms_norm)(const float *x, const float *w, float eps, float *out, int64_t n);
    void (*silu_mul)(float *g, const float *u, int64_t n);
    void (*gelu_mul)(float *g, const float *u, int64_t n); /* within ~1e-6 of the reference */
    /* backend.h swiglu_oai on one row; within a few 1e-7 of the reference, plus the
     * rounding of alpha * x in e^(-alpha x) where sigmoid is tiny */
    void (*swiglu_oai)(float *g, const float *u, float alpha, float limit, int64_t n);
    void (*scale)(float *x, float s, int64_t n);
    void (*add)(float *x, const float *y, int64_t n);
    /* x *= sigmoid(g) as x / (1 + e^-g) (backend.h sigmoid_mul) on one row */
    void (*sigmoid_mul)(float *x, const float *g, int64_t n);
    cpu_delta_fn delta; /* one head's rows of delta_net (cpu_delta_args) */
    cpu_conv_fn conv;   /* channels of ssm_conv (cpu_conv_args) */
    /* the sum of n 64-bit words (n a multiple of 16, p 64-byte aligned): a read at the
     * ISA's full width, for bench's memory bandwidth test */
    uint64_t (*sum_u64)(const uint64_t *p, int64_t n);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;

/* The AVX2 attention kernel (attn_avx2.c), for cpu_kernels_avx2: tiles of 8 queries in
 * the lanes. */
void cpu_attn_avx2(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch);

/* The AVX-512 attention kernels (attn_avx512.c), for cpu_kernels_avx512: queries in
 * the lanes (tiles of up to 16), and keys and dimensions in the lanes (tiles of up to
 * CPU_ATTN_FEW), each query with the same operations in the same order. */
void cpu_attn_512(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch);
void cpu_attn_512_few(const cpu_attn_args *a, int kvh, int q0, int nq, float *scratch);

/* cpu_attn_args.kv_rows with AVX2 (attn_avx2.c) and AVX-512 (attn_avx512.c). */
void cpu_kv_rows_avx2(uint32_t type, const uint8_t *src, float *dst, int n);
void cpu_kv_rows_512(uint32_t type, const uint8_t *src, float *dst, int n);

/* ---- AMX (kernels_amx.c) -------------------------------------------------------------- */

enum { CPU_AMX_TOK = 16 }; /* tokens per AMX tile; batches are padded to a multiple */

/* NULL when this process can run the AMX kernels (AVX-512, CPUID AMX-TILE and
 * AMX-INT8, XCR0's tile state, and the kernel's permission, which the first call asks
 * for); else why not. */
const char *cpu_amx_unavailable(void);

/* Per thread, around a run of cpu_amx_mk_q calls for sub-blocks of b: loads the tile
 * configuration; cpu_amx_end releases the tiles. */
void cpu_amx_begin(int b);
void cpu_amx_end(void);

/* Makes the weights of a panel of 16 rows signed, q - offset, in place: what
 * cpu_amx_mk_q expects of a type with a constant offset. */
void cpu_amx_sign_panel(uint8_t *panel, int64_t n_sb, int b, int offset);

/* One AMX call: 1..CPU_AMX_TOK tokens (act: a tile in the AMX layout, its tokens past
 * n_tok zero) times a full AVX-512 panel (signed
 * for a constant offset), as mk_q of cpu_kernels_avx512 gives it, bit for bit. */
void cpu_amx_mk_q(const cpu_mk_args *a);

/* ---- the x16 layout (x16.c) ------------------------------------------------------------
 *
 * In the rows layout a GEMV reads a panel of 16 rows as 16 interleaved streams and
 * gathers or transposes each block's fields into lanes, one row per lane. AL_LAYOUT_X16
 * stores each group of 16 rows the way the kernels consume them, in the same bytes:
 * block by block, field by field, each field in units of 1, 2 or 4 bytes with the 16
 * rows' units side by side. Byte o of a row's blocks (o counted from the group's first
 * block) in a field of u-byte units starting at f lies at
 *   16 (f + u k) + u r + (o - f - u k),   k = (o - f) / u,
 * that is, row 0's unit at 16 times its offset in the row. A group takes 16 times a
 * row's bytes, so group g starts where row 16 g did, and a view of whole groups keeps
 * its offset. A GEMV then reads one sequential stream and loads each field of 16 rows
 * with one vector load; the values are the same bytes, and so are the results.
 */

/* A type's fields in block order: offset and size in bytes, and the unit (1, 2 or 4
 * bytes) in which x16 sets 16 rows side by side. */
typedef struct cpu_x16_field {
    uint8_t off, size, unit;
} cpu_x16_field;

typedef struct cpu_x16_type {
    int block_bytes;
    int n_fields;
    cpu_x16_field f[5];
} cpu_x16_type;

/* The fields of a type that takes the layout, or NULL. */
const cpu_x16_type *cpu_x16_of(uint32_t type);

/* Whether a weight of this type, ne[1] rows and views of view_rows rows can take the
 * layout: a type with fields in x16.c's table, and groups of 16 that no view splits. */
bool cpu_x16_fits(uint32_t type, int64_t n_rows, int64_t view_rows);

/* Rewrites groups [g0, g1) of 16 rows from the rows layout (src) into the x16 layout
 * (dst, the same size); n_blk blocks per row, rows row_bytes apart. The portable
 * definition; cpu_kernels.x16_pack does the same faster, byte for byte. */
void cpu_x16_pack(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t row_bytes,
                  int64_t n_blk, int64_t g0, int64_t g1);

/* The portable pack through cpu_qtype.decode, for any R; every ISA falls back to it. */
void cpu_pack_q_generic(uint32_t type, int r, const uint8_t *w, uint64_t row_bytes, int n_rows,
                        int64_t blk0, int64_t n_blk, uint8_t *panel);

/* Reads back row `slot` of an activation tile as floats (da * qa): the activations the
 * integer kernels actually multiply, for tests. */
void cpu_act_dequantize(const uint8_t *tile, int64_t n, int b, int slot, int tt, float *x);

/* sum_u64 of the best ISA this CPU runs. */
uint64_t cpu_sum_u64(const uint64_t *p, int64_t n);

/* The activation format of a weight type on an ISA. */
cpu_act_fmt cpu_act_format(const cpu_kernels *k, uint32_t type);

/* ---- the backend object ------------------------------------------------------------- */

enum { CPU_ROPE_MEMO = 2, CPU_ROPE_MAX_HALF = 128 };

/* A decoded position's rope angles under one al_rope (cpu.c: rope_memo). */
typedef struct cpu_rope_memo {
    bool valid, has_factors;
    int pos, n_rot;
    float freq_base, freq_scale;
    float factors[CPU_ROPE_MAX_HALF];
    float cs[CPU_ROPE_MAX_HALF], sn[CPU_ROPE_MAX_HALF];
} cpu_rope_memo;

typedef struct cpu_backend {
    al_backend base;
    al_pool *pool;
    int n_threads;
    pthread_mutex_t lock;      /* one op at a time: the scratch is shared */
    const cpu_kernels *k;      /* NULL: reference ops */
    bool amx;                  /* batches of quantized matmuls run on AMX tiles */
    int act_passes;            /* cpu_act_mode: 8-bit passes over each activation */
    int64_t max_cols, max_ctx; /* what reserve() prepared for */
    float *work;               /* reference ops: [n_threads][work_per_thread] floats */
    uint64_t work_per_thread;
    uint8_t *act; /* fast matmul: quantized activations of act_tok tokens */
    uint64_t act_bytes;
    int act_tok;
    struct mm_share *shares; /* fast ops: [n_threads] shares of a GEMV's rows (mm.h) */
    uint8_t *tls; /* fast ops: [n_threads][tls_bytes] panels and scratch */
    uint64_t tls_bytes;
    float *kv_copy; /* fast attention: [n_threads] one kv head's keys and values */
    uint64_t kv_copy_floats; /* allocated, over all threads */
    float *attn_part;          /* fast attention: the outputs of its ranges of keys */
    uint64_t attn_part_floats;
    uint64_t n_attn_ranged;    /* attention passes run in ranges of keys (tests) */
    uint64_t n_narrow;         /* matmuls of one token on a narrow tile (tests) */
    struct moe_job *moe_job; /* fast moe_ffn: its plan of a batch's experts (moe.c) */
    bool moe_fuse;   /* moe_ffn fuses where it can (else the plain ops run) */
    bool fuse;       /* matmul_multi, matmul_glu and matmul_add fuse where they can */
    bool x16;        /* weight_pack moves weights into AL_LAYOUT_X16 where they fit */
    bool x16_pf;     /* the in-place kernels prefetch x16 streams (cpu_mk_args.w_x16_pf) */
    void **x16_mem;  /* [n_x16] the weights it moved; freed with the backend */
    int n_x16;
    cpu_rope_memo rope_memo[CPU_ROPE_MEMO]; /* a decoded token's cos/sin; under lock */
    int rope_memo_next;                     /* the entry to replace next */
} cpu_backend;

static inline float *cpu_f32_row(const al_tensor *t, int64_t row) {
    return (float *)((char *)t->data + t->offset + (uint64_t)row * t->row_bytes);
}

static inline const uint8_t *cpu_raw_row(const al_tensor *t, int64_t row) {
    return (const uint8_t *)t->data + t->offset + (uint64_t)row * t->row_bytes;
}

/* Sizes the reference ops' scratch; called by reserve with the lock held. */
bool ref_work_reserve(cpu_backend *cb, uint64_t n_floats);

/* The reference ops (ops_ref.c), with the signatures of al_backend_ops. */
void ref_get_rows(al_backend *be, const al_tensor *table, const int32_t *ids, int n,
                  al_tensor *out);
void ref_rms_norm(al_backend *be, const al_tensor *x, const al_tensor *w, float eps,
                  al_tensor *out);
void ref_matmul(al_backend *be, const al_tensor *x, const al_tensor *w, const al_tensor *bias,
                al_tensor *out);
void ref_rope(al_backend *be, al_tensor *x, int n_head, int head_dim, int pos0,
              const al_rope *rope);
void ref_attention(al_backend *be, const al_tensor *q, const al_tensor *k, const al_tensor *v,
                   al_tensor *k_cache, al_tensor *v_cache, const al_attn_shape *shape,
                   al_tensor *out);
void ref_silu_mul(al_backend *be, al_tensor *g, const al_tensor *u);
void ref_gelu_mul(al_backend *be, al_tensor *g, const al_tensor *u);
void ref_swiglu_oai(al_backend *be, al_tensor *g, const al_tensor *u, float alpha, float limit);
void ref_scale(al_backend *be, al_tensor *x, float s);
void ref_add(al_backend *be, al_tensor *x, const al_tensor *y);
void ref_copy(al_backend *be, const al_tensor *src, al_tensor *dst);
void ref_sigmoid_mul(al_backend *be, al_tensor *x, const al_tensor *g);
void ref_ssm_conv(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                  bool fresh, al_tensor *out);
void ref_delta_net(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                   const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                   al_tensor *state, bool fresh, const al_delta_shape *s, al_tensor *out);
void ref_add_rows(al_backend *be, al_tensor *x, const al_tensor *y, const int32_t *ids,
                  const float *w, int n);
/* The fused ops, equal bit for bit to the plain reference ops they stand for. */
bool ref_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                    const al_tensor *bias, al_tensor *out);
bool ref_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                    const al_tensor *wu, al_glu act, al_tensor *out);
bool ref_rope_qk(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                 int head_dim, int pos0, const al_rope *rope);
bool ref_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);
/* x[c] += w * y[c] for c < n: add_rows' step, which the fast moe_ffn takes too, so
 * that the two round alike whatever flags each file is compiled with. */
void cpu_add_scaled(float *x, const float *y, float w, int64_t n);

/* Writes the batch's k and v ([n_tokens][n_head_kv * head_dim]) to rows p % cap of
 * the caches, after checking that the caches can hold what the batch needs
 * (al_attn_shape); the first step of every attention op. */
void cpu_attn_write_kv(const al_tensor *k, const al_tensor *v, al_tensor *k_cache,
                       al_tensor *v_cache, const al_attn_shape *s);
/* cpu_attn_write_kv of the batch's token t alone. */
void cpu_attn_write_kv_row(const al_tensor *k, const al_tensor *v, al_tensor *k_cache,
                           al_tensor *v_cache, const al_attn_shape *s, int t);
/* Each of the n_heads heads of rows [t0, t1) of x rotated in place (al_hadamard in
 * blocks of al_hadamard_n(head_dim)): the queries before a rotated cache's attention,
 * its output after. */
void cpu_rotate_heads(const al_tensor *x, int t0, int t1, int n_heads, int head_dim);
/* cpu_attn_args.kv_rows by quant_dequantize. */
void cpu_kv_rows_ref(uint32_t type, const uint8_t *src, float *dst, int n);
/* The factor of q.k: s->scale, or 1 / sqrt(head_dim) when it is 0. */
float cpu_attn_scale(const al_attn_shape *s);

/* The fast ops (matmul.c). They take the backend lock themselves. */
void fast_matmul(al_backend *be, const al_tensor *x, const al_tensor *w, const al_tensor *bias,
                 al_tensor *out);
void fast_attention(al_backend *be, const al_tensor *q, const al_tensor *k, const al_tensor *v,
                    al_tensor *k_cache, al_tensor *v_cache, const al_attn_shape *shape,
                    al_tensor *out);
/* The routed experts of a few tokens in two pool runs (moe.c); false, having done
 * nothing, for a batch it does not fuse. */
bool fast_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);
/* A few tokens' matmuls of one input and the op after them in one pool run (fuse.c,
 * backend.h's fused ops); false, having done nothing, for a batch they do not fuse. */
bool fast_matmul_multi(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                       int n, const al_tensor *const *w, const al_tensor *const *bias,
                       al_tensor *const *out);
bool fast_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                     const al_tensor *wu, al_glu act, al_tensor *out);
bool fast_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                     const al_tensor *bias, al_tensor *out);
/* The recurrent ops of gated delta-net layers on the kernels (delta.c); the lock is
 * taken inside. */
void fast_delta_net(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                    const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                    al_tensor *state, bool fresh, const al_delta_shape *s, al_tensor *out);
void fast_ssm_conv(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                   bool fresh, al_tensor *out);
/* Bytes of the plan fast_moe_ffn keeps in cpu_backend.moe_job. */
uint64_t fast_moe_job_bytes(void);
/* Per-thread bytes the fast matmul and attention need for rows of max_cols. */
uint64_t fast_tls_bytes(const cpu_kernels *k, int64_t max_cols);
/* Bytes of quantized activations for n_tok tokens of max_cols. */
uint64_t fast_act_bytes(const cpu_kernels *k, int64_t max_cols, int n_tok);

#endif /* AL_CPU_OPS_H */
