/* gguf.c: the validating GGUF reader declared in gguf.h.
 *
 * The parser walks the image once, front to back, with a cursor (parser.pos). Every
 * read goes through take(), which checks that the bytes are there before a pointer is
 * formed, so the invariant pos <= size always holds and later code need not reason
 * about bounds. A count read from the file is compared with the bytes that remain
 * before anything is allocated for it: a key-value pair needs at least KV_MIN_BYTES,
 * a tensor info TENSOR_MIN_BYTES and a string 8, so no allocation is more than a small
 * multiple of the file's size, whatever the header claims.
 *
 * Status codes:
 *   AL_ERR_FORMAT       the content breaks the format (truncation, bad counts, ...);
 *   AL_ERR_UNSUPPORTED  well-formed content this build does not handle: a GGUF version
 *                       other than 2 or 3, a tensor type quant.h does not list, an
 *                       array of arrays;
 *   AL_ERR_IO           the file cannot be opened, is not a regular file, or mmap fails;
 *   AL_ERR_NOMEM        an allocation failed;
 *   AL_ERR_ARG          a NULL argument.
 *
 * Keys and tensor names must be non-empty, NUL-free, valid UTF-8 and unique. String
 * values need not be UTF-8: tokenizer vocabularies hold raw bytes.
 *
 * Reference: the GGUF specification, docs/gguf.md in the ggml repository.
 */
#define _POSIX_C_SOURCE 200809L
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/quant.h"
#include "util.h"

#define GGUF_HEADER_BYTES 24 /* magic, u32 version, u64 n_tensors, u64 n_kv */
#define GGUF_DEFAULT_ALIGNMENT 32

/* Smallest encodings, used to bound counts before allocating. A key-value pair is a key
 * of at least one byte (8 + 1), a value type (4) and a value of at least one byte (a u8).
 * A tensor info is a name (8 + 1), n_dims (4), one dimension (8), type (4), offset (8). */
#define KV_MIN_BYTES 14
#define TENSOR_MIN_BYTES 33
#define STR_MIN_BYTES 8

/* Longest part of a key or name quoted in a message. */
#define QUOTE_MAX 64

typedef struct parser {
    gguf_file *f;
    uint64_t pos;    /* cursor into f->base; always <= f->size */
    char where[192]; /* the entry being parsed, for messages: "kv 5 'general.name'" */
} parser;

/* Encoded size of each scalar value type; 0 for the variable-sized STRING and ARRAY. */
static const uint8_t vtype_bytes[GGUF_VT_COUNT] = {
    [GGUF_VT_U8] = 1,     [GGUF_VT_I8] = 1,    [GGUF_VT_U16] = 2, [GGUF_VT_I16] = 2,
    [GGUF_VT_U32] = 4,    [GGUF_VT_I32] = 4,   [GGUF_VT_F32] = 4, [GGUF_VT_BOOL] = 1,
    [GGUF_VT_STRING] = 0, [GGUF_VT_ARRAY] = 0, [GGUF_VT_U64] = 8, [GGUF_VT_I64] = 8,
    [GGUF_VT_F64] = 8,
};

/* ---- messages ------------------------------------------------------------------------ */

/* Records "<file>: <where>: <message>" and returns status. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static al_status
fail(const parser *p, al_status status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->where[0]) return al_error(status, "%s: %s: %s", p->f->path, p->where, msg);
    return al_error(status, "%s: %s", p->f->path, msg);
}

/* Sets the entry named in messages: "tensor 3", or "tensor 3 'blk.0.attn_q.weight'" once
 * the name has been validated. Long names are cut at a character boundary; control
 * bytes are shown as '?' so a message stays one printable line. */
