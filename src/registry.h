/* registry.h: the backends this build has, and creating one by name.
 *
 * Each backend folder exports one al_backend_desc (backend.h); registry.c lists them
 * in one table. Choosing a backend from a spec, "auto", the CPU fall-back and the
 * public device calls of anyllm.h (al_backends, al_backend_list, al_gpu_count, ...)
 * live there, and nowhere else tests which backend is which.
 */
#ifndef AL_REGISTRY_H
#define AL_REGISTRY_H

#include "anyllm.h"
#include "backend.h"

/* A backend by spec: "name", "name:N" or "name:VARIANT" of a registered kind (NULL: the
 * first kind, the CPU), or "auto": the first device of a kind that allows it
 * (AL_CAP_AUTO), else the fall-back, saying why in the log. p's settings (NULL:
 * al_model_default_params()'s) are checked first, for every kind. */
al_status backend_create(const char *spec, int n_threads, const al_model_params *p,
                         al_backend **out);

/* The backend that runs whatever the others cannot: the first registered kind (the
 * CPU), on its first device. */
al_status backend_create_fallback(int n_threads, const al_model_params *p, al_backend **out);

#endif /* AL_REGISTRY_H */
