/* gguf_write.c: the GGUF v3 writer declared in gguf_write.h.
 *
 * Metadata values are encoded when they are set, into one heap buffer per key holding
 * exactly the bytes that follow the key in the file (value type included), so writing
 * the header is a plain copy and replacing a value is a buffer swap. Tensor offsets are
 * computed at open time, when general.alignment is final: tensor i starts at the sum of
 * the sizes of tensors 0..i-1, each rounded up to the alignment, as ggml's writer lays
 * them out. Output goes through stdio with a large buffer into PATH.partial, renamed to
 * PATH once everything is written and flushed, so that a file at PATH is never half
 * written and a failure leaves an older file there untouched. A failed fwrite, fflush
 * or fclose (a full disk often shows only there) removes the partial file.
 */
#define _POSIX_C_SOURCE 200809L
#include "format/gguf_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "format/quant.h"
#include "util.h"

#define DEFAULT_ALIGNMENT 32

typedef struct wkv {
    char *key;
    uint8_t *val;       /* u32 type, then the value, as in the file */
    uint64_t val_bytes;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    uint64_t n_bytes;   /* data, without padding */
    uint64_t offset;    /* in the data section; set by gguf_writer_open */
} wtensor;

struct gguf_writer {
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    /* after open */
    char *path;         /* the file the caller named */
    char *tmp;          /* path + ".partial": written, then renamed to path */
    FILE *f;
    char *iobuf;
    uint64_t alignment;
    uint64_t cur;       /* tensor whose data comes next */
    uint64_t cur_done;  /* bytes of it written */
    bool opened, failed, closed;
};

/* ---- encoding buffers ------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    uint64_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const void *data, uint64_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        uint64_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = al_realloc(b->p, (size_t)cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, (size_t)n);
    b->n += n;
}

/* Little-endian integers of 1, 2, 4 or 8 bytes. */
static void put_le(buf *b, uint64_t v, int n_bytes) {
    uint8_t le[8];
    for (int i = 0; i < n_bytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, (uint64_t)n_bytes);
}

static void put_str(buf *b, const char *s, uint64_t n) {
    put_le(b, n, 8);
    put(b, s, n);
}

static int vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16: case GGUF_VT_I16: return 2;
    case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_F32: return 4;
    case GGUF_VT_U64: case GGUF_VT_I64: case GGUF_VT_F64: return 8;
    default: return 0;
    }
}

/* ---- keys ------------------------------------------------------------------------ */

al_status gguf_writer_create(gguf_writer **out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_writer_create: out is NULL");
    *out = al_calloc(1, sizeof **out);
    return *out ? AL_OK : al_error(AL_ERR_NOMEM, "out of memory for a GGUF writer");
}

static int64_t find_kv(const gguf_writer *w, const char *key) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return (int64_t)i;
    return -1;
}

/* Takes ownership of the encoded value in b (freed on failure too). */
static al_status set_encoded(gguf_writer *w, const char *key, buf *b) {
    al_status st = AL_OK;
    if (w == NULL || key == NULL || key[0] == '\0')
        st = al_error(AL_ERR_ARG, "gguf writer: a key must be a non-empty string");
    else if (w->opened)
        st = al_error(AL_ERR_ARG, "gguf writer: key '%s' set after the file was opened", key);
    else if (b->oom)
        st = al_error(AL_ERR_NOMEM, "gguf writer: out of memory for the value of '%s'", key);
    if (st != AL_OK) {
        al_free(b->p);
        return st;
    }
    int64_t i = find_kv(w, key);
    if (i >= 0) { /* replace in place */
        al_free(w->kv[i].val);
        w->kv[i].val = b->p;
        w->kv[i].val_bytes = b->n;
        return AL_OK;
    }
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *kv = al_realloc(w->kv, (size_t)cap * sizeof *kv);
        if (kv == NULL) {
            al_free(b->p);
            return al_error(AL_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    size_t len = strlen(key);
    char *k = al_malloc(len + 1);
    if (k == NULL) {
        al_free(b->p);
        return al_error(AL_ERR_NOMEM, "gguf writer: out of memory for key '%s'", key);
    }
    memcpy(k, key, len + 1);
    w->kv[w->n_kv++] = (wkv){.key = k, .val = b->p, .val_bytes = b->n};
    return AL_OK;
}

static al_status set_scalar(gguf_writer *w, const char *key, gguf_vtype t, uint64_t bits) {
    buf b = {0};
    put_le(&b, t, 4);
    put_le(&b, bits, vtype_size(t));
    return set_encoded(w, key, &b);
}

al_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, GGUF_VT_U32, v);
}

al_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, GGUF_VT_I32, (uint32_t)v);
}

al_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, GGUF_VT_U64, v);
}

al_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, GGUF_VT_F32, bits);
}