static void set_where(parser *p, const char *what, uint64_t i, const gguf_str *name) {
    int n = snprintf(p->where, sizeof p->where, "%s %" PRIu64, what, i);
    if (name == NULL || n < 0) return;
    size_t o = (size_t)n;
    uint64_t len = name->n;
    bool cut = len > QUOTE_MAX;
    if (cut) {
        len = QUOTE_MAX;
        while (len > 0 && ((uint8_t)name->s[len] & 0xC0) == 0x80)
            len--;
    }
    /* room: " '" + QUOTE_MAX + "...'" + NUL, checked once here rather than per byte */
    AL_ASSERT(o + 2 + QUOTE_MAX + 5 <= sizeof p->where);
    p->where[o++] = ' ';
    p->where[o++] = '\'';
    for (uint64_t k = 0; k < len; k++) {
        uint8_t c = (uint8_t)name->s[k];
        p->where[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (cut) {
        memcpy(p->where + o, "...", 3);
        o += 3;
    }
    p->where[o++] = '\'';
    p->where[o] = '\0';
}

/* ---- primitive reads ----------------------------------------------------------------- */

/* Advances the cursor over n bytes and returns where they start, or fails naming field
 * if the file ends first. */
static al_status take(parser *p, uint64_t n, const char *field, const uint8_t **out) {
    *out = NULL;
    uint64_t left = p->f->size - p->pos;
    if (n > left)
        return fail(p, AL_ERR_FORMAT,
                    "%s: needs %" PRIu64 " bytes at offset %" PRIu64 " but only %" PRIu64
                    " are left (truncated file?)",
                    field, n, p->pos, left);
    *out = p->f->base + p->pos;
    p->pos += n;
    return AL_OK;
}

/* Little-endian load of n <= 8 bytes, byte by byte: the mapping may be unaligned. */
static uint64_t load_le(const uint8_t *b, unsigned n) {
    uint64_t v = 0;
    for (unsigned k = 0; k < n; k++)
        v |= (uint64_t)b[k] << (8 * k);
    return v;
}

static al_status rd_u32(parser *p, const char *field, uint32_t *out) {
    *out = 0;
    const uint8_t *b;
    al_status st = take(p, 4, field, &b);
    if (st != AL_OK) return st;
    *out = (uint32_t)load_le(b, 4);
    return AL_OK;
}

static al_status rd_u64(parser *p, const char *field, uint64_t *out) {
    *out = 0;
    const uint8_t *b;
    al_status st = take(p, 8, field, &b);
    if (st != AL_OK) return st;
    *out = load_le(b, 8);
    return AL_OK;
}

/* A string: u64 length, then that many bytes, checked against the bytes left. */
static al_status rd_str(parser *p, const char *field, gguf_str *out) {
    *out = (gguf_str){0, NULL};
    uint64_t n;
    al_status st = rd_u64(p, field, &n);
    if (st != AL_OK) return st;
    uint64_t left = p->f->size - p->pos;
    if (n > left)
        return fail(p, AL_ERR_FORMAT,
                    "%s: string length %" PRIu64 " exceeds the %" PRIu64 " bytes left", field, n,
                    left);
    out->n = n;
    out->s = (const char *)(p->f->base + p->pos);
    p->pos += n;
    return AL_OK;
}

/* ---- names --------------------------------------------------------------------------- */

/* Index of the first byte of s that does not start a well-formed UTF-8 sequence, or n if
 * all of s is valid. Rejects stray continuation bytes, overlong forms (C0, C1, E0 80..9F,
 * F0 80..8F), surrogates (ED A0..BF), code points above U+10FFFF (F4 90.., F5..FF) and
 * sequences cut short by the end of s. */
static uint64_t utf8_bad_at(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        unsigned len;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0; /* below: overlong */
            if (c == 0xED) hi = 0x9F; /* above: UTF-16 surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90; /* below: overlong */
            if (c == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
        } else {
            return i;
        }
        if (len > n - i) return i;
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (unsigned k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

/* Keys and tensor names are looked up by C strings, so they must be non-empty, free of
 * NUL bytes, and valid UTF-8 so they print. */
static al_status check_name(const parser *p, const char *field, gguf_str s) {
    if (s.n == 0) return fail(p, AL_ERR_FORMAT, "%s is empty", field);
    const uint8_t *b = (const uint8_t *)s.s;
    const void *nul = memchr(b, 0, s.n);
    if (nul != NULL)
        return fail(p, AL_ERR_FORMAT, "%s contains a NUL byte at byte %td of %" PRIu64, field,
                    (const uint8_t *)nul - b, s.n);
    uint64_t bad = utf8_bad_at(b, s.n);
    if (bad < s.n)
        return fail(p, AL_ERR_FORMAT,
                    "%s is not valid UTF-8: byte %" PRIu64 " of %" PRIu64 " (0x%02x)", field, bad,
                    s.n, b[bad]);
    return AL_OK;
}

/* One entry of the duplicate check: a name and the index of its kv or tensor. */
typedef struct name_ref {
    const gguf_str *s;
    uint64_t idx;
} name_ref;

static int cmp_name_ref(const void *pa, const void *pb) {
    const name_ref *a = pa, *b = pb;
    uint64_t n = a->s->n < b->s->n ? a->s->n : b->s->n;
    int c = memcmp(a->s->s, b->s->s, (size_t)n);
    if (c != 0) return c;
    if (a->s->n != b->s->n) return a->s->n < b->s->n ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

/* Fails if two of n names are equal. The names are the gguf_str at `first` and every
 * `stride` bytes after it (the key of each gguf_kv, or the name of each gguf_tensor).
 * Sorting makes this O(n log n): files hold thousands of tensors. */
static al_status check_unique(parser *p, const char *what, const char *noun, const gguf_str *first,
                              size_t stride, uint64_t n) {
    if (n < 2) return AL_OK;
    name_ref *refs = al_malloc((size_t)n * sizeof *refs);
    if (refs == NULL)
        return fail(p, AL_ERR_NOMEM, "out of memory checking %" PRIu64 " %s names", n, what);
    for (uint64_t i = 0; i < n; i++) {
        refs[i].s = (const gguf_str *)((const char *)first + i * stride);
        refs[i].idx = i;
    }
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    al_status st = AL_OK;
    for (uint64_t i = 1; i < n && st == AL_OK; i++) {
        const name_ref *a = &refs[i - 1], *b = &refs[i];
        if (a->s->n == b->s->n && memcmp(a->s->s, b->s->s, (size_t)a->s->n) == 0) {
            /* ties sort by index, so b is the later entry: report it */
            set_where(p, what, b->idx, b->s);
            st =
                fail(p, AL_ERR_FORMAT, "duplicate %s (same as %s %" PRIu64 ")", noun, what, a->idx);
        }
    }
    al_free(refs);
    return st;
}

/* ---- key-value section --------------------------------------------------------------- */

/* Decodes a scalar of type t from its little-endian bytes into the union of kv. */
static void decode_scalar(gguf_kv *kv, gguf_vtype t, const uint8_t *b) {
    unsigned bits = 8u * vtype_bytes[t];
    uint64_t u = load_le(b, vtype_bytes[t]);
    switch (t) {
    case GGUF_VT_I8:
    case GGUF_VT_I16:
    case GGUF_VT_I32:
    case GGUF_VT_I64:
        /* sign-extend in unsigned arithmetic, then reinterpret: no implementation-defined
         * narrowing conversions */
        if (bits < 64 && (u >> (bits - 1)) != 0) u |= ~UINT64_C(0) << bits;
        memcpy(&kv->v.i, &u, sizeof u);
        break;
    case GGUF_VT_F32: {
        uint32_t x = (uint32_t)u;
        float v;
        memcpy(&v, &x, sizeof v);
        kv->v.f = v;
        break;
    }
    case GGUF_VT_F64:
        memcpy(&kv->v.f, &u, sizeof u);
        break;
    default: /* U8, U16, U32, U64, BOOL */
        kv->v.u = u;
        break;
    }
}

/* A STRING array: builds the index arr.strs[n], bounding n by the bytes left before
 * allocating (each string takes at least its 8-byte length). */
static al_status parse_str_array(parser *p, gguf_kv *kv) {
    uint64_t n = kv->v.arr.n, left = p->f->size - p->pos;
    if (n > left / STR_MIN_BYTES)
        return fail(p, AL_ERR_FORMAT,
                    "array of %" PRIu64 " strings cannot fit in the %" PRIu64 " bytes left", n,
                    left);
    if (n == 0) return AL_OK;
    kv->v.arr.strs = al_calloc((size_t)n, sizeof(gguf_str));
    if (kv->v.arr.strs == NULL)
        return fail(p, AL_ERR_NOMEM, "out of memory for an index of %" PRIu64 " strings", n);
    for (uint64_t j = 0; j < n; j++) {
        char field[48];
        snprintf(field, sizeof field, "element %" PRIu64, j);
        al_status st = rd_str(p, field, &kv->v.arr.strs[j]);
        if (st != AL_OK) return st;
    }
    return AL_OK;
}

/* An array value: u32 element type, u64 count, elements. */
static al_status parse_array(parser *p, gguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    al_status st = rd_u32(p, "array element type", &et);
    if (st == AL_OK) st = rd_u64(p, "array length", &n);
    if (st != AL_OK) return st;
    if (et >= GGUF_VT_COUNT)
        return fail(p, AL_ERR_FORMAT, "array element type %" PRIu32 " is unknown", et);
    if (et == GGUF_VT_ARRAY)
        return fail(p, AL_ERR_UNSUPPORTED, "arrays of arrays are not supported");
    kv->v.arr.type = (gguf_vtype)et;
    kv->v.arr.n = n;
    kv->v.arr.data = p->f->base + p->pos;
    if (et == GGUF_VT_STRING) return parse_str_array(p, kv);

    uint64_t n_bytes, left = p->f->size - p->pos;
    if (!al_mul_u64(n, vtype_bytes[et], &n_bytes) || n_bytes > left)
        return fail(p, AL_ERR_FORMAT, "array of %" PRIu64 " %s exceeds the %" PRIu64 " bytes left",
                    n, gguf_vtype_name(et), left);
    const uint8_t *b;
    st = take(p, n_bytes, "array data", &b);
    if (st != AL_OK) return st;
    if (et == GGUF_VT_BOOL)
        for (uint64_t j = 0; j < n; j++)
            if (b[j] > 1)
                return fail(p, AL_ERR_FORMAT, "bool element %" PRIu64 " is %u; must be 0 or 1", j,
                            b[j]);
    return AL_OK;
}

/* One pair: key, value type, value. */
static al_status parse_kv(parser *p, uint64_t i, gguf_kv *kv) {
    set_where(p, "kv", i, NULL);
    al_status st = rd_str(p, "key", &kv->key);
    if (st == AL_OK) st = check_name(p, "key", kv->key);
    if (st != AL_OK) return st;
    set_where(p, "kv", i, &kv->key);

    uint32_t t;
    st = rd_u32(p, "value type", &t);
    if (st != AL_OK) return st;
    if (t >= GGUF_VT_COUNT) return fail(p, AL_ERR_FORMAT, "value type %" PRIu32 " is unknown", t);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_VT_STRING) return rd_str(p, "string value", &kv->v.str);
    if (t == GGUF_VT_ARRAY) return parse_array(p, kv);

    const uint8_t *b;
    st = take(p, vtype_bytes[t], gguf_vtype_name(t), &b);
    if (st != AL_OK) return st;
    if (t == GGUF_VT_BOOL && b[0] > 1)
        return fail(p, AL_ERR_FORMAT, "bool value is %u; must be 0 or 1", b[0]);
    decode_scalar(kv, (gguf_vtype)t, b);
    return AL_OK;
}

static al_status parse_kvs(parser *p) {
    gguf_file *f = p->f;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        al_status st = parse_kv(p, i, &f->kv[i]);
        if (st != AL_OK) return st;
    }
    p->where[0] = '\0';
    if (f->n_kv == 0) return AL_OK;
    return check_unique(p, "kv", "key", &f->kv[0].key, sizeof(gguf_kv), f->n_kv);
}

/* general.alignment: optional, an unsigned integer (u32 in the spec), a power of two. */
static al_status read_alignment(parser *p) {
    gguf_file *f = p->f;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_key(f, "general.alignment");
    if (kv == NULL) return AL_OK;
    set_where(p, "kv", (uint64_t)(kv - f->kv), &kv->key);
    if (kv->type != GGUF_VT_U32 && kv->type != GGUF_VT_U8 && kv->type != GGUF_VT_U16 &&
        kv->type != GGUF_VT_U64)
        return fail(p, AL_ERR_FORMAT, "has type %s; expected u32", gguf_vtype_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) != 0)
        return fail(p, AL_ERR_FORMAT, "alignment %" PRIu64 " is not a power of two", kv->v.u);
    f->alignment = kv->v.u;
    p->where[0] = '\0';
    return AL_OK;
}

/* ---- tensor infos -------------------------------------------------------------------- */

/* Element count and storage size of t, with every product overflow-checked; its type
 * must be known to quant.h and ne[0] a whole number of blocks. */
static al_status size_tensor(parser *p, gguf_tensor *t) {
    const quant_traits *tr = quant_get_traits(t->type);
    if (tr == NULL)
        return fail(p, AL_ERR_UNSUPPORTED, "tensor type %" PRIu32 " is unknown", t->type);
    AL_ASSERT(tr->block_size > 0 && tr->type_size > 0);
    if ((uint64_t)t->ne[0] % tr->block_size != 0)
        return fail(p, AL_ERR_FORMAT,
                    "ne[0] = %" PRId64 " is not a multiple of the block size %" PRIu32 " of %s",
                    t->ne[0], tr->block_size, tr->name);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        if (!al_mul_u64(n_elem, (uint64_t)t->ne[d], &n_elem))
            return fail(p, AL_ERR_FORMAT,
                        "element count %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
                        " overflows 64 bits",
                        t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    /* n_elem is a multiple of block_size because ne[0] is, so this division is exact */
    if (!al_mul_u64(n_elem / tr->block_size, tr->type_size, &t->n_bytes))
        return fail(p, AL_ERR_FORMAT,
                    "size of %" PRIu64 " elements of %s (%" PRIu32 " bytes per %" PRIu32
                    ") overflows 64 bits",
                    n_elem, tr->name, tr->type_size, tr->block_size);
    t->n_elem = n_elem;
    return AL_OK;
}

/* One tensor info: name, n_dims, ne[n_dims], type, offset. */
static al_status parse_tensor_info(parser *p, uint64_t i, gguf_tensor *t) {
    set_where(p, "tensor", i, NULL);
    al_status st = rd_str(p, "name", &t->name);
    if (st == AL_OK) st = check_name(p, "name", t->name);
    if (st != AL_OK) return st;
    set_where(p, "tensor", i, &t->name);

    uint32_t n_dims;
    st = rd_u32(p, "n_dims", &n_dims);
    if (st != AL_OK) return st;
    if (n_dims < 1 || n_dims > 4)
        return fail(p, AL_ERR_FORMAT, "n_dims is %" PRIu32 "; must be 1..4", n_dims);
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        st = rd_u64(p, "dimension", &ne);
        if (st != AL_OK) return st;
        if (ne == 0) return fail(p, AL_ERR_FORMAT, "dimension %" PRIu32 " is 0", d);
        if (ne > (uint64_t)INT64_MAX)
            return fail(p, AL_ERR_FORMAT,
                        "dimension %" PRIu32 " is %" PRIu64 ", larger than INT64_MAX", d, ne);
        t->ne[d] = (int64_t)ne;
    }
    st = rd_u32(p, "type", &t->type);
    if (st == AL_OK) st = rd_u64(p, "offset", &t->offset);
    if (st == AL_OK) st = size_tensor(p, t);
    if (st != AL_OK) return st;
    if (t->offset % p->f->alignment != 0)
        return fail(p, AL_ERR_FORMAT,
                    "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, t->offset,
                    p->f->alignment);
    return AL_OK;
}

static int cmp_tensor_offset(const void *pa, const void *pb) {
    const gguf_tensor *a = *(const gguf_tensor *const *)pa, *b = *(const gguf_tensor *const *)pb;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    return a < b ? -1 : (a > b);
}

/* Fails if the data of two tensors share a byte: sorted by offset, each must end before
 * the next begins. Offsets and sizes are already known to lie inside the file. */
static al_status check_overlap(parser *p) {
    gguf_file *f = p->f;
    if (f->n_tensors < 2) return AL_OK;
    const gguf_tensor **by_off = al_malloc((size_t)f->n_tensors * sizeof *by_off);
    if (by_off == NULL)
        return fail(p, AL_ERR_NOMEM, "out of memory sorting %" PRIu64 " tensors", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        by_off[i] = &f->tensors[i];
    qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, cmp_tensor_offset);
    al_status st = AL_OK;
    for (uint64_t i = 1; i < f->n_tensors && st == AL_OK; i++) {
        const gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->n_bytes > b->offset) {
            set_where(p, "tensor", (uint64_t)(b - f->tensors), &b->name);
            st = fail(p, AL_ERR_FORMAT,
                      "data at [%" PRIu64 ", %" PRIu64 ") overlaps tensor %td (data at [%" PRIu64
                      ", %" PRIu64 "))",
                      b->offset, b->offset + b->n_bytes, a - f->tensors, a->offset,
                      a->offset + a->n_bytes);
        }
    }
    al_free(by_off);
    return st;
}

/* The data section starts at the end of the tensor infos rounded up to the alignment.
 * Each tensor's data must lie inside the file; a file without tensors may end before
 * the data section would begin (vocabulary-only files do). */
static al_status place_tensors(parser *p) {
    gguf_file *f = p->f;
    p->where[0] = '\0';
    uint64_t rem = p->pos % f->alignment;
    if (!al_add_u64(p->pos, rem ? f->alignment - rem : 0, &f->data_offset))
        return fail(p, AL_ERR_FORMAT,
                    "data section offset overflows: %" PRIu64 " rounded up to %" PRIu64, p->pos,
                    f->alignment);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t start, end;
        if (!al_add_u64(f->data_offset, t->offset, &start) ||
            !al_add_u64(start, t->n_bytes, &end) || end > f->size) {
            set_where(p, "tensor", i, &t->name);
            return fail(p, AL_ERR_FORMAT,
                        "%" PRIu64 " bytes of data at offset %" PRIu64 " (data section at %" PRIu64
                        ") end past the end of the file (%" PRIu64 " bytes)",
                        t->n_bytes, t->offset, f->data_offset, f->size);
        }
        t->data = f->base + start;
    }
    return check_overlap(p);
}

