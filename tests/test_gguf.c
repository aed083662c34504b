/* test_gguf.c: the GGUF reader of gguf.h against files built byte by byte.
 *
 * A small builder (gbuf) writes GGUF images in memory: header, key-value pairs, tensor
 * infos, padding and data. The tests build valid files and check every field the
 * reader exposes, then build malformed ones: each must be rejected with a status and a
 * message naming the file and the field, and must not read outside its buffer (each
 * image is copied into an allocation of exactly its size, so ASan sees any over-read).
 * Out-of-memory is injected at every allocation of a parse, and every GGUF file in
 * $SHARED must open.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "format/quant.h"
#include "test.h"
#include "util.h"

/* ---- an in-memory GGUF builder ------------------------------------------------------ */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void gb_put(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL) {
            fprintf(stderr, "test_gguf: out of memory building a file\n");
            exit(1);
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void gb_free(gbuf *b) {
    free(b->p);
    *b = (gbuf){0};
}

/* Little-endian integers, written byte by byte as the format stores them. */
static void gb_le(gbuf *b, uint64_t v, unsigned n_bytes) {
    uint8_t t[8];
    for (unsigned k = 0; k < n_bytes; k++)
        t[k] = (uint8_t)(v >> (8 * k));
    gb_put(b, t, n_bytes);
}
static void gb_u8(gbuf *b, uint8_t v) {
    gb_le(b, v, 1);
}
static void gb_u32(gbuf *b, uint32_t v) {
    gb_le(b, v, 4);
}
static void gb_u64(gbuf *b, uint64_t v) {
    gb_le(b, v, 8);
}
static void gb_f32(gbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}
static void gb_zeros(gbuf *b, size_t n) {
    for (size_t k = 0; k < n; k++)
        gb_u8(b, 0);
}
static void gb_pad(gbuf *b, size_t align) {
    while (b->n % align != 0)
        gb_u8(b, 0);
}

/* A GGUF string: u64 length, bytes. */
static void gb_strn(gbuf *b, const void *s, uint64_t n) {
    gb_u64(b, n);
    gb_put(b, s, (size_t)n);
}
static void gb_str(gbuf *b, const char *s) {
    gb_strn(b, s, strlen(s));
}

static void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* The key and value type of a pair; the caller appends the value. */
static void gb_key(gbuf *b, const char *key, uint32_t vtype) {
    gb_str(b, key);
    gb_u32(b, vtype);
}
static void gb_kv_u32(gbuf *b, const char *key, uint32_t v) {
    gb_key(b, key, GGUF_VT_U32);
    gb_u32(b, v);
}
static void gb_kv_str(gbuf *b, const char *key, const char *v) {
    gb_key(b, key, GGUF_VT_STRING);
    gb_str(b, v);
}

/* A tensor info with the name given as raw bytes; ne holds n_dims values. */
static void gb_tensor_raw(gbuf *b, const void *name, size_t name_n, uint32_t n_dims,
                          const uint64_t *ne, uint32_t type, uint64_t offset) {
    gb_strn(b, name, name_n);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static void gb_tensor(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t offset) {
    gb_tensor_raw(b, name, strlen(name), n_dims, ne, type, offset);
}

/* ---- the valid test file --------------------------------------------------------------- */

/* Where the sections of a built file end, to report truncations per section. */
typedef struct layout {
    size_t kv_start, info_start, info_end, data_start;
} layout;

#define VALID_N_KV 18
#define VALID_N_TENSORS 3
static const char *const k_raw_value = "\xff\xfe raw bytes";

/* A file with one pair of every value type, a few arrays and three tensors of
 * F32 [4][3], Q8_0 [2][64] and F16 [8]. alignment 0 leaves general.alignment out
 * (default 32). Tensor data byte k of the data section is (k * 7 + 1) & 0xff. */
static layout build_valid(gbuf *b, uint32_t alignment) {
    layout L;
    uint32_t align = alignment ? alignment : 32;
    gb_header(b, 3, VALID_N_TENSORS, VALID_N_KV - (alignment ? 0 : 1));
    L.kv_start = b->n;
    gb_kv_str(b, "general.architecture", "llama");
    if (alignment) gb_kv_u32(b, "general.alignment", alignment);
    gb_key(b, "t.u8", GGUF_VT_U8), gb_u8(b, 200);
    gb_key(b, "t.i8", GGUF_VT_I8), gb_u8(b, (uint8_t)-5);
    gb_key(b, "t.u16", GGUF_VT_U16), gb_le(b, 60000, 2);
    gb_key(b, "t.i16", GGUF_VT_I16), gb_le(b, (uint16_t)-30000, 2);
    gb_kv_u32(b, "t.u32", 4000000000u);
    gb_key(b, "t.i32", GGUF_VT_I32), gb_u32(b, (uint32_t)-7);
    gb_key(b, "t.f32", GGUF_VT_F32), gb_f32(b, 1.5f);
    gb_key(b, "t.bool", GGUF_VT_BOOL), gb_u8(b, 1);
    gb_key(b, "t.u64", GGUF_VT_U64), gb_u64(b, UINT64_C(1) << 40);
    gb_key(b, "t.i64", GGUF_VT_I64), gb_u64(b, (uint64_t) - (INT64_C(1) << 40));
    double d = 2.25;
    uint64_t du;
    memcpy(&du, &d, 8);
    gb_key(b, "t.f64", GGUF_VT_F64), gb_u64(b, du);
    gb_key(b, "t.arr_i32", GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_I32), gb_u64(b, 3);
    gb_u32(b, 1), gb_u32(b, (uint32_t)-2), gb_u32(b, 3);
    gb_key(b, "t.arr_str", GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_STRING), gb_u64(b, 3);
    gb_str(b, "a"), gb_str(b, ""), gb_str(b, k_raw_value); /* values need not be UTF-8 */
    gb_key(b, "t.arr_empty", GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_U8), gb_u64(b, 0);
    gb_key(b, "t.arr_bool", GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_BOOL), gb_u64(b, 2);
    gb_u8(b, 0), gb_u8(b, 1);
    gb_key(b, "t.cl\xc3\xa9.\xe5\x90\x8d.\xf0\x9f\x98\x80", GGUF_VT_U8), gb_u8(b, 1);

    L.info_start = b->n;
    uint64_t ne0[] = {4, 3}, ne1[] = {64, 2}, ne2[] = {8};
    uint64_t off1 = (48 + align - 1) / align * align;
    uint64_t off2 = (off1 + 136 + align - 1) / align * align;
    gb_tensor(b, "tok_embd.weight", 2, ne0, AL_TYPE_F32, 0);
    gb_tensor(b, "blk.0.attn_q.weight", 2, ne1, AL_TYPE_Q8_0, off1);
    gb_tensor(b, "norm.\xc3\xa9", 1, ne2, AL_TYPE_F16, off2);
    L.info_end = b->n;
    gb_pad(b, align);
    L.data_start = b->n;
    for (uint64_t k = 0; k < off2 + 16; k++)
        gb_u8(b, (uint8_t)(k * 7 + 1));
    return L;
}

/* Parses an exact-size copy of b, so ASan catches a read one past its end. */
static al_status parse_copy(const gbuf *b, const char *name, gguf_file **out) {
    void *copy = malloc(b->n ? b->n : 1);
    if (copy == NULL) exit(1);
    if (b->n) memcpy(copy, b->p, b->n);
    al_status st = gguf_parse(b->n ? copy : NULL, b->n, name, out);
    /* on success the result points into the copy: the callers here only need status */
    if (st == AL_OK) gguf_close(*out), *out = NULL;
    free(copy);
    return st;
}

/* ---- valid files ------------------------------------------------------------------------ */

static void check_valid_kvs(const gguf_file *f) {
    const gguf_kv *kv;
    CHECK((kv = gguf_find_key(f, "t.u8")) && kv->type == GGUF_VT_U8 && kv->v.u == 200);
    CHECK((kv = gguf_find_key(f, "t.i8")) && kv->type == GGUF_VT_I8 && kv->v.i == -5);
    CHECK((kv = gguf_find_key(f, "t.u16")) && kv->v.u == 60000);
    CHECK((kv = gguf_find_key(f, "t.i16")) && kv->v.i == -30000);
    CHECK((kv = gguf_find_key(f, "t.u32")) && kv->v.u == 4000000000u);
    CHECK((kv = gguf_find_key(f, "t.i32")) && kv->v.i == -7);
    CHECK((kv = gguf_find_key(f, "t.f32")) && kv->type == GGUF_VT_F32 && kv->v.f == 1.5);
    CHECK((kv = gguf_find_key(f, "t.bool")) && kv->type == GGUF_VT_BOOL && kv->v.u == 1);
    CHECK((kv = gguf_find_key(f, "t.u64")) && kv->v.u == UINT64_C(1) << 40);
    CHECK((kv = gguf_find_key(f, "t.i64")) && kv->v.i == -(INT64_C(1) << 40));
    CHECK((kv = gguf_find_key(f, "t.f64")) && kv->type == GGUF_VT_F64 && kv->v.f == 2.25);
    CHECK(gguf_find_key(f, "t.cl\xc3\xa9.\xe5\x90\x8d.\xf0\x9f\x98\x80") != NULL);
    CHECK(gguf_find_key(f, "t.u") == NULL && gguf_find_key(f, "t.u80") == NULL);

    kv = gguf_find_key(f, "t.arr_i32");
    CHECK(kv && kv->type == GGUF_VT_ARRAY && kv->v.arr.type == GGUF_VT_I32 && kv->v.arr.n == 3);
    if (kv) {
        int32_t v[3];
        memcpy(v, kv->v.arr.data, sizeof v); /* may be unaligned in the mapping */
        CHECK(v[0] == 1 && v[1] == -2 && v[2] == 3);
        CHECK(kv->v.arr.strs == NULL);
    }
    kv = gguf_find_key(f, "t.arr_str");
    CHECK(kv && kv->v.arr.type == GGUF_VT_STRING && kv->v.arr.n == 3 && kv->v.arr.strs);
    if (kv && kv->v.arr.strs) {
        CHECK(gguf_str_eq(kv->v.arr.strs[0], "a"));
        CHECK(kv->v.arr.strs[1].n == 0);
        CHECK(gguf_str_eq(kv->v.arr.strs[2], k_raw_value));
    }
    kv = gguf_find_key(f, "t.arr_empty");
    CHECK(kv && kv->v.arr.type == GGUF_VT_U8 && kv->v.arr.n == 0);
    kv = gguf_find_key(f, "t.arr_bool");
    CHECK(kv && kv->v.arr.n == 2 && ((const uint8_t *)kv->v.arr.data)[1] == 1);
}

static void check_valid_tensors(const gguf_file *f, const uint8_t *base) {
    CHECK(f->n_tensors == VALID_N_TENSORS);
    CHECK(f->data_offset % f->alignment == 0);
    const gguf_tensor *t = gguf_find_tensor(f, "tok_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 3 && t->ne[2] == 1 && t->ne[3] == 1);
    CHECK(t && t->type == AL_TYPE_F32 && t->n_elem == 12 && t->n_bytes == 48 && t->offset == 0);
    t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    CHECK(t && t->type == AL_TYPE_Q8_0 && t->n_elem == 128 && t->n_bytes == 136);
    CHECK(t && t->offset % f->alignment == 0);
    t = gguf_find_tensor(f, "norm.\xc3\xa9");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 8 && t->n_bytes == 16);
    CHECK(gguf_find_tensor(f, "norm") == NULL);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        t = &f->tensors[i];
        const uint8_t *want = base + f->data_offset + t->offset;
        CHECK_MSG(t->data == want, "tensor %d data pointer", (int)i);
        /* the content is the builder's pattern, so the pointer reaches the right bytes */
        const uint8_t *d = t->data;
        CHECK(d[0] == (uint8_t)(t->offset * 7 + 1));
        CHECK(d[t->n_bytes - 1] == (uint8_t)((t->offset + t->n_bytes - 1) * 7 + 1));
    }
    CHECK(f->data_offset + f->tensors[2].offset + f->tensors[2].n_bytes == f->size);
}

static void test_valid_file(void) {
    gbuf b = {0};
    layout L = build_valid(&b, 0);
    gguf_file *f = NULL;
    al_status st = gguf_parse(b.p, b.n, "valid.gguf", &f);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (f) {
        CHECK(f->version == 3 && f->n_kv == VALID_N_KV - 1 && f->alignment == 32);
        CHECK(f->data_offset == L.data_start && f->base == b.p && f->size == b.n);
        CHECK(!f->mapped && strcmp(f->path, "valid.gguf") == 0);
        check_valid_kvs(f);
        check_valid_tensors(f, b.p);
    }
    gguf_close(f);
    gb_free(&b);
}

static void test_valid_alignment_64(void) {
    gbuf b = {0};
    build_valid(&b, 64);
    gguf_file *f = NULL;
    al_status st = gguf_parse(b.p, b.n, "align64.gguf", &f);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (f) {
        CHECK(f->alignment == 64 && f->data_offset % 64 == 0);
        CHECK(f->tensors[1].offset == 64 && f->tensors[2].offset == 256);
        check_valid_tensors(f, b.p);
    }
    gguf_close(f);
    gb_free(&b);
}

/* Vocabulary-only files have no tensors and end right after the pairs; version 2. */
static void test_vocab_only(void) {
    gbuf b = {0};
    gb_header(&b, 2, 0, 2);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_VT_ARRAY), gb_u32(&b, GGUF_VT_STRING);
    gb_u64(&b, 2), gb_str(&b, "<s>"), gb_str(&b, "\xe2\x96\x81the");
    gguf_file *f = NULL;
    al_status st = gguf_parse(b.p, b.n, "vocab.gguf", &f);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (f) {
        CHECK(f->version == 2 && f->n_tensors == 0 && f->tensors == NULL);
        CHECK(f->data_offset >= f->size); /* the data section would start past the end */
        const gguf_kv *kv = gguf_find_key(f, "tokenizer.ggml.tokens");
        CHECK(kv && kv->v.arr.n == 2 && gguf_str_eq(kv->v.arr.strs[1], "\xe2\x96\x81the"));
    }
    gguf_close(f);
    gb_free(&b);

    /* a file with nothing but a header is valid too */
    gb_header(&b, 3, 0, 0);
    st = gguf_parse(b.p, b.n, "header-only.gguf", &f);
    CHECK_MSG(st == AL_OK && f && f->n_kv == 0 && f->kv == NULL, "%s", al_last_error());
    gguf_close(f);
    gb_free(&b);
}

