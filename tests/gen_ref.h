/* gen_ref.h: the harness of the tests that hold generated models' logits to llama.cpp's
 * (test_glm4moe, test_deepseek2, test_gemma4).
 *
 * A test lists its models (gen_ref_model: the gen-model flags, the sha256 of the file
 * the reference was computed from, the bars), calls gen_ref_setup, which writes them
 * into a temporary folder, and runs the cases below on them. The references are
 * tests/data/NAME.logits.f32: llama.cpp's logits of tokens48.h's 48 tokens, [48][n_vocab]
 * float32, evaluated as one batch. Included once per test program. */
#ifndef AL_TEST_GEN_REF_H
#define AL_TEST_GEN_REF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"
#include "tokens48.h"

typedef struct gen_ref_model {
    const char *name, *flags, *sha256;
    /* the CPU's default mode, and --precise and Vulkan: the CPU's default rounds a
     * quantized file's activations to 8 bits as llama.cpp does, the others do not, so
     * their bar is that rounding's size */
    double max_nmse, max_nmse_exact;
} gen_ref_model;

enum { GEN_REF_MAX = 8 };

static struct {
    const gen_ref_model *models;
    int n, n_vocab, n_ctx;
    int mla_expand_min; /* al_context_params' for the contexts below */
    char dir[64];
    char paths[GEN_REF_MAX][128];
    bool have[GEN_REF_MAX];
} g_ref;

/* Writes the n models (with `anyllm gen-model`) into a temporary folder named after
 * tag; false (and a skip of the program) where no folder can be made. */
static inline bool gen_ref_setup(const gen_ref_model *models, int n, int n_vocab, int n_ctx,
                                 const char *tag) {
    if (n > GEN_REF_MAX) return false;
    g_ref.models = models, g_ref.n = n, g_ref.n_vocab = n_vocab, g_ref.n_ctx = n_ctx;
    snprintf(g_ref.dir, sizeof g_ref.dir, "/tmp/anyllm_%s_XXXXXX", tag);
    if (!mkdtemp(g_ref.dir)) return false;
    for (int i = 0; i < n; i++) {
        snprintf(g_ref.paths[i], sizeof g_ref.paths[i], "%s/%s.gguf", g_ref.dir, models[i].name);
        g_ref.have[i] = test_gen_model(g_ref.paths[i], models[i].flags, models[i].sha256);
    }
    return true;
}

static inline void gen_ref_teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_ref.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_ref.dir);
}

static inline al_model *gen_ref_load(int i, const char *backend) {
    al_model_params mp = al_model_default_params();
    mp.backend = backend;
    mp.n_threads = 2;
    al_model *m = NULL;
    if (!g_ref.have[i] || al_model_load(g_ref.paths[i], &mp, &m) != AL_OK)
        fprintf(stderr, "  %s on %s: %s\n", g_ref.models[i].name, backend,
                g_ref.have[i] ? al_last_error() : "not made (above)");
    return m;
}

/* The logits of the 48 tokens of model i on backend, evaluated in pieces of `piece`
 * tokens (48: one batch), with a cache of type kv, into out; false where a step fails. */
static inline bool gen_ref_logits(int i, const char *backend, int piece, al_kv_type kv,
                                  float *out) {
    al_model *m = gen_ref_load(i, backend);
    al_context *c = NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = g_ref.n_ctx;
    cp.type_k = cp.type_v = kv;
    cp.mla_expand_min = g_ref.mla_expand_min;
    bool ok = m && al_context_create(m, &cp, &c) == AL_OK;
    for (int t = 0; ok && t < N_TOK; t += piece) {
        const int n = N_TOK - t < piece ? N_TOK - t : piece;
        ok = al_eval(c, tokens + t, n, out + (size_t)t * g_ref.n_vocab, true) == AL_OK;
    }
    if (!ok && m) fprintf(stderr, "  %s on %s: %s\n", g_ref.models[i].name, backend, al_last_error());
    al_context_destroy(c);
    al_model_destroy(m);
    return ok;
}

/* Model i's logits on backend against llama.cpp's. */
static inline void gen_ref_case(int i, const char *backend, double max_nmse) {
    const size_t nl = (size_t)N_TOK * g_ref.n_vocab;
    char path[256];
    snprintf(path, sizeof path, "tests/data/%s.logits.f32", g_ref.models[i].name);
    float *ref = test_read_f32(path, nl), *got = malloc(nl * sizeof(float));
    if (ref && got && gen_ref_logits(i, backend, N_TOK, AL_KV_F32, got)) {
        const double e = test_nmse(got, ref, (int64_t)nl);
        printf("     %-24s %-12s NMSE %.2e against llama.cpp\n", g_ref.models[i].name, backend, e);
        CHECK_MSG(e <= max_nmse, "%s on %s: NMSE %.2e > %.0e", g_ref.models[i].name, backend, e,
                  max_nmse);
    } else {
        CHECK_MSG(false, "%s on %s: no logits", g_ref.models[i].name, backend);
    }
    free(ref), free(got);
}