static al_status parse_tensor_infos(parser *p) {
    gguf_file *f = p->f;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        al_status st = parse_tensor_info(p, i, &f->tensors[i]);
        if (st != AL_OK) return st;
    }
    p->where[0] = '\0';
    if (f->n_tensors == 0) return AL_OK;
    return check_unique(p, "tensor", "tensor name", &f->tensors[0].name, sizeof(gguf_tensor),
                        f->n_tensors);
}

/* ---- header and top level ------------------------------------------------------------ */

/* Magic, version and the two counts; the counts are bounded by the bytes that follow. */
static al_status parse_header(parser *p) {
    gguf_file *f = p->f;
    if (f->size == 0) return fail(p, AL_ERR_FORMAT, "file is empty");
    const uint8_t *m = f->base;
    if (f->size >= 4 && memcmp(m, "GGUF", 4) != 0)
        return fail(p, AL_ERR_FORMAT,
                    "not a GGUF file: magic is %02x %02x %02x %02x, expected \"GGUF\"", m[0], m[1],
                    m[2], m[3]);
    if (f->size < GGUF_HEADER_BYTES)
        return fail(p, AL_ERR_FORMAT,
                    "file is %" PRIu64 " bytes, shorter than the %d-byte GGUF header", f->size,
                    GGUF_HEADER_BYTES);
    strcpy(p->where, "header");
    p->pos = 4;
    uint32_t version;
    al_status st = rd_u32(p, "version", &version);
    if (st == AL_OK) st = rd_u64(p, "n_tensors", &f->n_tensors);
    if (st == AL_OK) st = rd_u64(p, "n_kv", &f->n_kv);
    AL_ASSERT(st == AL_OK); /* the header fits: checked above */
    f->version = version;
    if (version == 0x02000000u || version == 0x03000000u)
        return fail(p, AL_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return fail(p, AL_ERR_UNSUPPORTED,
                    "GGUF version %" PRIu32 " is not supported (only versions 2 and 3)", version);

    uint64_t left = f->size - p->pos;
    if (f->n_kv > left / KV_MIN_BYTES || f->n_tensors > left / TENSOR_MIN_BYTES ||
        f->n_kv * KV_MIN_BYTES + f->n_tensors * TENSOR_MIN_BYTES > left)
        return fail(p, AL_ERR_FORMAT,
                    "n_kv = %" PRIu64 " and n_tensors = %" PRIu64 " cannot fit in the %" PRIu64
                    " bytes after the header",
                    f->n_kv, f->n_tensors, left);
    return AL_OK;
}

/* Parses base[0..size) into a new gguf_file. With mapped, the result owns the mapping
 * and unmaps it on every path, failure included. */
static al_status parse_image(const uint8_t *base, uint64_t size, const char *name, bool mapped,
                             gguf_file **out) {
    *out = NULL;
    gguf_file *f = al_calloc(1, sizeof *f);
    if (f == NULL) {
        if (mapped) munmap((void *)base, (size_t)size);
        return al_error(AL_ERR_NOMEM, "%s: out of memory", name);
    }
    f->base = base;
    f->size = size;
    f->mapped = mapped;
    size_t name_len = strlen(name);
    f->path = al_malloc(name_len + 1);
    if (f->path == NULL) {
        gguf_close(f);
        return al_error(AL_ERR_NOMEM, "%s: out of memory", name);
    }
    memcpy(f->path, name, name_len + 1);

    parser p = {.f = f, .pos = 0, .where = ""};
    al_status st = parse_header(&p);
    p.where[0] = '\0';
    /* n_kv and n_tensors now fit in the file, so these arrays are bounded by its size.
     * The counts stay set while the arrays are empty: gguf_close copes with that. */
    if (st == AL_OK && f->n_kv > 0 && (f->kv = al_calloc((size_t)f->n_kv, sizeof *f->kv)) == NULL)
        st = fail(&p, AL_ERR_NOMEM, "out of memory for %" PRIu64 " key-value pairs", f->n_kv);
    if (st == AL_OK && f->n_tensors > 0 &&
        (f->tensors = al_calloc((size_t)f->n_tensors, sizeof *f->tensors)) == NULL)
        st = fail(&p, AL_ERR_NOMEM, "out of memory for %" PRIu64 " tensors", f->n_tensors);
    if (st == AL_OK) st = parse_kvs(&p);
    if (st == AL_OK) st = read_alignment(&p);
    if (st == AL_OK) st = parse_tensor_infos(&p);
    if (st == AL_OK) st = place_tensors(&p);
    if (st != AL_OK) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return AL_OK;
}

al_status gguf_parse(const void *data, uint64_t size, const char *name, gguf_file **out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_parse: out is NULL");
    *out = NULL;
    if (name == NULL) name = "<memory>";
    if (data == NULL && size > 0) return al_error(AL_ERR_ARG, "%s: data is NULL", name);
    static const uint8_t empty[1];
    return parse_image(data ? data : empty, size, name, false, out);
}

al_status gguf_open(const char *path, gguf_file **out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_open: out is NULL");
    *out = NULL;
    if (path == NULL) return al_error(AL_ERR_ARG, "gguf_open: path is NULL");
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, and we
     * reject anything but a regular file anyway; it changes nothing for regular files */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return al_error(AL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    al_status st = AL_OK;
    if (fstat(fd, &sb) != 0)
        st = al_error(AL_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode))
        st = al_error(AL_ERR_IO, "%s: is a directory, not a GGUF file", path);
    else if (!S_ISREG(sb.st_mode))
        st = al_error(AL_ERR_IO, "%s: is not a regular file", path);
    else if (sb.st_size == 0) /* mmap cannot map 0 bytes */
        st = al_error(AL_ERR_FORMAT, "%s: file is empty", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        st = al_error(AL_ERR_IO, "%s: %jd bytes is too large to map", path, (intmax_t)sb.st_size);
    if (st != AL_OK) {
        close(fd);
        return st;
    }
    uint64_t size = (uint64_t)sb.st_size;
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); /* the mapping keeps the file open */
    if (m == MAP_FAILED)
        return al_error(AL_ERR_IO, "%s: cannot mmap %" PRIu64 " bytes: %s", path, size,
                        strerror(err));
    return parse_image(m, size, path, true, out);
}

void gguf_close(gguf_file *f) {
    if (f == NULL) return;
    /* kv is zeroed at allocation, so entries a failed parse never reached hold NULL */
    for (uint64_t i = 0; f->kv != NULL && i < f->n_kv; i++)
        if (f->kv[i].type == GGUF_VT_ARRAY) al_free(f->kv[i].v.arr.strs);
    al_free(f->kv);
    al_free(f->tensors);
    if (f->mapped) munmap((void *)f->base, (size_t)f->size);
    al_free(f->path);
    al_free(f);
}

/* ---- lookups and getters ------------------------------------------------------------- */

const gguf_kv *gguf_find_key(const gguf_file *f, const char *key) {
    if (f == NULL || key == NULL) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (f == NULL || name == NULL) return NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* Finds key for a getter: AL_OK with *kv set, AL_OK with *kv NULL if absent and
 * `optional`, or a failure naming the file and key. */
static al_status getter_find(const gguf_file *f, const char *key, bool optional,
                             const gguf_kv **kv) {
    *kv = NULL;
    if (f == NULL || key == NULL) return al_error(AL_ERR_ARG, "gguf getter: NULL argument");
    *kv = gguf_find_key(f, key);
    if (*kv == NULL && !optional)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' is missing", f->path, key);
    return AL_OK;
}

/* Any integer type whose value fits a u32. */
static al_status kv_to_u32(const gguf_file *f, const gguf_kv *kv, const char *key, uint32_t *out) {
    switch (kv->type) {
    case GGUF_VT_U8:
    case GGUF_VT_U16:
    case GGUF_VT_U32:
    case GGUF_VT_U64:
        if (kv->v.u > UINT32_MAX) break;
        *out = (uint32_t)kv->v.u;
        return AL_OK;
    case GGUF_VT_I8:
    case GGUF_VT_I16:
    case GGUF_VT_I32:
    case GGUF_VT_I64:
        if (kv->v.i < 0 || kv->v.i > (int64_t)UINT32_MAX) {
            return al_error(AL_ERR_FORMAT, "%s: key '%s' is %" PRId64 ", out of range for u32",
                            f->path, key, kv->v.i);
        }
        *out = (uint32_t)kv->v.i;
        return AL_OK;
    default:
        return al_error(AL_ERR_FORMAT, "%s: key '%s' has type %s; expected an integer", f->path,
                        key, gguf_vtype_name(kv->type));
    }
    return al_error(AL_ERR_FORMAT, "%s: key '%s' is %" PRIu64 ", out of range for u32", f->path,
                    key, kv->v.u);
}

al_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_u32: out is NULL");
    *out = 0;
    const gguf_kv *kv;
    al_status st = getter_find(f, key, false, &kv);
    return st != AL_OK ? st : kv_to_u32(f, kv, key, out);
}

al_status gguf_get_u32_or(const gguf_file *f, const char *key, uint32_t dflt, uint32_t *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_u32_or: out is NULL");
    *out = dflt;
    const gguf_kv *kv;
    al_status st = getter_find(f, key, true, &kv);
    if (st != AL_OK || kv == NULL) return st;
    st = kv_to_u32(f, kv, key, out);
    if (st != AL_OK) *out = dflt;
    return st;
}

/* F32 or F64 (narrowed; a finite value beyond the float range is an error). */
static al_status kv_to_f32(const gguf_file *f, const gguf_kv *kv, const char *key, float *out) {
    if (kv->type != GGUF_VT_F32 && kv->type != GGUF_VT_F64)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' has type %s; expected f32", f->path, key,
                        gguf_vtype_name(kv->type));
    double d = kv->v.f;
    if (!isinf(d) && (d > FLT_MAX || d < -FLT_MAX))
        return al_error(AL_ERR_FORMAT, "%s: key '%s' is %g, out of range for f32", f->path, key, d);
    *out = (float)d;
    return AL_OK;
}