static void test_getters(void) {
    gbuf b = {0};
    build_valid(&b, 0);
    gguf_file *f = NULL;
    CHECK(gguf_parse(b.p, b.n, "get.gguf", &f) == AL_OK);
    if (f == NULL) {
        gb_free(&b);
        return;
    }
    uint32_t u = 1;
    float x = 0;
    bool yes = false;
    gguf_str s;
    CHECK(gguf_get_u32(f, "t.u32", &u) == AL_OK && u == 4000000000u);
    CHECK(gguf_get_u32(f, "t.u8", &u) == AL_OK && u == 200);
    CHECK(gguf_get_u32(f, "t.u16", &u) == AL_OK && u == 60000);
    CHECK(gguf_get_u32(f, "t.i32", &u) == AL_ERR_FORMAT); /* -7 does not fit */
    CHECK(strstr(al_last_error(), "get.gguf") && strstr(al_last_error(), "t.i32"));
    CHECK(gguf_get_u32(f, "t.u64", &u) == AL_ERR_FORMAT); /* 2^40 does not fit */
    CHECK(gguf_get_u32(f, "t.f32", &u) == AL_ERR_FORMAT);
    CHECK(gguf_get_u32(f, "missing", &u) == AL_ERR_FORMAT && u == 0);
    CHECK(strstr(al_last_error(), "missing") != NULL);
    CHECK(gguf_get_u32_or(f, "missing", 77, &u) == AL_OK && u == 77);
    CHECK(gguf_get_u32_or(f, "t.u8", 77, &u) == AL_OK && u == 200);
    CHECK(gguf_get_u32_or(f, "t.general", 5, &u) == AL_OK && u == 5);
    CHECK(gguf_get_u32_or(f, "general.architecture", 5, &u) == AL_ERR_FORMAT);
    CHECK(gguf_get_f32(f, "t.f32", &x) == AL_OK && x == 1.5f);
    CHECK(gguf_get_f32(f, "t.f64", &x) == AL_OK && x == 2.25f);
    CHECK(gguf_get_f32(f, "t.u32", &x) == AL_ERR_FORMAT);
    CHECK(gguf_get_f32_or(f, "missing", 0.25f, &x) == AL_OK && x == 0.25f);
    CHECK(gguf_get_str(f, "general.architecture", &s) == AL_OK && gguf_str_eq(s, "llama"));
    CHECK(gguf_get_str(f, "t.u8", &s) == AL_ERR_FORMAT);
    CHECK(gguf_get_bool_or(f, "t.bool", false, &yes) == AL_OK && yes);
    CHECK(gguf_get_bool_or(f, "missing", true, &yes) == AL_OK && yes);
    CHECK(gguf_get_bool_or(f, "t.u8", false, &yes) == AL_ERR_FORMAT);
    CHECK(gguf_get_u32(NULL, "t.u8", &u) == AL_ERR_ARG);
    CHECK(gguf_get_u32(f, "t.u8", NULL) == AL_ERR_ARG);
    gguf_close(f);
    gb_free(&b);
}

