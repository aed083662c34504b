/* vk_pairs.h: the tensors and random data of test_vulkan.c, the Vulkan op tests: a
 * tensor on both backends (pair: the CPU reference's and the Vulkan backend's, filled
 * with the same floats), NMSE between them, and random weights of every type with
 * small finite scales. Included once per test program (test_vulkan.c,
 * test_vkattn.c, test_vkdelta.c), after the Vulkan headers: the globals and helpers
 * are its own (static; the weight helpers and comparisons inline, as a program may not
 * use them).
 */
#ifndef AL_TEST_VK_PAIRS_H
#define AL_TEST_VK_PAIRS_H

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "format/quant.h"
#include "test.h"
#include "util.h"

static al_backend *g_cpu, *g_vk;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

/* host memory given to weight_load must outlive the backend (imports use it in place) */
static void *g_keep[4096];
static int g_n_keep;

static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static float rndf(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

static void *keep_alloc(size_t n) {
    size_t rounded = (n + 4095) & ~(size_t)4095;
    void *p = al_aligned_alloc(4096, rounded);
    AL_ASSERT(p && g_n_keep < 4096);
    memset(p, 0, rounded);
    g_keep[g_n_keep++] = p;
    return p;
}

/* ---- tensors on both backends ---------------------------------------------------------- */

typedef struct pair {
    al_tensor cpu, vk;   /* the same tensor on each backend */
    int64_t cols, rows;
} pair;

/* A weight (any type) from host bytes, loaded on both backends. */
static inline void weight_pair(uint32_t type, int64_t cols, int64_t rows, const void *bytes,
                               pair *p) {
    uint64_t rb = quant_row_bytes(type, cols);
    al_tensor w = {.type = type, .ne = {cols, rows}, .data = (void *)bytes, .row_bytes = rb};
    p->cpu = p->vk = w;
    p->cols = cols;
    p->rows = rows;
    if (g_cpu->ops->weight_load) CHECK(g_cpu->ops->weight_load(g_cpu, &p->cpu) == AL_OK);
    al_status st = g_vk->ops->weight_load(g_vk, &p->vk);
    CHECK_MSG(st == AL_OK, "weight_load %s: %s", quant_type_name(type), al_last_error());
}

/* An activation tensor [rows][cols] holding data on both backends. The Vulkan one is
 * filled through the op table alone: get_rows of an f32 weight holding the data. */
static void act_pair(int64_t cols, int64_t rows, const float *data, pair *p) {
    p->cols = cols;
    p->rows = rows;
    CHECK(g_cpu->ops->tensor_alloc(g_cpu, cols, rows, &p->cpu) == AL_OK);
    CHECK(g_vk->ops->tensor_alloc(g_vk, cols, rows, &p->vk) == AL_OK);
    if (!data) return;
    memcpy(p->cpu.data, data, (size_t)(cols * rows) * sizeof(float));
    float *host = keep_alloc((size_t)(cols * rows) * sizeof(float));
    memcpy(host, data, (size_t)(cols * rows) * sizeof(float));
    al_tensor table = {.type = AL_TYPE_F32, .ne = {cols, rows}, .data = host,
                       .row_bytes = (uint64_t)cols * sizeof(float)};
    CHECK(g_vk->ops->weight_load(g_vk, &table) == AL_OK);
    int32_t *ids = malloc((size_t)rows * sizeof *ids);
    for (int i = 0; i < rows; i++) ids[i] = i;
    g_vk->ops->get_rows(g_vk, &table, ids, (int)rows, &p->vk);
    free(ids);
}

static float *random_floats(size_t n, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rndf() * scale;
    return v;
}

static void free_pair(pair *p) {
    g_cpu->ops->tensor_free(g_cpu, &p->cpu);
    g_vk->ops->tensor_free(g_vk, &p->vk);
}

/* NMSE of the Vulkan tensor against the CPU one, rows [row0, row0 + n). */
static inline double compare_rows(const pair *p, int64_t row0, int64_t n) {
    size_t count = (size_t)(n * p->cols);
    float *a = malloc(count * sizeof *a);
    al_tensor v = al_tensor_rows(&p->vk, row0, n), c = al_tensor_rows(&p->cpu, row0, n);
    g_vk->ops->tensor_read(g_vk, &v, a, count * sizeof(float));
    double e = test_nmse(a, (const float *)((char *)c.data + c.offset), count);
    free(a);
    return e;
}

static inline double compare(const pair *p) { return compare_rows(p, 0, p->rows); }

/* ---- random weights of every type ----------------------------------------------------------- */

static void put_f16(uint8_t *p, float v) {
    uint16_t h = al_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random blocks: random quant bytes, small finite scales where the layout has them.
 * MXFP4's 17-byte blocks make rows of 7 blocks start at odd bytes, and tensors of an odd
 * number of rows end at one. */
static inline void *random_weight(uint32_t type, int64_t cols, int64_t rows) {
    uint64_t rb = quant_row_bytes(type, cols), n = rb * (uint64_t)rows;
    uint8_t *b = keep_alloc(n);
    if (type == AL_TYPE_F32) {
        for (uint64_t i = 0; i < n / 4; i++) ((float *)b)[i] = rndf();
        return b;
    }
    if (type == AL_TYPE_F16 || type == AL_TYPE_BF16) {
        for (uint64_t i = 0; i < n / 2; i++) {
            float v = rndf();
            uint32_t bits;
            memcpy(&bits, &v, 4);
            if (type == AL_TYPE_F16) put_f16(b + 2 * i, v);
            else b[2 * i] = (uint8_t)(bits >> 16), b[2 * i + 1] = (uint8_t)(bits >> 24);
        }
        return b;
    }
    for (uint64_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
    const quant_traits *tr = quant_get_traits(type);
    for (uint64_t blk = 0; blk < n / tr->type_size; blk++) {
        uint8_t *q = b + blk * tr->type_size;
        switch (type) { /* where each layout keeps its fp16 d (and dmin / m) */
        case AL_TYPE_Q4_1: case AL_TYPE_Q5_1: case AL_TYPE_Q8_1: /* d, then m (or s) */
            put_f16(q, rndf() * 0.05f);
            put_f16(q + 2, rndf() * 0.05f);
            break;
        case AL_TYPE_Q4_0: case AL_TYPE_Q5_0: case AL_TYPE_Q8_0:
            put_f16(q, rndf() * 0.05f);
            break;
        case AL_TYPE_Q2_K: put_f16(q + 80, rndf() * 0.05f); put_f16(q + 82, rndf() * 0.05f); break;
        case AL_TYPE_Q3_K: put_f16(q + 108, rndf() * 0.05f); break;
        case AL_TYPE_Q4_K: case AL_TYPE_Q5_K:
            put_f16(q, rndf() * 0.05f);
            put_f16(q + 2, rndf() * 0.05f);
            break;
        case AL_TYPE_Q6_K: put_f16(q + 208, rndf() * 0.05f); break;
        case AL_TYPE_MXFP4: q[0] = (uint8_t)(118 + rnd() % 8); break; /* 2^-9 .. 2^-2 */
        case AL_TYPE_Q8_K: {
            float d = rndf() * 0.01f;
            memcpy(q, &d, 4);
            break;
        }
        default: break;
        }
    }
    return b;
}

static const uint32_t g_types[] = {
    AL_TYPE_F32, AL_TYPE_F16, AL_TYPE_BF16, AL_TYPE_Q4_0, AL_TYPE_Q4_1, AL_TYPE_Q5_0,
    AL_TYPE_Q5_1, AL_TYPE_Q8_0, AL_TYPE_Q8_1, AL_TYPE_Q2_K, AL_TYPE_Q3_K, AL_TYPE_Q4_K,
    AL_TYPE_Q5_K, AL_TYPE_Q6_K, AL_TYPE_Q8_K, AL_TYPE_MXFP4,
};
enum { N_TYPES = sizeof g_types / sizeof *g_types };

/* An awkward row length for a type: a few blocks, or an odd length for floats. */
static inline int64_t awkward_cols(uint32_t type) {
    uint32_t bs = quant_get_traits(type)->block_size;
    return bs == 1 ? 203 : bs == 32 ? 32 * 7 : 256 * 2;
}

#endif /* AL_TEST_VK_PAIRS_H */