al_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_f32: out is NULL");
    *out = 0.0f;
    const gguf_kv *kv;
    al_status st = getter_find(f, key, false, &kv);
    return st != AL_OK ? st : kv_to_f32(f, kv, key, out);
}

al_status gguf_get_f32_or(const gguf_file *f, const char *key, float dflt, float *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_f32_or: out is NULL");
    *out = dflt;
    const gguf_kv *kv;
    al_status st = getter_find(f, key, true, &kv);
    if (st != AL_OK || kv == NULL) return st;
    st = kv_to_f32(f, kv, key, out);
    if (st != AL_OK) *out = dflt;
    return st;
}

al_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_str: out is NULL");
    *out = (gguf_str){0, NULL};
    const gguf_kv *kv;
    al_status st = getter_find(f, key, false, &kv);
    if (st != AL_OK) return st;
    if (kv->type != GGUF_VT_STRING)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' has type %s; expected string", f->path, key,
                        gguf_vtype_name(kv->type));
    *out = kv->v.str;
    return AL_OK;
}

al_status gguf_get_bool_or(const gguf_file *f, const char *key, bool dflt, bool *out) {
    if (out == NULL) return al_error(AL_ERR_ARG, "gguf_get_bool_or: out is NULL");
    *out = dflt;
    const gguf_kv *kv;
    al_status st = getter_find(f, key, true, &kv);
    if (st != AL_OK || kv == NULL) return st;
    if (kv->type != GGUF_VT_BOOL)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' has type %s; expected bool", f->path, key,
                        gguf_vtype_name(kv->type));
    *out = kv->v.u != 0;
    return AL_OK;
}

