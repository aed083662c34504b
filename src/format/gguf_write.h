/* gguf_write.h: writes GGUF version 3 files (the format gguf.h describes), streaming
 * tensor data so that a model never has to be in memory at once.
 *
 * Use in three steps:
 *   1. gguf_writer_create(), then any number of gguf_writer_set_*() / copy_kv() for
 *      metadata and gguf_writer_add_tensor() for tensor infos (name, shape, type);
 *   2. gguf_writer_open(path): computes every tensor's offset (each tensor's data is
 *      padded to general.alignment, default 32) and writes the header, the metadata,
 *      the tensor infos and the padding before the data section;
 *   3. gguf_writer_write(): the tensors' data bytes, in the order they were added, in
 *      pieces of any size; padding goes in by itself. gguf_writer_close() checks that
 *      every byte came, flushes and closes.
 * The data goes to PATH.partial, which gguf_writer_close() renames to PATH: PATH is
 * either complete or untouched. Every write is checked. After any failure in steps 2-3
 * the partial file is removed and later calls fail; gguf_writer_destroy() of a writer
 * that was opened but not closed successfully also removes it. Keys and tensor names are copied. Metadata
 * values are kept encoded in memory (a 150k-token vocabulary is a few MiB).
 */
#ifndef AL_GGUF_WRITE_H
#define AL_GGUF_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "anyllm.h"
#include "format/gguf.h"

typedef struct gguf_writer gguf_writer;

/* A writer with no keys and no tensors. */
al_status gguf_writer_create(gguf_writer **out);

/* Frees the writer; removes the file if it was opened and not closed successfully.
 * NULL is a no-op. */
void gguf_writer_destroy(gguf_writer *w);

/* Metadata. Setting a key that exists replaces its value where it stands; a new key
 * goes last. Keys must be non-empty. Fail only for bad arguments or out of memory,
 * and only before gguf_writer_open(). */
al_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
al_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
al_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
al_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
al_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
al_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* An array of n numbers or bools (elem is not STRING or ARRAY), given as they are laid
 * out in a GGUF file: little-endian, packed. */
al_status gguf_writer_set_array(gguf_writer *w, const char *key, gguf_vtype elem,
                                const void *data, uint64_t n);
/* An array of n strings; lens[i] bytes each, or NUL-terminated if lens is NULL. */
al_status gguf_writer_set_str_array(gguf_writer *w, const char *key, const char *const *strs,
                                    const uint64_t *lens, uint64_t n);
/* A copy of a key and value from a file read with gguf.h, of any type. */
al_status gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Removes a key; false if it was not there. */
bool gguf_writer_remove(gguf_writer *w, const char *key);
/* Number of keys, and whether a key is set. */
uint64_t gguf_writer_n_kv(const gguf_writer *w);
bool gguf_writer_has(const gguf_writer *w, const char *key);

/* Adds a tensor info: n_dims in 1..4, ne[0..n_dims) >= 0, ne[0] a multiple of the
 * type's block size, a known type, a unique non-empty name. Its data comes after that
 * of the tensors added before it. */
al_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims,
                                 const int64_t *ne, uint32_t type);

/* Bytes of data tensor i takes (without padding); 0 if i is out of range. */
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, uint64_t i);

/* Creates path + ".partial" and writes everything before the tensor data.
 * general.alignment, if set, must be a u32 power of two. */
al_status gguf_writer_open(gguf_writer *w, const char *path);

/* The next n bytes of tensor data. Fails if more bytes come than the tensors hold. */
al_status gguf_writer_write(gguf_writer *w, const void *data, uint64_t n);

/* Checks that all tensor data was written, flushes and closes the file and renames it
 * to the path given to gguf_writer_open() (replacing any file there). The writer must
 * still be destroyed. */
al_status gguf_writer_close(gguf_writer *w);

#endif /* AL_GGUF_WRITE_H */
