/* util.c: error buffer, allocator with failure injection, half-float conversion. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_error[1024];

const char *al_last_error(void) { return g_error; }

al_status al_error(al_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return status;
}

/* The callback and its argument change together: readers take the lock too, which
 * costs nothing next to what a log line is about. */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static al_log_fn g_log_fn;
static void *g_log_user;

void al_set_log(al_log_fn fn, void *user) {
    pthread_mutex_lock(&g_log_lock);
    g_log_fn = fn;
    g_log_user = user;
    pthread_mutex_unlock(&g_log_lock);
}

void al_log(al_log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&g_log_lock);
    const al_log_fn fn = g_log_fn;
    void *user = g_log_user;
    pthread_mutex_unlock(&g_log_lock);
    if (!fn) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn(user, level, line);
}

const char *al_status_str(al_status s) {
    switch (s) {
    case AL_OK: return "ok";
    case AL_ERR_ARG: return "invalid argument";
    case AL_ERR_IO: return "i/o error";
    case AL_ERR_FORMAT: return "format error";
    case AL_ERR_UNSUPPORTED: return "unsupported";
    case AL_ERR_NOMEM: return "out of memory";
    case AL_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}

/* Allocation counting for tests. Relaxed atomics: the count is a test aid. */
static uint64_t g_n_alloc, g_fail_at;

uint64_t al_alloc_fail_after(uint64_t n) {
    uint64_t made = __atomic_exchange_n(&g_n_alloc, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_fail_at, n, __ATOMIC_RELAXED);
    return made;
}

static bool alloc_should_fail(void) {
    uint64_t k = __atomic_add_fetch(&g_n_alloc, 1, __ATOMIC_RELAXED);
    uint64_t at = __atomic_load_n(&g_fail_at, __ATOMIC_RELAXED);
    return at != 0 && k == at;
}

void *al_malloc(size_t n_bytes) {
    if (alloc_should_fail()) return NULL;
    return malloc(n_bytes ? n_bytes : 1);
}

void *al_calloc(size_t n, size_t size) {
    if (alloc_should_fail()) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *al_realloc(void *p, size_t n_bytes) {
    if (alloc_should_fail()) return NULL;
    return realloc(p, n_bytes ? n_bytes : 1);
}

void al_free(void *p) { free(p); }

void *al_aligned_alloc(size_t alignment, size_t n_bytes) {
    if (alloc_should_fail()) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, alignment, n_bytes ? n_bytes : 1) != 0) return NULL;
    return p;
}

void al_aligned_free(void *p) { free(p); }

/* calloc, not malloc + memset: a large calloc gets fresh pages from the kernel, which
 * are zero already, so a big KV cache costs memory only as positions are written. The
 * block calloc returned is kept in the word just before the aligned pointer. */
void *al_aligned_calloc(size_t alignment, size_t n_bytes) {
    if (alloc_should_fail()) return NULL;
    size_t extra = alignment + sizeof(void *);
    if (n_bytes > SIZE_MAX - extra) return NULL;
    char *raw = calloc(1, n_bytes + extra);
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + alignment - 1) & ~(uintptr_t)(alignment - 1);
    ((void **)a)[-1] = raw;
    return (void *)a;
}

void al_aligned_calloc_free(void *p) {
    if (p) free(((void **)p)[-1]);
}

float al_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        /* zero or subnormal: value = mant * 2^-24 */
        float f = (float)mant * (1.0f / 16777216.0f);
        return sign ? -f : f;
    } else if (exp == 31) {
        v.u = sign | 0x7f800000u | (mant << 13);
    } else {
        v.u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    return v.f;
}

uint16_t al_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {.f = f};
    uint32_t x = v.u;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
    if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {
        /* subnormal half (or zero): round to nearest even of absx / 2^-24 */
        union { uint32_t u; float f; } a = {.u = absx};
        float q = a.f * 16777216.0f;
        uint32_t m = (uint32_t)q;
        float rem = q - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return sign | (uint16_t)m;
    }
    /* normal: rebias exponent, round mantissa to nearest even */
    uint32_t mant = absx & 0x7fffff;
    uint32_t exp = (absx >> 23) - 112;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

double al_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