al_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0);
}

al_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (v == NULL) return al_error(AL_ERR_ARG, "gguf writer: NULL string for key '%s'", key ? key : "");
    buf b = {0};
    put_le(&b, GGUF_VT_STRING, 4);
    put_str(&b, v, strlen(v));
    return set_encoded(w, key, &b);
}

al_status gguf_writer_set_array(gguf_writer *w, const char *key, gguf_vtype elem,
                                const void *data, uint64_t n) {
    const int es = vtype_size(elem);
    uint64_t n_bytes;
    if (es == 0 || (data == NULL && n > 0) || !al_mul_u64(n, (uint64_t)es, &n_bytes))
        return al_error(AL_ERR_ARG, "gguf writer: bad array for key '%s' (%s x %" PRIu64 ")",
                        key ? key : "", gguf_vtype_name(elem), n);
    buf b = {0};
    put_le(&b, GGUF_VT_ARRAY, 4);
    put_le(&b, elem, 4);
    put_le(&b, n, 8);
    put(&b, data, n_bytes);
    return set_encoded(w, key, &b);
}

al_status gguf_writer_set_str_array(gguf_writer *w, const char *key, const char *const *strs,
                                    const uint64_t *lens, uint64_t n) {
    if (strs == NULL && n > 0)
        return al_error(AL_ERR_ARG, "gguf writer: NULL strings for key '%s'", key ? key : "");
    buf b = {0};
    put_le(&b, GGUF_VT_ARRAY, 4);
    put_le(&b, GGUF_VT_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i] == NULL) {
            al_free(b.p);
            return al_error(AL_ERR_ARG, "gguf writer: string %" PRIu64 " of key '%s' is NULL", i,
                            key ? key : "");
        }
        put_str(&b, strs[i], lens ? lens[i] : strlen(strs[i]));
    }
    return set_encoded(w, key, &b);
}

al_status gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    if (kv == NULL) return al_error(AL_ERR_ARG, "gguf_writer_copy_kv: kv is NULL");
    char key[512];
    if (kv->key.n >= sizeof key)
        return al_error(AL_ERR_ARG, "gguf writer: key of %" PRIu64 " bytes is too long", kv->key.n);
    gguf_str_copy(kv->key, key, sizeof key);
    buf b = {0};
    put_le(&b, kv->type, 4);
    switch (kv->type) {
    case GGUF_VT_STRING:
        put_str(&b, kv->v.str.s, kv->v.str.n);
        break;
    case GGUF_VT_ARRAY: {
        put_le(&b, kv->v.arr.type, 4);
        put_le(&b, kv->v.arr.n, 8);
        if (kv->v.arr.type == GGUF_VT_STRING) {
            for (uint64_t i = 0; i < kv->v.arr.n; i++)
                put_str(&b, kv->v.arr.strs[i].s, kv->v.arr.strs[i].n);
        } else {
            /* the reader checked that n elements fit in the file */
            put(&b, kv->v.arr.data, kv->v.arr.n * (uint64_t)vtype_size(kv->v.arr.type));
        }
        break;
    }
    case GGUF_VT_F32: {
        float f = (float)kv->v.f; /* exact: the reader widened a float */
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        put_le(&b, bits, 4);
        break;
    }
    case GGUF_VT_F64: {
        uint64_t bits;
        memcpy(&bits, &kv->v.f, sizeof bits);
        put_le(&b, bits, 8);
        break;
    }
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        put_le(&b, (uint64_t)kv->v.i, vtype_size(kv->type));
        break;
    default:
        if (vtype_size(kv->type) == 0) {
            al_free(b.p);
            return al_error(AL_ERR_ARG, "gguf writer: key '%s' has unknown type %u", key,
                            (unsigned)kv->type);
        }
        put_le(&b, kv->v.u, vtype_size(kv->type));
    }
    return set_encoded(w, key, &b);
}