static void test_helpers(void) {
    CHECK(strcmp(gguf_vtype_name(GGUF_VT_U32), "u32") == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_VT_STRING), "string") == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_VT_F64), "f64") == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_VT_COUNT), "unknown") == 0);
    CHECK(strcmp(gguf_vtype_name(UINT32_MAX), "unknown") == 0);
    gguf_str s = {5, "hello world"};
    char buf[8];
    CHECK(strcmp(gguf_str_copy(s, buf, sizeof buf), "hello") == 0);
    CHECK(strcmp(gguf_str_copy(s, buf, 3), "he") == 0);
    CHECK(strcmp(gguf_str_copy(s, buf, 1), "") == 0);
    CHECK(gguf_str_eq(s, "hello") && !gguf_str_eq(s, "hell") && !gguf_str_eq(s, "hello!"));
    CHECK(!gguf_str_eq(s, NULL));
    CHECK(gguf_str_eq((gguf_str){0, NULL}, ""));
    gguf_close(NULL); /* no-op */
    CHECK(gguf_find_key(NULL, "x") == NULL && gguf_find_tensor(NULL, "x") == NULL);
    gguf_file *f = (gguf_file *)1;
    CHECK(gguf_parse(NULL, 10, "x", &f) == AL_ERR_ARG && f == NULL);
    CHECK(gguf_parse("GGUF", 4, "x", NULL) == AL_ERR_ARG);
}

/* ---- malformed files ---------------------------------------------------------------------- */

/* One pair with key "k" of type vt; the case appends the value. */
static void one_kv(gbuf *b, uint32_t vt) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "k", vt);
}

/* One u8 pair with a key of raw bytes, and 8 trailing bytes so that short keys are not
 * already rejected by the count check. */
static void raw_key(gbuf *b, const char *key, size_t n) {
    gb_header(b, 3, 0, 1);
    gb_strn(b, key, n);
    gb_u32(b, GGUF_VT_U8);
    gb_u8(b, 1);
    gb_u64(b, 0);
}

/* One tensor, padding to 32 and data_bytes of data. */
static void one_tensor(gbuf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}

