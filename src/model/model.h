/* model.h: the model and context objects behind anyllm.h, for the library's own use.
 *
 * model.c binds the tensors of a GGUF file to the hyper-parameters of its
 * architecture and runs the forward pass against the backend op table (backend.h).
 */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "anyllm.h"
#include "backend.h"
#include "format/gguf.h"

/* The parsed file behind a model (metadata and tensor table), owned by the model. */
const gguf_file *model_file(const al_model *m);

/* The backend the model runs on (for backend-specific reports). */
al_backend *model_backend(const al_model *m);

/* Bytes of KV cache a context of n_ctx positions needs, keys and values of types tk
 * and tv. */
uint64_t model_kv_bytes(const al_model *m, int n_ctx, al_kv_type tk, al_kv_type tv);

#endif /* AL_MODEL_H */