/* Every model on the CPU, in the default mode and --precise. */
static inline void gen_ref_cpu(void) {
    for (int i = 0; i < g_ref.n; i++) {
        gen_ref_case(i, "cpu", g_ref.models[i].max_nmse);
        gen_ref_case(i, "cpu:precise", g_ref.models[i].max_nmse_exact);
    }
}

static inline bool gen_ref_have_gpu(void) {
    if (al_gpu_count() > 0) return true;
    TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
    return false;
}

/* Every model on Vulkan (lavapipe here), skipped without a device. */
static inline void gen_ref_vulkan(void) {
    if (!gen_ref_have_gpu()) return;
    for (int i = 0; i < g_ref.n; i++) gen_ref_case(i, "vulkan", g_ref.models[i].max_nmse_exact);
}

/* Token by token and in chunks of 20 the logits are the batch's, within max_nmse (0 on
 * the CPU, whose kernels split any batch alike): decoding reads the rows the prompt
 * wrote. */
static inline void gen_ref_pieces(int i, const char *backend, double max_nmse) {
    const size_t nl = (size_t)N_TOK * g_ref.n_vocab;
    float *batch = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    static const int pieces[] = {1, 20};
    if (gen_ref_logits(i, backend, N_TOK, AL_KV_F32, batch))
        for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
            CHECK(gen_ref_logits(i, backend, pieces[k], AL_KV_F32, got));
            const double e = test_nmse(got, batch, (int64_t)nl);
            printf("     %-24s %-12s pieces of %2d: NMSE %.2e against the batch\n",
                   g_ref.models[i].name, backend, pieces[k], e);
            CHECK_MSG(e <= max_nmse, "%s on %s, pieces of %d: NMSE %.2e against the batch",
                      g_ref.models[i].name, backend, pieces[k], e);
        }
    else
        CHECK_MSG(false, "%s on %s: no logits", g_ref.models[i].name, backend);
    free(batch), free(got);
}

/* Two sequences decoded at once (al_eval_multi, as `serve` does) give each one's logits
 * alone. */
static inline void gen_ref_multi(int i, const char *backend) {
    const int nv = g_ref.n_vocab;
    al_model *m = gen_ref_load(i, backend);
    al_context *c[2] = {NULL, NULL};
    al_context_params cp = al_context_default_params();
    cp.n_ctx = g_ref.n_ctx;
    bool ok = m && al_context_create(m, &cp, &c[0]) == AL_OK &&
              al_context_create(m, &cp, &c[1]) == AL_OK;
    float *alone = malloc(2 * (size_t)nv * sizeof(float)), *both = malloc(2 * (size_t)nv * sizeof(float));
    const int len[2] = {17, 30};
    const int32_t next[2] = {tokens[17], tokens[30]};
    for (int s = 0; ok && s < 2; s++) /* alone: the prompt, then the next token */
        ok = al_eval(c[s], tokens, len[s], NULL, false) == AL_OK &&
             al_eval(c[s], &next[s], 1, alone + (size_t)s * nv, false) == AL_OK &&
             al_context_truncate(c[s], len[s]) == AL_OK;
    ok = ok && al_eval_multi(c, next, 2, both) == AL_OK;
    CHECK_MSG(ok, "%s: %s", backend, al_last_error());
    if (ok) {
        const double e = test_nmse(both, alone, 2 * nv);
        CHECK_MSG(e <= 1e-10, "%s: two sequences at once, NMSE %.2e against each alone", backend, e);
    }
    free(alone), free(both);
    al_context_destroy(c[0]), al_context_destroy(c[1]);
    al_model_destroy(m);
}

/* A q8_0 cache (rotated) stays near the f32 one, within max_nmse, in a batch and token
 * by token (--precise: the cache's rounding alone). */
static inline void gen_ref_q8_cache(int i, double max_nmse) {
    const size_t nl = (size_t)N_TOK * g_ref.n_vocab;
    float *f32 = malloc(nl * sizeof(float)), *got = malloc(nl * sizeof(float));
    const bool ok = gen_ref_logits(i, "cpu:precise", N_TOK, AL_KV_F32, f32);
    CHECK(ok);
    for (int piece = 1; ok && piece <= N_TOK; piece += N_TOK - 1) {
        CHECK(gen_ref_logits(i, "cpu:precise", piece, AL_KV_Q8_0, got));
        const double e = test_nmse(got, f32, (int64_t)nl);
        printf("     %s, q8_0 cache, pieces of %2d: NMSE %.2e against f32\n",
               g_ref.models[i].name, piece, e);
        CHECK_MSG(e > 0 && e <= max_nmse, "pieces of %d: NMSE %.2e", piece, e);
    }
    free(f32), free(got);
}

#endif