bool gguf_writer_remove(gguf_writer *w, const char *key) {
    if (w == NULL || key == NULL || w->opened) return false;
    int64_t i = find_kv(w, key);
    if (i < 0) return false;
    al_free(w->kv[i].key);
    al_free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - (uint64_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    return true;
}

uint64_t gguf_writer_n_kv(const gguf_writer *w) { return w ? w->n_kv : 0; }

bool gguf_writer_has(const gguf_writer *w, const char *key) {
    return w && key && find_kv(w, key) >= 0;
}

/* ---- tensors ----------------------------------------------------------------------- */

al_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims,
                                 const int64_t *ne, uint32_t type) {
    if (w == NULL || name == NULL || name[0] == '\0' || ne == NULL)
        return al_error(AL_ERR_ARG, "gguf writer: a tensor needs a non-empty name and a shape");
    if (w->opened)
        return al_error(AL_ERR_ARG, "gguf writer: tensor '%s' added after the file was opened", name);
    if (n_dims < 1 || n_dims > 4)
        return al_error(AL_ERR_ARG, "gguf writer: tensor '%s' has %u dimensions (1..4)", name, n_dims);
    const quant_traits *tr = quant_get_traits(type);
    if (tr == NULL)
        return al_error(AL_ERR_ARG, "gguf writer: tensor '%s' has unknown type %u", name, type);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0 || !al_mul_u64(n_elem, (uint64_t)ne[d], &n_elem))
            return al_error(AL_ERR_ARG, "gguf writer: tensor '%s': bad dimension %u = %lld", name,
                            d, (long long)ne[d]);
    }
    if (ne[0] % tr->block_size != 0)
        return al_error(AL_ERR_ARG, "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of "
                        "%s's block size %u", name, (long long)ne[0], tr->name, tr->block_size);
    uint64_t n_bytes;
    if (!al_mul_u64(n_elem / tr->block_size, tr->type_size, &n_bytes) || n_bytes > (UINT64_MAX >> 2))
        return al_error(AL_ERR_ARG, "gguf writer: tensor '%s' is too large", name);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return al_error(AL_ERR_ARG, "gguf writer: tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = al_realloc(w->t, (size_t)cap * sizeof *t);
        if (t == NULL) return al_error(AL_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
        w->t = t;
        w->cap_t = cap;
    }
    size_t len = strlen(name);
    wtensor *t = &w->t[w->n_t];
    *t = (wtensor){.n_dims = n_dims, .ne = {1, 1, 1, 1}, .type = type, .n_bytes = n_bytes};
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    if ((t->name = al_malloc(len + 1)) == NULL)
        return al_error(AL_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
    memcpy(t->name, name, len + 1);
    w->n_t++;
    return AL_OK;
}

uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, uint64_t i) {
    return w && i < w->n_t ? w->t[i].n_bytes : 0;
}

/* ---- the file ----------------------------------------------------------------------- */

/* Closes and removes the partial file after a failure; returns st. */
static al_status fail_file(gguf_writer *w, al_status st) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    if (w->tmp) unlink(w->tmp);
    w->failed = true;
    return st;
}

static al_status wr(gguf_writer *w, const void *p, uint64_t n) {
    if (n > 0 && fwrite(p, 1, (size_t)n, w->f) != (size_t)n)
        return fail_file(w, al_error(AL_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno)));
    return AL_OK;
}

static al_status wr_zeros(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[64];
    al_status st = AL_OK;
    while (n > 0 && st == AL_OK) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        st = wr(w, zeros, k);
        n -= k;
    }
    return st;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (a - x % a) % a; }

/* general.alignment if set (u32, a power of two), else 32. */
static al_status pick_alignment(gguf_writer *w) {
    w->alignment = DEFAULT_ALIGNMENT;
    int64_t i = find_kv(w, "general.alignment");
    if (i < 0) return AL_OK;
    const wkv *kv = &w->kv[i];
    uint32_t type = kv->val[0] | kv->val[1] << 8 | kv->val[2] << 16 | (uint32_t)kv->val[3] << 24;
    if (type != GGUF_VT_U32)
        return al_error(AL_ERR_ARG, "gguf writer: general.alignment has type %s; expected u32",
                        gguf_vtype_name(type));
    uint32_t a = kv->val[4] | kv->val[5] << 8 | kv->val[6] << 16 | (uint32_t)kv->val[7] << 24;
    if (a == 0 || (a & (a - 1)) != 0)
        return al_error(AL_ERR_ARG, "gguf writer: general.alignment %u is not a power of two", a);
    w->alignment = a;
    return AL_OK;
}

/* Header, metadata and tensor infos, encoded into one buffer. */
static al_status encode_head(gguf_writer *w, buf *b) {
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = w->t[i].n_bytes + pad_to(w->t[i].n_bytes, w->alignment);
        if (!al_add_u64(off, padded, &off))
            return al_error(AL_ERR_ARG, "gguf writer: tensor data exceeds 2^64 bytes");
    }
    put(b, "GGUF", 4);
    put_le(b, 3, 4);
    put_le(b, w->n_t, 8);
    put_le(b, w->n_kv, 8);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        put_str(b, w->kv[i].key, strlen(w->kv[i].key));
        put(b, w->kv[i].val, w->kv[i].val_bytes);
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        put_le(b, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) put_le(b, (uint64_t)t->ne[d], 8);
        put_le(b, t->type, 4);
        put_le(b, t->offset, 8);
    }
    if (b->oom) return al_error(AL_ERR_NOMEM, "gguf writer: out of memory for the header");
    return AL_OK;
}

