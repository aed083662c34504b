/* kernel_check.h: a CPU backend of one instruction set, for the tests that hold the
 * fast kernels to the reference ops (test_kernels.c, test_delta.c). */
#ifndef AL_TEST_KERNEL_CHECK_H
#define AL_TEST_KERNEL_CHECK_H

#include <stdint.h>

#include "backend.h"
#include "cpu/ops.h"

/* A backend on isa with activation mode act and n_threads threads, reserved for
 * max_cols columns and max_ctx positions; NULL if either step fails. */
static inline al_backend *backend_act(cpu_isa isa, cpu_act_mode act, int n_threads,
                                      int64_t max_cols, int64_t max_ctx) {
    al_backend *be = NULL;
    if (cpu_backend_create_isa(n_threads, isa, act, &be) != AL_OK) return NULL;
    if (be->ops->reserve(be, max_cols, max_ctx) != AL_OK) {
        be->ops->destroy(be);
        return NULL;
    }
    return be;
}

/* The same in the default activation mode, q8x2. */
static inline al_backend *backend(cpu_isa isa, int n_threads, int64_t max_cols,
                                  int64_t max_ctx) {
    return backend_act(isa, CPU_ACT_Q8X2, n_threads, max_cols, max_ctx);
}

#endif /* AL_TEST_KERNEL_CHECK_H */
