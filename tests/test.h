/* test.h: a minimal test harness. Each test program calls TEST_RUN(fn) per test and
 * returns test_finish(); the last line printed is "N passed, M failed", which
 * tests/run.sh sums over programs. CHECK records a failure and carries on. */
#ifndef AL_TEST_H
#define AL_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "format/quant.h"

static int test_n_pass, test_n_fail, test_n_skip, test_cur_failed, test_cur_skipped;

/* Test data: xorshift64 from the seed test_rng, the same sequence on every run. */
static uint64_t test_rng = 0x9E3779B97F4A7C15ull;

static inline uint32_t test_rnd(void) {
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (uint32_t)(test_rng >> 16);
}

/* uniform in [-1, 1) */
static inline float test_frand(void) {
    return (float)(test_rnd() % 2000001) / 1000000.0f - 1.0f;
}

/* n floats uniform in [-scale, scale), malloc'd. */
static inline float *test_floats(int64_t n, float scale) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = test_frand() * scale;
    return x;
}

/* An f32 tensor of n_rows rows of n_cols over host memory (the CPU backend's). */
static inline al_tensor test_f32(float *data, int64_t n_cols, int64_t n_rows) {
    return (al_tensor){.type = AL_TYPE_F32,
                       .ne = {n_cols, n_rows},
                       .data = data,
                       .row_bytes = (uint64_t)n_cols * sizeof(float)};
}

/* Normalized mean squared error of a against the reference ref: sum (a-ref)^2 / sum ref^2,
 * the plain squared error when ref is all zeros. */
static inline double test_nmse(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
            test_cur_failed = 1;                                                      \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            test_cur_failed = 1;                                                      \
        }                                                                             \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                         \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)",          \
              (double)(a), (double)(b), (double)(tol))

/* Marks the running test skipped, with the reason printed; it counts as neither. */
#define TEST_SKIP(...)                                                                \
    do {                                                                              \
        printf("skip: ");                                                             \
        printf(__VA_ARGS__);                                                          \
        printf("\n");                                                                 \
        test_cur_skipped = 1;                                                         \
    } while (0)

#define TEST_RUN(fn)                                                                  \
    do {                                                                              \
        test_cur_failed = 0;                                                          \
        test_cur_skipped = 0;                                                         \
        fn();                                                                         \
        if (test_cur_skipped && !test_cur_failed) {                                   \
            test_n_skip++;                                                            \
            printf("SKIP %s\n", #fn);                                                 \
        } else if (test_cur_failed) {                                                 \
            test_n_fail++;                                                            \
            printf("FAIL %s\n", #fn);                                                 \
        } else {                                                                      \
            test_n_pass++;                                                            \
            printf("ok   %s\n", #fn);                                                 \
        }                                                                             \
        fflush(stdout);                                                               \
    } while (0)

static inline const char *test_shared_dir(void) {
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

/* The build folder: $BUILD, else build. */
static inline const char *test_build_dir(void) {
    const char *b = getenv("BUILD");
    return b && *b ? b : "build";
}

/* Writes a model with `anyllm gen-model PATH FLAGS -t 2` and checks its sha256 where
 * sha256 is not NULL; false (with a message on stderr) if either fails. */
static inline bool test_gen_model(const char *path, const char *flags, const char *sha256) {
    char cmd[1280], line[160] = "";
    snprintf(cmd, sizeof cmd, "%s/anyllm gen-model %s %s -t 2 >/dev/null 2>&1 && sha256sum %s",
             test_build_dir(), path, flags, path);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    const int rc = pclose(p);
    if (rc == 0 && (!sha256 || !strncmp(line, sha256, 64))) return true;
    fprintf(stderr, "  gen-model %s: exit %d, sha256 '%.64s', expected %s\n", path, rc, line,
            sha256 ? sha256 : "any");
    return false;
}

/* The n floats of a reference file, malloc'd; NULL (with a message) where it is
 * missing or short. */
static inline float *test_read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    float *buf = malloc(n * sizeof(float));
    const size_t got = f && buf ? fread(buf, sizeof(float), n, f) : 0;
    if (f) fclose(f);
    if (got == n) return buf;
    fprintf(stderr, "  %s: missing or short\n", path);
    free(buf);
    return NULL;
}

static inline int test_finish(void) {
    printf("%d passed, %d failed, %d skipped\n", test_n_pass, test_n_fail, test_n_skip);
    return test_n_fail ? 1 : 0;
}

/* A program whose subject this build lacks: one skip, saying why (main returns this). */
static inline int test_skip_program(const char *why) {
    test_cur_failed = 0;
    TEST_SKIP("%s", why);
    test_n_skip += test_cur_skipped;
    return test_finish();
}

#define TEST_NO_VULKAN                                                                \
    "this build has no Vulkan backend (glslc or the Vulkan headers were missing)"

#endif /* AL_TEST_H */