al_status gguf_writer_open(gguf_writer *w, const char *path) {
    if (w == NULL || path == NULL) return al_error(AL_ERR_ARG, "gguf_writer_open: NULL argument");
    if (w->opened) return al_error(AL_ERR_ARG, "gguf writer: opened twice");
    al_status st = pick_alignment(w);
    if (st != AL_OK) return st;
    buf head = {0};
    if ((st = encode_head(w, &head)) != AL_OK) {
        al_free(head.p);
        return st;
    }
    const size_t len = strlen(path);
    char *path_copy = al_malloc(len + 1), *tmp = al_malloc(len + sizeof ".partial");
    char *iobuf = al_malloc(1 << 20);
    if (path_copy && tmp) {
        memcpy(path_copy, path, len + 1);
        memcpy(tmp, path, len);
        memcpy(tmp + len, ".partial", sizeof ".partial");
    }
    if (path_copy == NULL || tmp == NULL || iobuf == NULL)
        st = al_error(AL_ERR_NOMEM, "gguf writer: out of memory");
    else if ((w->f = fopen(tmp, "wb")) == NULL)
        st = al_error(AL_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (st != AL_OK) { /* nothing was created; the writer may be opened again */
        al_free(head.p);
        al_free(path_copy);
        al_free(tmp);
        al_free(iobuf);
        return st;
    }
    w->path = path_copy;
    w->tmp = tmp;
    w->iobuf = iobuf;
    w->opened = true;
    setvbuf(w->f, w->iobuf, _IOFBF, 1 << 20);
    st = wr(w, head.p, head.n);
    if (st == AL_OK) st = wr_zeros(w, pad_to(head.n, w->alignment));
    al_free(head.p);
    w->cur = 0;
    w->cur_done = 0;
    return st;
}

/* Moves past tensors whose data is complete, writing their padding. */
static al_status advance(gguf_writer *w) {
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].n_bytes) {
        al_status st = wr_zeros(w, pad_to(w->t[w->cur].n_bytes, w->alignment));
        if (st != AL_OK) return st;
        w->cur++;
        w->cur_done = 0;
    }
    return AL_OK;
}

al_status gguf_writer_write(gguf_writer *w, const void *data, uint64_t n) {
    if (w == NULL || (data == NULL && n > 0)) return al_error(AL_ERR_ARG, "gguf_writer_write: NULL argument");
    if (!w->opened || w->failed || w->closed)
        return al_error(AL_ERR_ARG, "gguf writer: write to a file that is not open%s",
                        w->failed ? " (an earlier write failed)" : "");
    const uint8_t *p = data;
    al_status st = advance(w);
    while (st == AL_OK && n > 0) {
        if (w->cur >= w->n_t)
            return fail_file(w, al_error(AL_ERR_ARG, "%s: %" PRIu64 " bytes of tensor data more "
                                         "than the tensors hold", w->path, n));
        uint64_t k = w->t[w->cur].n_bytes - w->cur_done;
        if (k > n) k = n;
        if ((st = wr(w, p, k)) != AL_OK) break;
        p += k;
        n -= k;
        w->cur_done += k;
        st = advance(w);
    }
    return st;
}

al_status gguf_writer_close(gguf_writer *w) {
    if (w == NULL) return al_error(AL_ERR_ARG, "gguf_writer_close: NULL writer");
    if (!w->opened || w->failed || w->closed)
        return al_error(AL_ERR_ARG, "gguf writer: close of a file that is not open");
    al_status st = advance(w);
    if (st != AL_OK) return st;
    if (w->cur < w->n_t)
        return fail_file(w, al_error(AL_ERR_ARG, "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64
                                     " bytes before the file was closed", w->path,
                                     w->t[w->cur].name, w->cur_done, w->t[w->cur].n_bytes));
    /* fflush and fclose report what buffered writes could not (e.g. a full disk) */
    int bad = fflush(w->f) != 0 || ferror(w->f);
    int err = errno;
    if (fclose(w->f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    w->f = NULL;
    if (bad) return fail_file(w, al_error(AL_ERR_IO, "%s: cannot write: %s", w->path, strerror(err)));
    if (rename(w->tmp, w->path) != 0)
        return fail_file(w, al_error(AL_ERR_IO, "%s: cannot rename %s to it: %s", w->path, w->tmp,
                                     strerror(errno)));
    w->closed = true;
    return AL_OK;
}

void gguf_writer_destroy(gguf_writer *w) {
    if (w == NULL) return;
    if (w->opened && !w->closed && !w->failed) fail_file(w, AL_OK);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        al_free(w->kv[i].key);
        al_free(w->kv[i].val);
    }
    for (uint64_t i = 0; i < w->n_t; i++) al_free(w->t[i].name);
    al_free(w->kv);
    al_free(w->t);
    al_free(w->path);
    al_free(w->tmp);
    al_free(w->iobuf);
    al_free(w);
}