static void one_alignment(gbuf *b, uint32_t vt, uint64_t v) {
    gb_header(b, 3, 0, 1);
    gb_key(b, "general.alignment", vt);
    if (vt == GGUF_VT_STRING)
        gb_str(b, "32");
    else
        gb_le(b, v, vt == GGUF_VT_U64 ? 8 : 4);
}

static void bad_magic(gbuf *b) {
    build_valid(b, 0);
    b->p[3] = 'X';
}
static void bad_short_magic(gbuf *b) {
    gb_put(b, "GGU", 3);
}
static void bad_empty(gbuf *b) {
    (void)b;
}
static void bad_short_header(gbuf *b) {
    gb_header(b, 3, 0, 0);
    b->n = 20;
}
static void bad_version_1(gbuf *b) {
    gb_header(b, 1, 0, 0);
}
static void bad_version_99(gbuf *b) {
    gb_header(b, 99, 0, 0);
}
static void bad_version_0(gbuf *b) {
    gb_header(b, 0, 0, 0);
}
static void bad_big_endian(gbuf *b) {
    gb_header(b, 0x03000000u, 0, 0);
}
static void bad_huge_n_tensors(gbuf *b) {
    gb_header(b, 3, UINT64_MAX, 0), gb_zeros(b, 64);
}
static void bad_huge_n_kv(gbuf *b) {
    gb_header(b, 3, 0, UINT64_C(1) << 62), gb_zeros(b, 64);
}
static void bad_n_kv_one_too_many(gbuf *b) {
    gb_header(b, 3, 0, 3);
    gb_kv_u32(b, "a", 1), gb_kv_u32(b, "b", 2);
    gb_zeros(b, 7); /* a third pair needs at least 14 bytes */
}
static void bad_n_tensors_too_many(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 2, 0);
    gb_tensor(b, "w", 1, ne, AL_TYPE_F32, 0);
    gb_pad(b, 32), gb_zeros(b, 16);
}
static void bad_key_len_huge(gbuf *b) {
    gb_header(b, 3, 0, 1), gb_u64(b, UINT64_MAX), gb_zeros(b, 32);
}
static void bad_key_len_past_end(gbuf *b) {
    gb_header(b, 3, 0, 1), gb_u64(b, 21), gb_zeros(b, 20);
}
static void bad_str_len_huge(gbuf *b) {
    one_kv(b, GGUF_VT_STRING), gb_u64(b, UINT64_MAX - 3);
}
static void bad_arr_len_huge(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_U32), gb_u64(b, UINT64_C(1) << 62);
}
static void bad_arr_len_max(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_U64), gb_u64(b, UINT64_MAX), gb_zeros(b, 16);
}
static void bad_arr_len_past_end(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_U16), gb_u64(b, 9), gb_zeros(b, 17);
}
static void bad_str_arr_len_huge(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_STRING), gb_u64(b, UINT64_C(1) << 61);
    gb_zeros(b, 64);
}
static void bad_str_arr_elem_len(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_STRING), gb_u64(b, 3);
    gb_str(b, "ok"), gb_u64(b, 1000), gb_zeros(b, 40);
}
static void bad_vtype_13(gbuf *b) {
    one_kv(b, GGUF_VT_COUNT), gb_u64(b, 0);
}
static void bad_vtype_max(gbuf *b) {
    one_kv(b, UINT32_MAX), gb_u64(b, 0);
}
static void bad_arr_elem_type(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, 13), gb_u64(b, 1), gb_u32(b, 0);
}
static void bad_nested_array(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_ARRAY), gb_u64(b, 1);
    gb_u32(b, GGUF_VT_U8), gb_u64(b, 1), gb_u8(b, 0);
}
static void bad_bool_2(gbuf *b) {
    one_kv(b, GGUF_VT_BOOL), gb_u8(b, 2);
}
static void bad_bool_arr(gbuf *b) {
    one_kv(b, GGUF_VT_ARRAY), gb_u32(b, GGUF_VT_BOOL), gb_u64(b, 2), gb_u8(b, 1), gb_u8(b, 255);
}
static void bad_value_truncated(gbuf *b) {
    one_kv(b, GGUF_VT_U64), gb_zeros(b, 3);
}
static void bad_key_empty(gbuf *b) {
    raw_key(b, "", 0);
}
static void bad_key_lone_cont(gbuf *b) {
    raw_key(b, "ab\x80", 3);
}
static void bad_key_overlong2(gbuf *b) {
    raw_key(b, "a\xc0\xaf", 3);
}
static void bad_key_overlong3(gbuf *b) {
    raw_key(b, "\xe0\x80\xaf", 3);
}
static void bad_key_overlong4(gbuf *b) {
    raw_key(b, "\xf0\x80\x80\xaf", 4);
}
static void bad_key_surrogate(gbuf *b) {
    raw_key(b, "x\xed\xa0\x80", 4);
}
static void bad_key_above_max(gbuf *b) {
    raw_key(b, "\xf4\x90\x80\x80", 4);
}
static void bad_key_f5(gbuf *b) {
    raw_key(b, "a\xf5\x80\x80\x80", 5);
}
static void bad_key_ff(gbuf *b) {
    raw_key(b, "\xff", 1);
}
static void bad_key_truncated(gbuf *b) {
    raw_key(b, "euro\xe2\x82", 6);
}
static void bad_key_cut_by_ascii(gbuf *b) {
    raw_key(b,
            "\xf0\x9f\x98"
            "A",
            4);
}
static void bad_key_nul(gbuf *b) {
    raw_key(b, "a\0b", 3);
}
static void bad_dup_keys(gbuf *b) {
    gb_header(b, 3, 0, 3);
    gb_kv_u32(b, "general.x", 1), gb_kv_u32(b, "general.y", 1), gb_kv_str(b, "general.x", "s");
}
static void bad_align_0(gbuf *b) {
    one_alignment(b, GGUF_VT_U32, 0);
}
static void bad_align_3(gbuf *b) {
    one_alignment(b, GGUF_VT_U32, 3);
}
static void bad_align_48(gbuf *b) {
    one_alignment(b, GGUF_VT_U64, 48);
}
static void bad_align_string(gbuf *b) {
    one_alignment(b, GGUF_VT_STRING, 0);
}
static void bad_align_i32(gbuf *b) {
    one_alignment(b, GGUF_VT_I32, 32);
}
static void bad_align_f32(gbuf *b) {
    one_alignment(b, GGUF_VT_F32, 0x42000000u);
}

