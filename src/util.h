/* util.h: the small things every module needs: error messages, the one allocator,
 * checked size arithmetic, half/bfloat conversion and an assert for our own invariants.
 *
 * Errors are written into a per-thread buffer (al_last_error() in anyllm.h), so a
 * failing function can say which file, field and value was at fault without globals
 * shared between threads. Every host allocation goes through al_malloc(), which lets a
 * test count allocations and inject out-of-memory failures.
 */
#ifndef AL_UTIL_H
#define AL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "anyllm.h"

/* Records a message for al_last_error() and returns status, so callers can write
 * `return al_error(AL_ERR_FORMAT, "%s: bad thing", path);`. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
al_status al_error(al_status status, const char *fmt, ...);

/* One line to the log callback (al_set_log), if there is one. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void al_log(al_log_level level, const char *fmt, ...);

/* The allocator. al_free(NULL) is a no-op. Sizes are checked for overflow. */
void *al_malloc(size_t n_bytes);
void *al_calloc(size_t n, size_t size);
void *al_realloc(void *p, size_t n_bytes);
void al_free(void *p);
void *al_aligned_alloc(size_t alignment, size_t n_bytes); /* freed with al_aligned_free */
void al_aligned_free(void *p);
/* Zero-filled without touching the pages (alignment a power of two); freed with
 * al_aligned_calloc_free. */
void *al_aligned_calloc(size_t alignment, size_t n_bytes);
void al_aligned_calloc_free(void *p);

/* Test hook: the n-th allocation from now (1-based) fails; 0 disables. Returns the
 * number of allocations made since the last call. */
uint64_t al_alloc_fail_after(uint64_t n);

/* Checked arithmetic on sizes from files: false on overflow. */
static inline bool al_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool al_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Violated internal invariant: print and stop. Never used for bad input. */
#define AL_ASSERT(cond)                                                                \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "anyllm: internal error: %s at %s:%d\n", #cond, __FILE__,   \
                    __LINE__);                                                         \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* IEEE half and bfloat16 to float. */
float al_f16_to_f32(uint16_t h);
uint16_t al_f32_to_f16(float f);
static inline float al_bf16_to_f32(uint16_t b) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)b << 16};
    return v.f;
}

/* Monotonic time in seconds. */
double al_time_s(void);

#endif /* AL_UTIL_H */