/* ---- small helpers ------------------------------------------------------------------- */

const char *gguf_vtype_name(uint32_t t) {
    static const char *const names[GGUF_VT_COUNT] = {
        [GGUF_VT_U8] = "u8",       [GGUF_VT_I8] = "i8",     [GGUF_VT_U16] = "u16",
        [GGUF_VT_I16] = "i16",     [GGUF_VT_U32] = "u32",   [GGUF_VT_I32] = "i32",
        [GGUF_VT_F32] = "f32",     [GGUF_VT_BOOL] = "bool", [GGUF_VT_STRING] = "string",
        [GGUF_VT_ARRAY] = "array", [GGUF_VT_U64] = "u64",   [GGUF_VT_I64] = "i64",
        [GGUF_VT_F64] = "f64",
    };
    return t < GGUF_VT_COUNT ? names[t] : "unknown";
}

char *gguf_str_copy(gguf_str s, char *buf, uint64_t buf_size) {
    if (buf == NULL || buf_size == 0) return buf;
    uint64_t n = s.n < buf_size - 1 ? s.n : buf_size - 1;
    if (n > 0) memcpy(buf, s.s, (size_t)n);
    buf[n] = '\0';
    return buf;
}

bool gguf_str_eq(gguf_str s, const char *c) {
    if (c == NULL) return false;
    size_t n = strlen(c);
    return s.n == n && (n == 0 || memcmp(s.s, c, n) == 0);
}