static void bad_n_dims_0(gbuf *b) {
    one_tensor(b, 0, NULL, AL_TYPE_F32, 0, 64);
}
static void bad_n_dims_5(gbuf *b) {
    uint64_t ne[] = {1, 1, 1, 1, 1};
    one_tensor(b, 5, ne, AL_TYPE_F32, 0, 64);
}
static void bad_dim_0(gbuf *b) {
    uint64_t ne[] = {4, 0};
    one_tensor(b, 2, ne, AL_TYPE_F32, 0, 64);
}
static void bad_dim_negative(gbuf *b) {
    uint64_t ne[] = {4, 1, (uint64_t)INT64_MAX + 1};
    one_tensor(b, 3, ne, AL_TYPE_F32, 0, 64);
}
static void bad_type_99(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, 99, 0, 64);
}
static void bad_type_1000(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, 1000, 0, 64);
}
static void bad_type_4(gbuf *b) { /* ggml's removed Q4_2 */
    uint64_t ne[] = {32};
    one_tensor(b, 1, ne, 4, 0, 64);
}
static void bad_data_past_end(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, AL_TYPE_F32, 32, 16);
}
static void bad_data_one_short(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, AL_TYPE_F32, 0, 15);
}
static void bad_offset_overflow(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, AL_TYPE_F32, UINT64_MAX & ~UINT64_C(31), 16);
}
static void bad_no_data(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", 1, ne, AL_TYPE_F32, 0);
}
static void bad_overlap(gbuf *b) {
    uint64_t ne_a[] = {16}, ne_b[] = {8};
    gb_header(b, 3, 2, 0);
    gb_tensor(b, "a", 1, ne_a, AL_TYPE_F32, 0);
    gb_tensor(b, "b", 1, ne_b, AL_TYPE_F32, 32);
    gb_pad(b, 32), gb_zeros(b, 64);
}
static void bad_same_offset(gbuf *b) {
    uint64_t ne[] = {8};
    gb_header(b, 3, 3, 0);
    gb_tensor(b, "a", 1, ne, AL_TYPE_F32, 64);
    gb_tensor(b, "b", 1, ne, AL_TYPE_F32, 0);
    gb_tensor(b, "c", 1, ne, AL_TYPE_F32, 64);
    gb_pad(b, 32), gb_zeros(b, 96);
}
static void bad_misaligned(gbuf *b) {
    uint64_t ne[] = {4};
    one_tensor(b, 1, ne, AL_TYPE_F32, 16, 64);
}
static void bad_misaligned_64(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 1);
    gb_kv_u32(b, "general.alignment", 64);
    gb_tensor(b, "w", 1, ne, AL_TYPE_F32, 32);
    gb_pad(b, 64), gb_zeros(b, 64);
}
static void bad_bytes_overflow(gbuf *b) {
    uint64_t ne[] = {UINT64_C(1) << 62};
    one_tensor(b, 1, ne, AL_TYPE_F32, 0, 64);
}
static void bad_q8_bytes_overflow(gbuf *b) {
    /* 31 * 2^59 elements fit in 64 bits; their 31 * 2^54 blocks of 34 bytes do not */
    uint64_t ne[] = {32 * 31, UINT64_C(1) << 54};
    one_tensor(b, 2, ne, AL_TYPE_Q8_0, 0, 64);
}
static void bad_elem_overflow(gbuf *b) {
    uint64_t ne[] = {UINT64_C(1) << 32, UINT64_C(1) << 32, 2};
    one_tensor(b, 3, ne, AL_TYPE_F32, 0, 64);
}
static void bad_block_multiple(gbuf *b) {
    uint64_t ne[] = {33, 1};
    one_tensor(b, 2, ne, AL_TYPE_Q4_0, 0, 64);
}
static void bad_block_multiple_k(gbuf *b) {
    uint64_t ne[] = {128};
    one_tensor(b, 1, ne, AL_TYPE_Q4_K, 0, 256);
}
static void bad_dup_tensors(gbuf *b) {
    uint64_t ne[] = {8};
    gb_header(b, 3, 3, 0);
    gb_tensor(b, "blk.0.w", 1, ne, AL_TYPE_F32, 0);
    gb_tensor(b, "blk.1.w", 1, ne, AL_TYPE_F32, 32);
    gb_tensor(b, "blk.0.w", 1, ne, AL_TYPE_F32, 64);
    gb_pad(b, 32), gb_zeros(b, 96);
}
static void bad_name_utf8(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 0);
    gb_tensor_raw(b, "blk\x80", 4, 1, ne, AL_TYPE_F32, 0);
    gb_pad(b, 32), gb_zeros(b, 16);
}
static void bad_name_overlong(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 0);
    gb_tensor_raw(b, "\xc1\xbf", 2, 1, ne, AL_TYPE_F32, 0);
    gb_pad(b, 32), gb_zeros(b, 16);
}
static void bad_name_empty(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 0);
    gb_tensor_raw(b, "", 0, 1, ne, AL_TYPE_F32, 0);
    gb_pad(b, 32), gb_zeros(b, 16);
}
static void bad_name_len_huge(gbuf *b) {
    gb_header(b, 3, 1, 0), gb_u64(b, UINT64_C(1) << 63), gb_zeros(b, 64);
}
static void bad_info_truncated(gbuf *b) {
    uint64_t ne[] = {4};
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "weight.name.long", 1, ne, AL_TYPE_F32, 0);
    b->n -= 8; /* drop the offset */
}

typedef struct bad_case {
    const char *name;
    void (*build)(gbuf *b);
    al_status status;   /* expected status; AL_OK means any failure */
    const char *expect; /* a part of the message */
} bad_case;

