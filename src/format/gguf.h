/* gguf.h: a validating reader of GGUF files (versions 2 and 3) over mmap.
 *
 * Layout of a GGUF file (all little-endian):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv × { string key | u32 value_type | value }
 *   n_tensors × { string name | u32 n_dims | n_dims × u64 ne | u32 type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data
 * A string is u64 length + bytes (no NUL). An array value is u32 element type + u64 count
 * + elements.
 *
 * gguf_parse() checks everything before it is used: every count, length, dimension,
 * type and offset against overflow and against the bytes that remain, so that a
 * malformed file gets an error naming the file, the field and the value at fault, and
 * never a read outside the file or an allocation the file's size cannot justify.
 * After a successful parse every pointer below points into the mapping and every
 * tensor's data lies wholly inside the file, aligned, and not overlapping another.
 * Keys and tensor names are non-empty, NUL-free, valid UTF-8 and unique; string values
 * may hold any bytes (vocabularies do).
 *
 * Status codes: AL_ERR_FORMAT for broken content (truncation, bad counts, an empty
 * file); AL_ERR_UNSUPPORTED for well-formed content this build does not handle (a
 * version other than 2 or 3, an unknown tensor type, an array of arrays); AL_ERR_IO
 * when the file cannot be opened or mapped or is not a regular file; AL_ERR_NOMEM.
 */
#ifndef AL_GGUF_H
#define AL_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "anyllm.h"

typedef enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
    GGUF_VT_COUNT
} gguf_vtype;

/* A string inside the mapping: not NUL-terminated. Valid UTF-8 for keys and names. */
typedef struct gguf_str {
    uint64_t n;
    const char *s;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;
    union {
        uint64_t u;   /* U8, U16, U32, U64, BOOL */
        int64_t i;    /* I8, I16, I32, I64 */
        double f;     /* F32, F64 */
        gguf_str str; /* STRING */
        struct {
            gguf_vtype type;     /* element type; never ARRAY (nested arrays rejected) */
            uint64_t n;          /* element count */
            const void *data;    /* first element, in the mapping (may be unaligned) */
            gguf_str *strs;      /* STRING arrays only: [n] index built at parse time;
                                    NULL for other and for empty arrays */
        } arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;   /* 1..4 */
    int64_t ne[4];     /* ne[0] is the contiguous dimension; unused dims are 1 */
    uint32_t type;     /* ggml type id; known to quant.h */
    uint64_t offset;   /* from the start of the data section */
    uint64_t n_elem;   /* ne[0]*ne[1]*ne[2]*ne[3] */
    uint64_t n_bytes;  /* storage size of the data */
    const void *data;  /* in the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;            /* for messages */
    const uint8_t *base;   /* the whole file */
    uint64_t size;
    bool mapped;           /* base is an mmap owned by this object */
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;           /* [n_kv] */
    uint64_t n_tensors;
    gguf_tensor *tensors;  /* [n_tensors] */
    uint64_t alignment;
    uint64_t data_offset;  /* start of the tensor data section; may be >= size when
                              the file has no tensors */
} gguf_file;

/* Maps the file read-only and parses it. */
al_status gguf_open(const char *path, gguf_file **out);

/* Parses a file image already in memory (for tests and the fuzzer). The buffer must
 * outlive the result; name is used in messages. */
al_status gguf_parse(const void *data, uint64_t size, const char *name, gguf_file **out);

/* Unmaps and frees. NULL is a no-op. */
void gguf_close(gguf_file *f);

/* Lookups: NULL when absent. Keys compare byte-wise. */
const gguf_kv *gguf_find_key(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. They fail with a message naming the file and key if the key is
 * absent (unless a default is given via the *_or variants) or has another type; on
 * failure *out is 0 (or the default). Integer getters accept any integer type whose
 * value fits the result; gguf_get_f32 also accepts an f64 that fits. */
al_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
al_status gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t dflt, uint32_t *out);
al_status gguf_get_f32(const gguf_file *f, const char *key, float *out);
al_status gguf_get_f32_or(const gguf_file *f, const char *key, float dflt, float *out);
al_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
al_status gguf_get_bool_or(const gguf_file *f, const char *key, bool dflt, bool *out);

/* Name of a value type ("u32", "string", ...), or "unknown". */
const char *gguf_vtype_name(uint32_t t);

/* Copies s into buf as a C string (truncated to buf_size-1), returning buf. */
char *gguf_str_copy(gguf_str s, char *buf, uint64_t buf_size);

/* True if s equals the C string c. */
bool gguf_str_eq(gguf_str s, const char *c);

#endif /* AL_GGUF_H */