/* ---- the public view of a file's header (anyllm.h al_gguf) ------------------------------ */

struct al_gguf {
    gguf_file *f;
};

al_status al_gguf_open(const char *path, al_gguf **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_gguf_open: no output");
    *out = NULL;
    al_gguf *g = al_calloc(1, sizeof *g);
    if (!g) return al_error(AL_ERR_NOMEM, "out of memory opening %s", path ? path : "(null)");
    al_status st = gguf_open(path, &g->f);
    if (st != AL_OK) {
        al_free(g);
        return st;
    }
    *out = g;
    return AL_OK;
}

void al_gguf_close(al_gguf *g) {
    if (!g) return;
    gguf_close(g->f);
    al_free(g);
}

void al_gguf_get_info(const al_gguf *g, al_gguf_info *out) {
    if (!out) return;
    if (!g) {
        *out = (al_gguf_info){0};
        return;
    }
    const gguf_file *f = g->f;
    *out = (al_gguf_info){.version = f->version, .file_size = f->size,
                          .alignment = f->alignment, .n_kv = f->n_kv,
                          .n_tensors = f->n_tensors};
}

al_status al_gguf_kv(const al_gguf *g, uint64_t i, char *key, size_t key_size, const char **type,
                     char *value, size_t value_size, bool *cut) {
    if (!g || !key || key_size == 0 || !type || !value || value_size == 0 || !cut)
        return al_error(AL_ERR_ARG, "al_gguf_kv: a missing argument");
    if (i >= g->f->n_kv)
        return al_error(AL_ERR_ARG, "al_gguf_kv: entry %" PRIu64 " of %" PRIu64, i, g->f->n_kv);
    const gguf_kv *kv = &g->f->kv[i];
    gguf_str_copy(kv->key, key, key_size);
    *type = gguf_vtype_name(kv->type);
    *cut = false;
    switch (kv->type) {
    case GGUF_VT_U8: case GGUF_VT_U16: case GGUF_VT_U32: case GGUF_VT_U64:
        snprintf(value, value_size, "%" PRIu64, kv->v.u);
        break;
    case GGUF_VT_I8: case GGUF_VT_I16: case GGUF_VT_I32: case GGUF_VT_I64:
        snprintf(value, value_size, "%" PRId64, kv->v.i);
        break;
    case GGUF_VT_F32: case GGUF_VT_F64: snprintf(value, value_size, "%g", kv->v.f); break;
    case GGUF_VT_BOOL: snprintf(value, value_size, "%s", kv->v.u ? "true" : "false"); break;
    case GGUF_VT_STRING:
        gguf_str_copy(kv->v.str, value, value_size);
        for (char *p = value; *p; p++)
            if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
        *cut = kv->v.str.n > value_size - 1;
        break;
    case GGUF_VT_ARRAY:
        snprintf(value, value_size, "[%s x %" PRIu64 "]", gguf_vtype_name(kv->v.arr.type),
                 kv->v.arr.n);
        break;
    default: snprintf(value, value_size, "?"); break;
    }
    return AL_OK;
}

al_status al_gguf_tensor_info(const al_gguf *g, uint64_t i, char *name, size_t name_size,
                              al_gguf_tensor *out) {
    if (!g || !name || name_size == 0 || !out)
        return al_error(AL_ERR_ARG, "al_gguf_tensor_info: a missing argument");
    if (i >= g->f->n_tensors)
        return al_error(AL_ERR_ARG, "al_gguf_tensor_info: tensor %" PRIu64 " of %" PRIu64, i,
                        g->f->n_tensors);
    const gguf_tensor *t = &g->f->tensors[i];
    gguf_str_copy(t->name, name, name_size);
    *out = (al_gguf_tensor){.type = quant_type_name(t->type), .n_dims = (int)t->n_dims,
                            .n_elem = t->n_elem, .n_bytes = t->n_bytes};
    memcpy(out->ne, t->ne, sizeof out->ne);
    return AL_OK;
}