#define FMT AL_ERR_FORMAT
#define UNS AL_ERR_UNSUPPORTED
static const bad_case k_bad_cases[] = {
    {"bad magic", bad_magic, FMT, "magic"},
    {"3-byte file", bad_short_magic, FMT, "file is 3 bytes, shorter than"},
    {"empty image", bad_empty, FMT, "empty"},
    {"header cut at 20 bytes", bad_short_header, FMT, "shorter than the 24-byte"},
    {"version 1", bad_version_1, UNS, "version 1 is not supported"},
    {"version 99", bad_version_99, UNS, "version 99"},
    {"version 0", bad_version_0, UNS, "version 0"},
    {"big-endian file", bad_big_endian, UNS, "big-endian"},
    {"huge tensor count", bad_huge_n_tensors, FMT, "n_tensors = 18446744073709551615"},
    {"huge kv count", bad_huge_n_kv, FMT, "cannot fit"},
    {"kv count one too many", bad_n_kv_one_too_many, FMT, "cannot fit"},
    {"tensor count one too many", bad_n_tensors_too_many, FMT, "cannot fit"},
    {"huge key length", bad_key_len_huge, FMT, "string length 18446744073709551615 exceeds"},
    {"key length one past the end", bad_key_len_past_end, FMT, "string length 21 exceeds the 20"},
    {"huge string length", bad_str_len_huge, FMT, "kv 0 'k': string value: string length"},
    {"huge array length (u32)", bad_arr_len_huge, FMT, "array of 4611686018427387904 u32"},
    {"array length UINT64_MAX (u64)", bad_arr_len_max, FMT, "exceeds the 16 bytes left"},
    {"array length past the end", bad_arr_len_past_end, FMT, "array of 9 u16"},
    {"huge string array length", bad_str_arr_len_huge, FMT, "strings cannot fit"},
    {"bad string length in string array", bad_str_arr_elem_len, FMT,
     "element 1: string length 1000"},
    {"unknown value type 13", bad_vtype_13, FMT, "value type 13 is unknown"},
    {"unknown value type 2^32-1", bad_vtype_max, FMT, "value type 4294967295 is unknown"},
    {"unknown array element type", bad_arr_elem_type, FMT, "array element type 13"},
    {"nested array", bad_nested_array, UNS, "arrays of arrays"},
    {"bool value 2", bad_bool_2, FMT, "bool value is 2"},
    {"bool array element 255", bad_bool_arr, FMT, "bool element 1 is 255"},
    {"u64 value cut short", bad_value_truncated, FMT, "u64: needs 8 bytes"},
    {"empty key", bad_key_empty, FMT, "key is empty"},
    {"key: lone continuation byte", bad_key_lone_cont, FMT, "UTF-8: byte 2 of 3"},
    {"key: overlong 2-byte", bad_key_overlong2, FMT, "UTF-8: byte 1"},
    {"key: overlong 3-byte", bad_key_overlong3, FMT, "UTF-8: byte 0"},
    {"key: overlong 4-byte", bad_key_overlong4, FMT, "UTF-8: byte 0"},
    {"key: surrogate", bad_key_surrogate, FMT, "UTF-8: byte 1"},
    {"key: above U+10FFFF", bad_key_above_max, FMT, "UTF-8: byte 0"},
    {"key: F5 lead byte", bad_key_f5, FMT, "UTF-8: byte 1"},
    {"key: FF byte", bad_key_ff, FMT, "UTF-8"},
    {"key: truncated sequence", bad_key_truncated, FMT, "UTF-8: byte 4 of 6"},
    {"key: sequence cut by ASCII", bad_key_cut_by_ascii, FMT, "UTF-8: byte 0"},
    {"key: NUL byte", bad_key_nul, FMT, "NUL"},
    {"duplicate keys", bad_dup_keys, FMT, "kv 2 'general.x': duplicate key (same as kv 0)"},
    {"alignment 0", bad_align_0, FMT, "alignment 0 is not a power of two"},
    {"alignment 3", bad_align_3, FMT, "alignment 3 is not a power of two"},
    {"alignment 48 (u64)", bad_align_48, FMT, "alignment 48"},
    {"alignment of type string", bad_align_string, FMT, "has type string"},
    {"alignment of type i32", bad_align_i32, FMT, "has type i32"},
    {"alignment of type f32", bad_align_f32, FMT, "has type f32"},
    {"n_dims 0", bad_n_dims_0, FMT, "tensor 0 'w': n_dims is 0"},
    {"n_dims 5", bad_n_dims_5, FMT, "n_dims is 5"},
    {"dimension 0", bad_dim_0, FMT, "tensor 0 'w': dimension 1 is 0"},
    {"dimension > INT64_MAX", bad_dim_negative, FMT, "dimension 2 is 9223372036854775808"},
    {"tensor type 99", bad_type_99, UNS, "tensor type 99 is unknown"},
    {"tensor type 1000", bad_type_1000, UNS, "tensor type 1000 is unknown"},
    {"tensor type 4 (removed)", bad_type_4, UNS, "tensor type 4 is unknown"},
    {"tensor data past end of file", bad_data_past_end, FMT, "past the end of the file"},
    {"tensor data one byte short", bad_data_one_short, FMT, "past the end of the file"},
    {"tensor offset near 2^64", bad_offset_overflow, FMT, "past the end of the file"},
    {"tensors but no data section", bad_no_data, FMT, "past the end of the file"},
    {"overlapping tensors", bad_overlap, FMT, "tensor 1 'b': data at [32, 64) overlaps tensor 0"},
    {"tensors at the same offset", bad_same_offset, FMT, "overlaps tensor 0"},
    {"misaligned offset", bad_misaligned, FMT, "offset 16 is not a multiple of the alignment 32"},
    {"misaligned offset (alignment 64)", bad_misaligned_64, FMT, "alignment 64"},
    {"F32 bytes overflow 64 bits", bad_bytes_overflow, FMT, "overflows 64 bits"},
    {"Q8_0 bytes overflow 64 bits", bad_q8_bytes_overflow, FMT, "overflows 64 bits"},
    {"element count overflows 64 bits", bad_elem_overflow, FMT, "element count"},
    {"ne[0] not a multiple of 32", bad_block_multiple, FMT, "block size 32 of Q4_0"},
    {"ne[0] not a multiple of 256", bad_block_multiple_k, FMT, "block size 256 of Q4_K"},
    {"duplicate tensor names", bad_dup_tensors, FMT, "duplicate tensor name (same as tensor 0)"},
    {"tensor name: invalid UTF-8", bad_name_utf8, FMT, "name is not valid UTF-8"},
    {"tensor name: overlong", bad_name_overlong, FMT, "name is not valid UTF-8"},
    {"empty tensor name", bad_name_empty, FMT, "name is empty"},
    {"huge tensor name length", bad_name_len_huge, FMT, "name: string length"},
    {"tensor info cut before offset", bad_info_truncated, FMT, "offset: needs 8 bytes"},
};

/* Runs one malformed image; returns whether it was rejected as expected. */
static int run_bad(const char *name, const gbuf *b, al_status want, const char *expect,
                   int verbose) {
    al_error(AL_OK, "%s", ""); /* so a stale message cannot pass for a new one */
    gguf_file *f = (gguf_file *)1;
    al_status st = parse_copy(b, "bad.gguf", &f);
    const char *msg = al_last_error();
    int ok = st != AL_OK && f == NULL && msg[0] != '\0' && strstr(msg, "bad.gguf") != NULL;
    if (want != AL_OK && st != want) ok = 0;
    if (expect != NULL && strstr(msg, expect) == NULL) ok = 0;
    CHECK_MSG(ok, "%s: status %s, message \"%s\", expected %s \"%s\"", name, al_status_str(st), msg,
              al_status_str(want), expect ? expect : "");
    if (verbose) printf("  %-36s %s\n", name, msg);
    return ok;
}

