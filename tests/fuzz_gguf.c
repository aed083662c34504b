/* fuzz_gguf.c: libFuzzer target for the GGUF reader (make fuzz).
 *
 * Each input is parsed as a GGUF image. When the parse succeeds, the target walks all
 * that gguf.h promises and reads the first and last byte behind every pointer it
 * exposes (keys, string values, string-array index, array data, tensor names and
 * data), so ASan reports any pointer the parser let outside the image. It also checks
 * the header's invariants (pointers inside the image, shapes 1..4 dims of >= 1,
 * aligned offsets, unique names found by the lookups) and traps if one fails.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Keeps the reads from being optimised away. */
static volatile uint64_t g_sink;

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) __builtin_trap();                                                             \
    } while (0)

/* Reads the ends of [p, p + n) after checking the range lies inside the image. */
static void touch(const gguf_file *f, const void *p, uint64_t n) {
    if (n == 0) return;
    const uint8_t *b = p;
    REQUIRE(b >= f->base && n <= f->size && (uint64_t)(b - f->base) <= f->size - n);
    g_sink += b[0] + b[n - 1];
}

static uint64_t elem_bytes(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_U8:
    case GGUF_VT_I8:
    case GGUF_VT_BOOL:
        return 1;
    case GGUF_VT_U16:
    case GGUF_VT_I16:
        return 2;
    case GGUF_VT_U32:
    case GGUF_VT_I32:
    case GGUF_VT_F32:
        return 4;
    case GGUF_VT_U64:
    case GGUF_VT_I64:
    case GGUF_VT_F64:
        return 8;
    default:
        return 0;
    }
}

static void walk_kv(const gguf_file *f, const gguf_kv *kv) {
    char key[256];
    touch(f, kv->key.s, kv->key.n);
    REQUIRE(kv->key.n > 0 && kv->type < GGUF_VT_COUNT);
    /* keys are unique, so the lookup by a whole key returns this very pair */
    if (kv->key.n < sizeof key)
        REQUIRE(gguf_find_key(f, gguf_str_copy(kv->key, key, sizeof key)) == kv);
    if (kv->type == GGUF_VT_STRING) {
        touch(f, kv->v.str.s, kv->v.str.n);
    } else if (kv->type == GGUF_VT_ARRAY) {
        REQUIRE(kv->v.arr.type < GGUF_VT_COUNT && kv->v.arr.type != GGUF_VT_ARRAY);
        if (kv->v.arr.type == GGUF_VT_STRING) {
            REQUIRE(kv->v.arr.n == 0 || kv->v.arr.strs != NULL);
            for (uint64_t j = 0; j < kv->v.arr.n; j++)
                touch(f, kv->v.arr.strs[j].s, kv->v.arr.strs[j].n);
        } else {
            touch(f, kv->v.arr.data, kv->v.arr.n * elem_bytes(kv->v.arr.type));
        }
    } else if (kv->type == GGUF_VT_BOOL) {
        REQUIRE(kv->v.u <= 1);
    }
}

static void walk_tensor(const gguf_file *f, const gguf_tensor *t) {
    char name[256];
    touch(f, t->name.s, t->name.n);
    if (t->name.n < sizeof name)
        REQUIRE(gguf_find_tensor(f, gguf_str_copy(t->name, name, sizeof name)) == t);
    REQUIRE(t->n_dims >= 1 && t->n_dims <= 4);
    for (int d = 0; d < 4; d++)
        REQUIRE(t->ne[d] >= 1);
    REQUIRE(t->n_bytes > 0 && t->offset % f->alignment == 0);
    REQUIRE((const uint8_t *)t->data == f->base + f->data_offset + t->offset);
    touch(f, t->data, t->n_bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    if (gguf_parse(data, size, "fuzz.gguf", &f) != AL_OK) {
        REQUIRE(f == NULL);
        return 0;
    }
    REQUIRE(f->alignment > 0 && (f->alignment & (f->alignment - 1)) == 0);
    for (uint64_t i = 0; i < f->n_kv; i++)
        walk_kv(f, &f->kv[i]);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        walk_tensor(f, &f->tensors[i]);

    /* the getters on keys a model loader asks for, whatever their types here */
    uint32_t u;
    float x;
    bool b;
    gguf_str s;
    gguf_get_u32(f, "general.alignment", &u);
    gguf_get_u32_or(f, "llama.context_length", 0, &u);
    gguf_get_f32_or(f, "llama.rope.freq_base", 1.0f, &x);
    gguf_get_bool_or(f, "tokenizer.ggml.add_bos_token", false, &b);
    if (gguf_get_str(f, "general.architecture", &s) == AL_OK) touch(f, s.s, s.n);
    gguf_close(f);
    return 0;
}