static void test_malformed(void) {
    int n_cases = (int)(sizeof k_bad_cases / sizeof k_bad_cases[0]), n_rejected = 0;
    for (int i = 0; i < n_cases; i++) {
        const bad_case *c = &k_bad_cases[i];
        gbuf b = {0};
        c->build(&b);
        n_rejected += run_bad(c->name, &b, c->status, c->expect, 1);
        gb_free(&b);
    }
    printf("  malformed files: %d named cases, %d rejected as expected\n", n_cases, n_rejected);
    CHECK(n_cases >= 40);
    CHECK(n_rejected == n_cases);
}

/* Every proper prefix of a valid file must be rejected: its last tensor ends at the
 * end of the file, so a cut anywhere leaves something incomplete. */
static void test_truncations(void) {
    gbuf b = {0};
    layout L = build_valid(&b, 0);
    gguf_file *f = NULL;
    CHECK(parse_copy(&b, "full.gguf", &f) == AL_OK);
    size_t full = b.n;
    int n_rejected = 0;
    for (size_t len = 0; len < full; len++) {
        gbuf cut = b;
        cut.n = len;
        char name[48];
        snprintf(name, sizeof name, "cut at %zu", len);
        n_rejected += run_bad(name, &cut, AL_OK, NULL, 0);
    }
    printf("  truncations: %zu (header %zu, kv %zu, tensor infos %zu, padding %zu, data %zu),"
           " %d rejected\n",
           full, L.kv_start, L.info_start - L.kv_start, L.info_end - L.info_start,
           L.data_start - L.info_end, full - L.data_start, n_rejected);
    CHECK(n_rejected == (int)full);
    gb_free(&b);
}

/* ---- allocation failures ---------------------------------------------------------------- */

/* Fails the k-th allocation of a parse for every k: each run must succeed or fail with
 * AL_ERR_NOMEM and free what it had (ASan's leak checker watches). */
static void test_alloc_failures(void) {
    gbuf b = {0};
    build_valid(&b, 64);
    gguf_file *f = NULL;
    al_alloc_fail_after(0);
    CHECK(gguf_parse(b.p, b.n, "oom.gguf", &f) == AL_OK);
    gguf_close(f);
    uint64_t n_alloc = al_alloc_fail_after(0);
    CHECK(n_alloc >= 4);
    int n_nomem = 0, n_ok = 0;
    for (uint64_t k = 1; k <= n_alloc + 1; k++) {
        al_alloc_fail_after(k);
        f = (gguf_file *)1;
        al_status st = gguf_parse(b.p, b.n, "oom.gguf", &f);
        al_alloc_fail_after(0);
        CHECK_MSG(st == AL_OK || st == AL_ERR_NOMEM, "k=%d: %s", (int)k, al_last_error());
        if (st == AL_ERR_NOMEM) {
            n_nomem++;
            CHECK(f == NULL && al_last_error()[0] != '\0');
        } else if (st == AL_OK) {
            n_ok++;
            gguf_close(f);
        }
    }
    printf("  %d allocations per parse: %d runs out of memory, %d succeeded\n", (int)n_alloc,
           n_nomem, n_ok);
    CHECK(n_nomem == (int)n_alloc && n_ok == 1);
    gb_free(&b);
}

/* ---- files on disk ------------------------------------------------------------------------ */

/* Writes n bytes to a new temporary file and returns its path in path[64]. */
static int write_temp(const void *p, size_t n, char path[64]) {
    snprintf(path, 64, "/tmp/test_gguf_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    int ok = n == 0 || write(fd, p, n) == (ssize_t)n;
    close(fd);
    return ok ? 0 : -1;
}

static void test_open_errors(void) {
    gguf_file *f = (gguf_file *)1;
    CHECK(gguf_open("/nonexistent/dir/model.gguf", &f) == AL_ERR_IO && f == NULL);
    CHECK(strstr(al_last_error(), "/nonexistent/dir/model.gguf") != NULL);
    printf("  %s\n", al_last_error());
    f = (gguf_file *)1;
    CHECK(gguf_open("/tmp", &f) == AL_ERR_IO && f == NULL);
    CHECK(strstr(al_last_error(), "directory") != NULL);
    printf("  %s\n", al_last_error());
    f = (gguf_file *)1;
    CHECK(gguf_open("/dev/null", &f) == AL_ERR_IO && f == NULL);
    printf("  %s\n", al_last_error());
    char path[64];
    if (write_temp("", 0, path) != 0) {
        CHECK_MSG(0, "cannot create a temporary file: %s", strerror(errno));
        return;
    }
    f = (gguf_file *)1;
    CHECK(gguf_open(path, &f) == AL_ERR_FORMAT && f == NULL);
    CHECK(strstr(al_last_error(), "empty") != NULL);
    printf("  %s\n", al_last_error());
    unlink(path);
    CHECK(gguf_open(NULL, &f) == AL_ERR_ARG && f == NULL);
}

/* gguf_open maps the file; the same checks hold as for an image in memory, and a
 * malformed file on disk is unmapped on failure. */
static void test_open_valid(void) {
    gbuf b = {0};
    build_valid(&b, 0);
    char path[64];
    if (write_temp(b.p, b.n, path) != 0) {
        CHECK_MSG(0, "cannot create a temporary file: %s", strerror(errno));
        gb_free(&b);
        return;
    }
    gguf_file *f = NULL;
    al_status st = gguf_open(path, &f);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (f) {
        CHECK(f->mapped && f->size == b.n && strcmp(f->path, path) == 0);
        CHECK(memcmp(f->base, b.p, b.n) == 0);
        check_valid_kvs(f);
        check_valid_tensors(f, f->base);
    }
    gguf_close(f);
    for (uint64_t k = 1; k <= 3; k++) { /* out of memory after the file is mapped */
        al_alloc_fail_after(k);
        st = gguf_open(path, &f);
        al_alloc_fail_after(0);
        CHECK(st == AL_ERR_NOMEM && f == NULL);
    }
    unlink(path);
    b.n -= 1; /* the last tensor now ends past the end of the file */
    if (write_temp(b.p, b.n, path) == 0) {
        CHECK(gguf_open(path, &f) == AL_ERR_FORMAT && f == NULL);
        CHECK(strstr(al_last_error(), path) != NULL);
        unlink(path);
    }
    gb_free(&b);
}

/* Opens every .gguf file in dir; returns the number opened, adds failures to *n_fail. */
static int open_all_in(const char *dir, int *n_fail) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file *f = NULL;
        al_status st = gguf_open(path, &f);
        CHECK_MSG(st == AL_OK, "%s", al_last_error());
        if (st != AL_OK) {
            (*n_fail)++;
            continue;
        }
        const gguf_kv *tok = gguf_find_key(f, "tokenizer.ggml.tokens");
        CHECK_MSG(tok && tok->type == GGUF_VT_ARRAY && tok->v.arr.type == GGUF_VT_STRING &&
                      tok->v.arr.n > 0,
                  "%s: no token list", path);
        n++;
        gguf_close(f);
    }
    closedir(d);
    return n;
}

static void test_shared_files(void) {
    const char *shared = test_shared_dir();
    DIR *d = opendir(shared);
    if (d == NULL) {
        TEST_SKIP("%s: %s (set SHARED to the shared data directory)", shared, strerror(errno));
        return;
    }
    closedir(d);
    char path[1024];
    int n_fail = 0;
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", shared);
    gguf_file *f = NULL;
    al_status st = gguf_open(path, &f);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (f) {
        const gguf_kv *tok = gguf_find_key(f, "tokenizer.ggml.tokens");
        CHECK(tok && tok->v.arr.n == 32000);
        gguf_str arch;
        CHECK(gguf_get_str(f, "general.architecture", &arch) == AL_OK &&
              gguf_str_eq(arch, "llama"));
        CHECK(f->n_tensors > 0);
    }
    gguf_close(f);
    snprintf(path, sizeof path, "%s/models/ref", shared);
    int n_ref = open_all_in(path, &n_fail);
    snprintf(path, sizeof path, "%s/vocab", shared);
    int n_vocab = open_all_in(path, &n_fail);
    printf("  opened %d reference models and %d vocabularies from %s, %d failed\n", n_ref, n_vocab,
           shared, n_fail);
    CHECK(n_ref > 0 && n_vocab > 0 && n_fail == 0);
}

/* The public view of a header (anyllm.h al_gguf), against the parser's own structs on
 * a real file: every key, type and tensor, known values as text, a string cut short,
 * and the argument errors. */
static void test_public_view(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", test_shared_dir());
    gguf_file *f = NULL;
    al_gguf *g = NULL;
    if (gguf_open(path, &f) != AL_OK || al_gguf_open(path, &g) != AL_OK) {
        TEST_SKIP("%s: %s", path, al_last_error());
        gguf_close(f);
        return;
    }
    al_gguf_info gi;
    al_gguf_get_info(g, &gi);
    CHECK(gi.version == f->version && gi.file_size == f->size && gi.alignment == f->alignment &&
          gi.n_kv == f->n_kv && gi.n_tensors == f->n_tensors);
    char key[256], want[256], value[64];
    const char *type;
    bool cut;
    int n_bad = 0;
    for (uint64_t i = 0; i < gi.n_kv; i++) {
        CHECK(al_gguf_kv(g, i, key, sizeof key, &type, value, sizeof value, &cut) == AL_OK);
        gguf_str_copy(f->kv[i].key, want, sizeof want);
        n_bad += strcmp(key, want) != 0 || strcmp(type, gguf_vtype_name(f->kv[i].type)) != 0;
        if (!strcmp(key, "general.architecture"))
            CHECK(!strcmp(value, "llama") && !strcmp(type, "string") && !cut);
        if (!strcmp(key, "tokenizer.ggml.tokens"))
            CHECK_MSG(!strcmp(value, "[string x 32000]"), "tokens: %s", value);
        if (!strcmp(key, "llama.block_count"))
            CHECK_MSG(f->kv[i].v.u > 0 && atoi(value) == (int)f->kv[i].v.u, "%s", value);
    }
    CHECK_MSG(n_bad == 0, "%d keys or types differ from the parser's", n_bad);
    char tiny[4]; /* "llama" cut to 3 bytes */
    for (uint64_t i = 0; i < gi.n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, "general.architecture"))
            CHECK(al_gguf_kv(g, i, key, sizeof key, &type, tiny, sizeof tiny, &cut) == AL_OK &&
                  !strcmp(tiny, "lla") && cut);
    uint64_t bytes = 0, want_bytes = 0;
    for (uint64_t i = 0; i < gi.n_tensors; i++) {
        al_gguf_tensor t;
        CHECK(al_gguf_tensor_info(g, i, key, sizeof key, &t) == AL_OK);
        const gguf_tensor *ft = &f->tensors[i];
        gguf_str_copy(ft->name, want, sizeof want);
        CHECK(!strcmp(key, want) && t.n_dims == (int)ft->n_dims && t.ne[0] == ft->ne[0] &&
              t.ne[3] == ft->ne[3] && t.n_elem == ft->n_elem &&
              !strcmp(t.type, quant_type_name(ft->type)));
        bytes += t.n_bytes, want_bytes += ft->n_bytes;
    }
    CHECK(bytes == want_bytes && bytes > 0);
    al_gguf_tensor t;
    CHECK(al_gguf_kv(g, gi.n_kv, key, sizeof key, &type, value, sizeof value, &cut) == AL_ERR_ARG);
    CHECK(al_gguf_kv(g, 0, NULL, 8, &type, value, sizeof value, &cut) == AL_ERR_ARG);
    CHECK(al_gguf_tensor_info(g, gi.n_tensors, key, sizeof key, &t) == AL_ERR_ARG);
    CHECK(al_gguf_tensor_info(g, 0, key, 0, &t) == AL_ERR_ARG);
    al_gguf_close(g);
    gguf_close(f);
    al_gguf_close(NULL);
    g = (al_gguf *)&g; /* anything: a failed open sets it to NULL */
    CHECK(al_gguf_open("/nonexistent/x.gguf", &g) == AL_ERR_IO && g == NULL);
    al_alloc_fail_after(1);
    CHECK(al_gguf_open(path, &g) == AL_ERR_NOMEM && g == NULL);
    al_alloc_fail_after(0);
    printf("  al_gguf: %" PRIu64 " keys and %" PRIu64 " tensors as the parser reads them\n",
           gi.n_kv, gi.n_tensors);
}

int main(void) {
    TEST_RUN(test_helpers);
    TEST_RUN(test_public_view);
    TEST_RUN(test_valid_file);
    TEST_RUN(test_valid_alignment_64);
    TEST_RUN(test_vocab_only);
    TEST_RUN(test_getters);
    TEST_RUN(test_malformed);
    TEST_RUN(test_truncations);
    TEST_RUN(test_alloc_failures);
    TEST_RUN(test_open_errors);
    TEST_RUN(test_open_valid);
    TEST_RUN(test_shared_files);
    return test_finish();
}
