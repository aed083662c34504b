/* tokenizer.c: the vocabulary (loading and validating tokenizer.ggml.*), its lookup
 * tables, special tokens, the al_tokenize() driver, token decoding and the streaming
 * detokenizer. The merge algorithms live in spm.c and bpe.c, the special-token matcher
 * in special.c, and the tables they all read in vocab.c, below them.
 *
 * Tokenization follows llama.cpp (src/llama-vocab.cpp), whose test vectors are in
 * ../shared/vocab:
 *   1. Special tokens are cut out of the text first, the longest text first, each one
 *      everywhere it occurs. User-defined tokens are always cut out; control and unknown
 *      tokens only when the caller asks for parse_special.
 *   2. Each remaining stretch of text is tokenized on its own. SentencePiece prefixes "▁"
 *      to a stretch at the start of the text or right after a special token (when
 *      add_space_prefix), then merges by score; byte-level BPE pre-tokenizes with the
 *      regexes named by tokenizer.ggml.pre, then merges by rank.
 *   3. add_special puts BOS in front and EOS at the end as the file's flags say.
 *
 * Invariants after loading: token texts are unique and non-empty, every id field is -1
 * or a valid id, every merge has two non-empty parts, and piece[] holds the bytes each
 * token decodes to, so decoding and streaming never allocate per token.
 */
#define TEXT_INTERNAL
#include "text/tokenizer.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "text/grammar.h"
#include "text/special.h"
#include "text/spm.h"
#include "util.h"

/* Sizes past these are refused: they keep every offset in 32 bits and every hash table
 * at most half full with 32-bit masks. Real vocabularies have under a million tokens. */
#define VOCAB_MAX_TOKENS (1 << 26)
#define VOCAB_MAX_POOL UINT32_MAX

int32_t vocab_merge_rank(const al_vocab *v, const char *a, size_t n_a, const char *b, size_t n_b) {
    if (v == NULL || v->is_spm || a == NULL || b == NULL) return -1;
    char *buf = al_malloc(n_a + n_b);
    if (buf == NULL) return -1;
    memcpy(buf, a, n_a);
    memcpy(buf + n_a, b, n_b);
    int32_t r = merge_lookup(v, buf, n_a, n_a + n_b);
    al_free(buf);
    return r;
}

/* ---- loading: the token list, scores and types ---------------------------------------- */

/* The array under key, checked for element type; *kv is NULL if absent and !required. */
static al_status find_array(const gguf_file *f, const char *key, bool required,
                            const gguf_kv **kv) {
    *kv = gguf_find_key(f, key);
    if (*kv == NULL) {
        if (!required) return AL_OK;
        return al_error(AL_ERR_FORMAT, "%s: key '%s' is missing", f->path, key);
    }
    if ((*kv)->type != GGUF_VT_ARRAY)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' has type %s; expected an array", f->path, key,
                        gguf_vtype_name((*kv)->type));
    return AL_OK;
}

static al_status load_tokens(al_vocab *v, const gguf_file *f) {
    const char *key = "tokenizer.ggml.tokens";
    const gguf_kv *kv;
    al_status st = find_array(f, key, true, &kv);
    if (st != AL_OK) return st;
    if (kv->v.arr.type != GGUF_VT_STRING)
        return al_error(AL_ERR_FORMAT, "%s: '%s' holds %s; expected strings", f->path, key,
                        gguf_vtype_name(kv->v.arr.type));
    uint64_t n = kv->v.arr.n;
    if (n == 0 || n > VOCAB_MAX_TOKENS)
        return al_error(AL_ERR_FORMAT, "%s: '%s' has %llu tokens; expected 1 to %d", f->path, key,
                        (unsigned long long)n, VOCAB_MAX_TOKENS);
    v->n_tokens = (int32_t)n;

    /* An empty text cannot be looked up or matched; like llama.cpp, name it by its id. */
    uint64_t pool = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = kv->v.arr.strs[i].n ? kv->v.arr.strs[i].n : 24;
        if (!al_add_u64(pool, len + 1, &pool) || pool > VOCAB_MAX_POOL)
            return al_error(AL_ERR_FORMAT, "%s: '%s' holds more text than supported", f->path, key);
    }
    v->text = al_malloc((size_t)pool);
    v->text_off = al_calloc((size_t)n, sizeof *v->text_off);
    v->text_len = al_calloc((size_t)n, sizeof *v->text_len);
    if (!v->text || !v->text_off || !v->text_len || tok_hash_init(&v->by_text, n) != AL_OK)
        return al_error(AL_ERR_NOMEM, "%s: out of memory for %llu tokens", f->path,
                        (unsigned long long)n);
    uint32_t off = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        gguf_str s = kv->v.arr.strs[i];
        char *dst = v->text + off;
        if (s.n > 0) memcpy(dst, s.s, (size_t)s.n);
        uint32_t len = s.n > 0 ? (uint32_t)s.n : (uint32_t)snprintf(dst, 24, "[EMPTY_%d]", i);
        dst[len] = '\0';
        v->text_off[i] = off;
        v->text_len[i] = len;
        off += len + 1;
        int32_t dup = vocab_insert(v, i);
        if (dup >= 0)
            return al_error(AL_ERR_FORMAT, "%s: '%s': token %d ('%.*s') repeats token %d", f->path,
                            key, i, (int)(len > 64 ? 64 : len), dst, dup);
    }
    return AL_OK;
}

/* Reads element i of an integer or float array whose data may be unaligned. */
static double array_num(const gguf_kv *kv, uint64_t i) {
    const unsigned char *p = kv->v.arr.data;
    switch (kv->v.arr.type) {
    case GGUF_VT_F32: {
        float x;
        memcpy(&x, p + i * 4, 4);
        return x;
    }
    case GGUF_VT_I32: {
        int32_t x;
        memcpy(&x, p + i * 4, 4);
        return x;
    }
    case GGUF_VT_U32: {
        uint32_t x;
        memcpy(&x, p + i * 4, 4);
        return x;
    }
    default:
        return 0;
    }
}

static al_status load_scores_types(al_vocab *v, const gguf_file *f) {
    v->score = al_calloc((size_t)v->n_tokens, sizeof *v->score);
    v->type = al_malloc((size_t)v->n_tokens);
    v->eog = al_calloc((size_t)v->n_tokens, 1);
    if (!v->score || !v->type || !v->eog)
        return al_error(AL_ERR_NOMEM, "%s: out of memory", f->path);
    memset(v->type, TOK_NORMAL, (size_t)v->n_tokens);

    const char *key = "tokenizer.ggml.scores";
    const gguf_kv *kv;
    al_status st = find_array(f, key, false, &kv);
    if (st != AL_OK) return st;
    if (kv != NULL) {
        if (kv->v.arr.type != GGUF_VT_F32 && kv->v.arr.type != GGUF_VT_I32)
            return al_error(AL_ERR_FORMAT, "%s: '%s' holds %s; expected f32", f->path, key,
                            gguf_vtype_name(kv->v.arr.type));
        if (kv->v.arr.n != (uint64_t)v->n_tokens)
            return al_error(AL_ERR_FORMAT, "%s: '%s' has %llu entries for %d tokens", f->path, key,
                            (unsigned long long)kv->v.arr.n, v->n_tokens);
        for (int32_t i = 0; i < v->n_tokens; i++) {
            v->score[i] = (float)array_num(kv, (uint64_t)i);
            if (isnan(v->score[i]))
                return al_error(AL_ERR_FORMAT, "%s: '%s'[%d] is NaN", f->path, key, i);
        }
    }

    key = "tokenizer.ggml.token_type";
    if ((st = find_array(f, key, false, &kv)) != AL_OK) return st;
    if (kv != NULL) {
        if (kv->v.arr.type != GGUF_VT_I32 && kv->v.arr.type != GGUF_VT_U32)
            return al_error(AL_ERR_FORMAT, "%s: '%s' holds %s; expected i32", f->path, key,
                            gguf_vtype_name(kv->v.arr.type));
        if (kv->v.arr.n != (uint64_t)v->n_tokens)
            return al_error(AL_ERR_FORMAT, "%s: '%s' has %llu entries for %d tokens", f->path, key,
                            (unsigned long long)kv->v.arr.n, v->n_tokens);
        for (int32_t i = 0; i < v->n_tokens; i++) {
            double t = array_num(kv, (uint64_t)i);
            if (t < TOK_UNDEFINED || t > TOK_BYTE)
                return al_error(AL_ERR_FORMAT, "%s: '%s'[%d] is %g; expected 0 to 6", f->path, key,
                                i, t);
            v->type[i] = (uint8_t)t;
        }
    }
    return AL_OK;
}

/* ---- loading: special ids, flags, merges ---------------------------------------------- */

/* An id key: absent gives dflt (or -1 if dflt is out of range); a negative signed value
 * means "none"; anything else must be a valid id. */
static al_status read_id(const al_vocab *v, const gguf_file *f, const char *key, int32_t dflt,
                         int32_t *out) {
    *out = dflt < v->n_tokens ? dflt : -1;
    const gguf_kv *kv = gguf_find_key(f, key);
    if (kv == NULL) return AL_OK;
    bool is_signed = kv->type == GGUF_VT_I8 || kv->type == GGUF_VT_I16 || kv->type == GGUF_VT_I32 ||
                     kv->type == GGUF_VT_I64;
    if (is_signed && kv->v.i < 0) {
        *out = -1;
        return AL_OK;
    }
    uint32_t id;
    al_status st = gguf_get_u32(f, key, &id);
    if (st != AL_OK) return st;
    if (id >= (uint32_t)v->n_tokens)
        return al_error(AL_ERR_FORMAT, "%s: key '%s' is %u; the vocabulary has %d tokens", f->path,
                        key, id, v->n_tokens);
    *out = (int32_t)id;
    return AL_OK;
}

static al_status load_special_ids(al_vocab *v, const gguf_file *f, bool add_bos_default) {
    /* SentencePiece files conventionally put <unk>, <s>, </s> at 0, 1, 2. */
    int32_t d_unk = v->is_spm ? 0 : -1, d_bos = v->is_spm ? 1 : -1, d_eos = v->is_spm ? 2 : -1;
    al_status st;
    if ((st = read_id(v, f, "tokenizer.ggml.bos_token_id", d_bos, &v->bos)) ||
        (st = read_id(v, f, "tokenizer.ggml.eos_token_id", d_eos, &v->eos)) ||
        (st = read_id(v, f, "tokenizer.ggml.unknown_token_id", d_unk, &v->unk)) ||
        (st = read_id(v, f, "tokenizer.ggml.padding_token_id", -1, &v->pad)) ||
        (st = read_id(v, f, "tokenizer.ggml.eot_token_id", -1, &v->eot)) ||
        (st = read_id(v, f, "tokenizer.ggml.eom_token_id", -1, &v->eom)))
        return st;
    if ((st = gguf_get_bool_or(f, "tokenizer.ggml.add_bos_token", add_bos_default, &v->add_bos)) ||
        (st = gguf_get_bool_or(f, "tokenizer.ggml.add_eos_token", false, &v->add_eos)) ||
        (st = gguf_get_bool_or(f, "tokenizer.ggml.add_space_prefix", v->is_spm,
                               &v->add_space_prefix)))
        return st;
    if (v->add_bos && v->bos < 0)
        return al_error(AL_ERR_FORMAT,
                        "%s: tokenizer.ggml.add_bos_token is true but there is "
                        "no tokenizer.ggml.bos_token_id",
                        f->path);
    if (v->add_eos && v->eos < 0)
        return al_error(AL_ERR_FORMAT,
                        "%s: tokenizer.ggml.add_eos_token is true but there is "
                        "no tokenizer.ggml.eos_token_id",
                        f->path);
    return AL_OK;
}

/* Merges are "left right" with the split at the first space after the first byte, so a
 * left part may itself be a space (SentencePiece-style BPE spells spaces otherwise). */
static al_status load_merges(al_vocab *v, const gguf_file *f) {
    const char *key = "tokenizer.ggml.merges";
    const gguf_kv *kv;
    al_status st = find_array(f, key, true, &kv);
    if (st != AL_OK) return st;
    if (kv->v.arr.type != GGUF_VT_STRING)
        return al_error(AL_ERR_FORMAT, "%s: '%s' holds %s; expected strings", f->path, key,
                        gguf_vtype_name(kv->v.arr.type));
    uint64_t n = kv->v.arr.n, pool = 0;
    if (n > VOCAB_MAX_TOKENS)
        return al_error(AL_ERR_FORMAT, "%s: '%s' has %llu merges; at most %d are supported",
                        f->path, key, (unsigned long long)n, VOCAB_MAX_TOKENS);
    for (uint64_t i = 0; i < n; i++)
        if (!al_add_u64(pool, kv->v.arr.strs[i].n, &pool) || pool > VOCAB_MAX_POOL)
            return al_error(AL_ERR_FORMAT, "%s: '%s' holds more text than supported", f->path, key);
    v->n_merges = (int32_t)n;
    v->merge_text = al_malloc((size_t)pool);
    v->merge_off = al_calloc((size_t)n, sizeof *v->merge_off);
    v->merge_n_left = al_calloc((size_t)n, sizeof *v->merge_n_left);
    v->merge_n = al_calloc((size_t)n, sizeof *v->merge_n);
    if (!v->merge_text || !v->merge_off || !v->merge_n_left || !v->merge_n ||
        tok_hash_init(&v->merges, n) != AL_OK)
        return al_error(AL_ERR_NOMEM, "%s: out of memory for %llu merges", f->path,
                        (unsigned long long)n);
    uint32_t off = 0;
    for (int32_t r = 0; r < v->n_merges; r++) {
        gguf_str s = kv->v.arr.strs[r];
        const char *sp = s.n > 1 ? memchr(s.s + 1, ' ', (size_t)s.n - 1) : NULL;
        if (sp == NULL || sp + 1 == s.s + s.n)
            return al_error(AL_ERR_FORMAT, "%s: '%s'[%d] is '%.*s'; expected 'left right'", f->path,
                            key, r, (int)(s.n > 64 ? 64 : s.n), s.s);
        uint32_t n_left = (uint32_t)(sp - s.s), n_all = (uint32_t)s.n - 1;
        memcpy(v->merge_text + off, s.s, n_left);
        memcpy(v->merge_text + off + n_left, sp + 1, n_all - n_left);
        v->merge_off[r] = off;
        v->merge_n_left[r] = n_left;
        v->merge_n[r] = n_all;
        off += n_all;
        /* A repeated pair keeps its first (best) rank. */
        const char *t = v->merge_text + v->merge_off[r];
        if (merge_lookup(v, t, n_left, n_all) >= 0) continue;
        uint32_t i = tok_hash_bytes(t, n_all, n_left * 0x9E3779B1u) & v->merges.mask;
        while (v->merges.slots[i] >= 0)
            i = (i + 1) & v->merges.mask;
        v->merges.slots[i] = r;
    }
    return AL_OK;
}

/* ---- loading: derived tables ---------------------------------------------------------- */

/* Texts of tokens that end a turn or the text. llama.cpp keeps the same list because
 * converters rarely record these ids; a token found here also becomes a control token
 * so that it prints as nothing. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>", /* Harmony (gpt-oss): the reply is complete       */
    "<|call|>",   /* Harmony: the reply ends in a tool call         */
    "<end_of_turn>",
    "<turn|>",          /* Gemma 4: the end of a turn                   */
    "<|tool_response>", /* Gemma 4: the reply ends in tool calls        */
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    ("<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"), /* DeepSeek */
};

static void mark_eog(al_vocab *v) {
    for (size_t i = 0; i < sizeof k_eog_texts / sizeof k_eog_texts[0]; i++) {
        int32_t id = vocab_lookup(v, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id < 0) continue;
        v->eog[id] = 1;
        if (v->type[id] == TOK_NORMAL || v->type[id] == TOK_USER) v->type[id] = TOK_CONTROL;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;
    /* Harmony's <|end|> closes one message of a reply that goes on (the reasoning, then
     * the answer); <|return|> and <|call|> end the reply. A vocabulary with all three
     * is Harmony's, whatever its eos/eot keys say (llama.cpp decides the same way). */
    int32_t end = vocab_lookup(v, "<|end|>", 7);
    if (end >= 0 && vocab_lookup(v, "<|return|>", 10) >= 0 && vocab_lookup(v, "<|call|>", 8) >= 0)
        v->eog[end] = 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xNN>" text, or -1. */
static int byte_token_value(const char *s, uint32_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Decodes the text of a normal BPE token: each code point of GPT-2's byte alphabet
 * becomes its byte; anything else (a vocabulary need not be purely byte-level) is
 * copied as it is. Returns the bytes written; never more than n. */
static uint32_t bpe_decode(const char *s, uint32_t n, char *dst) {
    uint32_t o = 0;
    for (uint32_t i = 0; i < n;) {
        size_t k = utf8_valid_len((const unsigned char *)s + i, n - i);
        if (k == 0) {
            dst[o++] = s[i++];
            continue;
        }
        uint32_t cp = (unsigned char)s[i];
        if (k == 2) cp = ((cp & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
        int b = k <= 2 ? bpe_cp_byte(cp) : -1;
        if (b >= 0)
            dst[o++] = (char)b;
        else {
            memcpy(dst + o, s + i, k);
            o += (uint32_t)k;
        }
        i += (uint32_t)k;
    }
    return o;
}

/* Fills piece[] with what every token decodes to (as if show_special were set). */
static al_status build_pieces(al_vocab *v, const char *path) {
    size_t pool = (size_t)v->text_off[v->n_tokens - 1] + v->text_len[v->n_tokens - 1] + 1;
    v->piece = al_malloc(pool);
    v->piece_off = al_calloc((size_t)v->n_tokens, sizeof *v->piece_off);
    v->piece_len = al_calloc((size_t)v->n_tokens, sizeof *v->piece_len);
    if (!v->piece || !v->piece_off || !v->piece_len)
        return al_error(AL_ERR_NOMEM, "%s: out of memory", path);
    uint32_t off = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s = v->text + v->text_off[id];
        uint32_t n = v->text_len[id], o = 0;
        char *dst = v->piece + off;
        switch (v->type[id]) {
        case TOK_NORMAL:
            if (!v->is_spm) {
                o = bpe_decode(s, n, dst);
                break;
            }
            for (uint32_t i = 0; i < n;) { /* "▁" (E2 96 81) stands for a space */
                if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    dst[o++] = ' ';
                    i += 3;
                } else
                    dst[o++] = s[i++];
            }
            break;
        case TOK_BYTE: {
            int b = byte_token_value(s, n);
            if (b < 0)
                return al_error(AL_ERR_FORMAT,
                                "%s: token %d ('%.*s') has type byte but is "
                                "not <0xNN>",
                                path, id, (int)(n > 64 ? 64 : n), s);
            dst[o++] = (char)b;
            break;
        }
        case TOK_CONTROL:
        case TOK_UNKNOWN:
        case TOK_USER:
            memcpy(dst, s, n);
            o = n;
            break;
        default: /* unused and undefined tokens print as nothing, as in llama.cpp */
            break;
        }
        v->piece_off[id] = off;
        v->piece_len[id] = o;
        off += o;
    }
    return AL_OK;
}

/* The token that spells each raw byte: "<0xNN>" or the one-byte text for SentencePiece,
 * the GPT-2 spelling of the byte for BPE. */
static void build_byte_tokens(al_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id = -1;
        if (v->is_spm) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = vocab_lookup(v, buf, 6);
            if (id < 0) {
                buf[0] = (char)b;
                id = vocab_lookup(v, buf, 1);
            }
        } else {
            uint32_t cp = bpe_byte_cp((uint8_t)b);
            size_t n = 1;
            if (cp < 0x80)
                buf[0] = (char)cp;
            else {
                buf[0] = (char)(0xC0 | (cp >> 6));
                buf[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
            }
            id = vocab_lookup(v, buf, n);
        }
        v->byte_token[b] = id;
    }
}

typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

static int special_cmp(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Tokens matched in raw text, longest first so that "<|im_start|>" wins over a shorter
 * token that it contains; equal lengths go by id so that the order is reproducible. */
static al_status build_special_list(al_vocab *v, const char *path) {
    int n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->type[id];
        n += t == TOK_CONTROL || t == TOK_UNKNOWN || t == TOK_USER;
    }
    special_key *keys = al_calloc((size_t)n + 1, sizeof *keys);
    v->special = al_calloc((size_t)n + 1, sizeof *v->special);
    if (keys == NULL || v->special == NULL) {
        al_free(keys);
        return al_error(AL_ERR_NOMEM, "%s: out of memory", path);
    }
    n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->type[id];
        if (t == TOK_CONTROL || t == TOK_UNKNOWN || t == TOK_USER)
            keys[n++] = (special_key){v->text_len[id], id};
    }
    qsort(keys, (size_t)n, sizeof *keys, special_cmp);
    for (int i = 0; i < n; i++)
        v->special[i] = keys[i].id;
    v->n_special = n;
    al_free(keys);
    return special_ac_build(v, path);
}

/* ---- construction and destruction ---------------------------------------------------- */

void al_vocab_destroy(al_vocab *v) {
    if (v == NULL) return;
    bpe_pre_destroy(v->pre);
    al_free(v->path);
    al_free(v->text);
    al_free(v->text_off);
    al_free(v->text_len);
    al_free(v->score);
    al_free(v->type);
    al_free(v->eog);
    al_free(v->by_text.slots);
    al_free(v->piece);
    al_free(v->piece_off);
    al_free(v->piece_len);
    al_free(v->special);
    special_ac_destroy(v->ac);
    al_free(v->merge_text);
    al_free(v->merge_off);
    al_free(v->merge_n_left);
    al_free(v->merge_n);
    al_free(v->merges.slots);
    g_trie_free(v->trie);
    al_free(v);
}

/* The tokenizer model ("llama" or "gpt2") and, for BPE, the pre-tokenizer. */
static al_status load_kind(al_vocab *v, const gguf_file *f, bool *add_bos_default) {
    gguf_str model;
    al_status st = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (st != AL_OK) return st;
    if (gguf_str_eq(model, "llama")) {
        v->is_spm = true;
        *add_bos_default = true;
        return AL_OK;
    }
    if (!gguf_str_eq(model, "gpt2"))
        return al_error(AL_ERR_UNSUPPORTED,
                        "%s: tokenizer.ggml.model '%.*s' is not supported "
                        "(only 'llama' and 'gpt2')",
                        f->path, (int)(model.n > 64 ? 64 : model.n), model.s);
    char name[128] = "";
    const gguf_kv *kv = gguf_find_key(f, "tokenizer.ggml.pre");
    if (kv != NULL) {
        gguf_str pre;
        if ((st = gguf_get_str(f, "tokenizer.ggml.pre", &pre)) != AL_OK) return st;
        if (pre.n >= sizeof name || memchr(pre.s, '\0', (size_t)pre.n) != NULL)
            return al_error(AL_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported",
                            f->path, (int)(pre.n > 64 ? 64 : pre.n), pre.s);
        gguf_str_copy(pre, name, sizeof name);
    }
    return bpe_pre_create(f->path, kv != NULL ? name : NULL, &v->pre, &v->ignore_merges,
                          add_bos_default);
}

al_status vocab_from_gguf(const gguf_file *f, al_vocab **out) {
    if (out != NULL) *out = NULL;
    if (f == NULL || out == NULL) return al_error(AL_ERR_ARG, "vocab_from_gguf: NULL argument");
    al_vocab *v = al_calloc(1, sizeof *v);
    if (v == NULL) return al_error(AL_ERR_NOMEM, "%s: out of memory", f->path);
    v->bos = v->eos = v->unk = v->pad = v->eot = v->eom = -1;
    size_t n_path = strlen(f->path);
    v->path = al_malloc(n_path + 1);
    if (v->path == NULL) {
        al_vocab_destroy(v);
        return al_error(AL_ERR_NOMEM, "%s: out of memory", f->path);
    }
    memcpy(v->path, f->path, n_path + 1);

    bool add_bos_default = false;
    al_status st;
    if ((st = load_kind(v, f, &add_bos_default)) || (st = load_tokens(v, f)) ||
        (st = load_scores_types(v, f)) || (st = load_special_ids(v, f, add_bos_default)) ||
        (!v->is_spm && (st = load_merges(v, f))))
        goto fail;
    mark_eog(v);
    if ((st = build_pieces(v, f->path)) || (st = build_special_list(v, f->path))) goto fail;
    build_byte_tokens(v);
    *out = v;
    return AL_OK;
fail:
    al_vocab_destroy(v);
    return st;
}

al_status al_vocab_load(const char *path, al_vocab **out) {
    if (out != NULL) *out = NULL;
    if (path == NULL || out == NULL) return al_error(AL_ERR_ARG, "al_vocab_load: NULL argument");
    gguf_file *f;
    al_status st = gguf_open(path, &f);
    if (st != AL_OK) return st;
    st = vocab_from_gguf(f, out);
    gguf_close(f);
    return st;
}

/* ---- accessors ------------------------------------------------------------------------ */

static bool valid_id(const al_vocab *v, int32_t id) {
    return v != NULL && id >= 0 && id < v->n_tokens;
}

int al_vocab_n_tokens(const al_vocab *v) {
    return v ? v->n_tokens : 0;
}
int32_t al_vocab_bos(const al_vocab *v) {
    return v ? v->bos : -1;
}
int32_t al_vocab_eos(const al_vocab *v) {
    return v ? v->eos : -1;
}
bool al_vocab_is_eog(const al_vocab *v, int32_t id) {
    return valid_id(v, id) && v->eog[id];
}

bool al_vocab_is_control(const al_vocab *v, int32_t id) {
    return valid_id(v, id) && v->type[id] == TOK_CONTROL;
}

int32_t al_vocab_find(const al_vocab *v, const char *text) {
    if (v == NULL || text == NULL) return -1;
    return vocab_lookup(v, text, strlen(text));
}

const char *al_vocab_text(const al_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->text + v->text_off[id] : NULL;
}

int vocab_token_type(const al_vocab *v, int32_t id) {
    return valid_id(v, id) ? v->type[id] : -1;
}
bool vocab_is_spm(const al_vocab *v) {
    return v != NULL && v->is_spm;
}

bool vocab_adds_space_prefix(const al_vocab *v) {
    return v != NULL && v->add_space_prefix;
}

/* ---- tokenize -------------------------------------------------------------------------- */

static al_status tokenize_raw(const al_vocab *v, const char *text, size_t len, bool prefix,
                              tok_vec *tv) {
    return v->is_spm ? spm_tokenize(v, text, len, prefix, tv) : bpe_tokenize(v, text, len, tv);
}

/* Hands the vector to the caller as an array that is never NULL on success. */
static al_status finish_tokens(tok_vec *tv, int32_t **tokens, int *n_tokens) {
    if (tv->n > INT_MAX) {
        al_free(tv->ids);
        return al_error(AL_ERR_ARG, "tokenize: more than %d tokens", INT_MAX);
    }
    if (tv->ids == NULL && (tv->ids = al_malloc(sizeof *tv->ids)) == NULL)
        return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    *tokens = tv->ids;
    *n_tokens = (int)tv->n;
    return AL_OK;
}

/* The longest text accepted: keeps every count of tokens and bytes within an int. */
#define TOKENIZE_MAX_LEN ((size_t)INT_MAX / 8)

al_tokenize_params al_tokenize_default_params(void) {
    return (al_tokenize_params){.add_special = false, .parse_special = false};
}

/* al_tokenize() and vocab_tokenize_guarded(): the three steps of the header comment. */
static al_status tokenize(const al_vocab *v, const char *text, size_t len, bool add_special,
                          bool parse_special, const tok_span *spans, int n_spans,
                          int32_t **tokens, int *n_tokens) {
    if (tokens != NULL) *tokens = NULL;
    if (n_tokens != NULL) *n_tokens = 0;
    if (v == NULL || tokens == NULL || n_tokens == NULL || (text == NULL && len > 0) ||
        n_spans < 0 || (n_spans > 0 && spans == NULL))
        return al_error(AL_ERR_ARG, "al_tokenize: NULL argument");
    if (len > TOKENIZE_MAX_LEN)
        return al_error(AL_ERR_ARG, "al_tokenize: text of %zu bytes is longer than %zu", len,
                        TOKENIZE_MAX_LEN);
    tok_frag *fr = NULL;
    size_t n_fr = 0;
    tok_vec tv = {0};
    al_status st = special_partition(v, text, len, parse_special, spans, n_spans, &fr, &n_fr);
    if (st == AL_OK && add_special && v->add_bos) st = tok_vec_push(&tv, v->bos);
    /* SentencePiece treats the start of the text like the end of a special token. */
    bool after_special = true;
    for (size_t i = 0; i < n_fr && st == AL_OK; i++) {
        if (fr[i].id >= 0) {
            st = tok_vec_push(&tv, fr[i].id);
            after_special = true;
        } else {
            st = tokenize_raw(v, text + fr[i].off, fr[i].len,
                              v->add_space_prefix && after_special, &tv);
            after_special = false;
        }
    }
    if (st == AL_OK && add_special && v->add_eos) st = tok_vec_push(&tv, v->eos);
    al_free(fr);
    if (st != AL_OK) {
        al_free(tv.ids);
        return st;
    }
    return finish_tokens(&tv, tokens, n_tokens);
}

al_status al_tokenize(const al_vocab *v, const char *text, size_t len,
                      const al_tokenize_params *params, int32_t **tokens, int *n_tokens) {
    al_tokenize_params p = params ? *params : al_tokenize_default_params();
    return tokenize(v, text, len, p.add_special, p.parse_special, NULL, 0, tokens, n_tokens);
}

al_status vocab_tokenize_guarded(const al_vocab *v, const char *text, size_t len,
                                 bool add_special, const tok_span *spans, int n_spans,
                                 int32_t **tokens, int *n_tokens) {
    return tokenize(v, text, len, add_special, true, spans, n_spans, tokens, n_tokens);
}

void al_free_tokens(int32_t *tokens) {
    al_free(tokens);
}

al_status vocab_tokenize_plain(const al_vocab *v, const char *text, size_t len, int32_t **tokens,
                               int *n_tokens) {
    if (tokens != NULL) *tokens = NULL;
    if (n_tokens != NULL) *n_tokens = 0;
    if (v == NULL || tokens == NULL || n_tokens == NULL || (text == NULL && len > 0))
        return al_error(AL_ERR_ARG, "vocab_tokenize_plain: NULL argument");
    if (len > TOKENIZE_MAX_LEN)
        return al_error(AL_ERR_ARG, "vocab_tokenize_plain: text of %zu bytes is too long", len);
    tok_vec tv = {0};
    al_status st = len > 0 ? tokenize_raw(v, text, len, false, &tv) : AL_OK;
    if (st != AL_OK) {
        al_free(tv.ids);
        return st;
    }
    return finish_tokens(&tv, tokens, n_tokens);
}

al_status vocab_pre_split(const al_vocab *v, const char *text, size_t len, size_t **ends,
                          int *n_pieces) {
    if (ends != NULL) *ends = NULL;
    if (n_pieces != NULL) *n_pieces = 0;
    if (v == NULL || ends == NULL || n_pieces == NULL || (text == NULL && len > 0))
        return al_error(AL_ERR_ARG, "vocab_pre_split: NULL argument");
    if (len > TOKENIZE_MAX_LEN)
        return al_error(AL_ERR_ARG, "vocab_pre_split: text of %zu bytes is too long", len);
    size_t n = 0;
    if (v->is_spm) {
        if ((*ends = al_malloc(sizeof **ends)) == NULL)
            return al_error(AL_ERR_NOMEM, "vocab_pre_split: out of memory");
        (*ends)[0] = len;
        n = len > 0;
    } else {
        al_status st = bpe_split(v, text, len, ends, &n);
        if (st != AL_OK) return st;
    }
    *n_pieces = (int)n;
    return AL_OK;
}

/* ---- decoding ------------------------------------------------------------------------- */

int al_token_to_bytes(const al_vocab *v, int32_t id, bool show_special, char *buf, int size) {
    if (!valid_id(v, id)) return 0;
    uint8_t t = v->type[id];
    if (!show_special && (t == TOK_CONTROL || t == TOK_UNKNOWN)) return 0;
    uint32_t n = v->piece_len[id];
    if (buf != NULL && size > 0)
        memcpy(buf, v->piece + v->piece_off[id], n < (uint32_t)size ? n : (size_t)size);
    return (int)n;
}

/* ---- streaming detokenizer ------------------------------------------------------------ */

struct al_detok {
    const al_vocab *v;
    char *buf; /* held-back bytes followed by the newest token's bytes */
    size_t cap;
    unsigned char hold[4]; /* start of a character still waiting for its other bytes */
    size_t n_hold;         /* 0 to 3 */
    char flushed[4];
};

/* Bytes at the end of s[0..n) that begin a well-formed character but stop short of its
 * end; 0 if the text ends on a character boundary or with bytes that can never become
 * valid (those are passed on, or they would be held forever). */
static size_t utf8_incomplete_tail(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const unsigned char *p = s + n - k;
        if ((*p & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC0 ? 2 : 1;
        if (need <= k) return 0;
        /* Complete the prefix with the smallest continuation bytes that keep it
         * well-formed and see whether a valid character results. */
        unsigned char tmp[4];
        memcpy(tmp, p, k);
        for (size_t i = k; i < need; i++)
            tmp[i] = 0x80;
        if (k == 1 && (*p == 0xE0 || *p == 0xF0)) tmp[1] = *p == 0xE0 ? 0xA0 : 0x90;
        return utf8_valid_len(tmp, need) == need ? k : 0;
    }
    return 0;
}

al_status al_detok_create(const al_vocab *v, al_detok **out) {
    if (out != NULL) *out = NULL;
    if (v == NULL || out == NULL) return al_error(AL_ERR_ARG, "al_detok_create: NULL argument");
    al_detok *d = al_calloc(1, sizeof *d);
    if (d == NULL) return al_error(AL_ERR_NOMEM, "al_detok_create: out of memory");
    d->v = v;
    *out = d;
    return AL_OK;
}

void al_detok_destroy(al_detok *d) {
    if (d == NULL) return;
    al_free(d->buf);
    al_free(d);
}

al_status al_detok_push(al_detok *d, int32_t id, const char **text, size_t *len) {
    if (text != NULL) *text = NULL;
    if (len != NULL) *len = 0;
    if (d == NULL || text == NULL || len == NULL)
        return al_error(AL_ERR_ARG, "al_detok_push: NULL argument");
    if (!valid_id(d->v, id))
        return al_error(AL_ERR_ARG, "al_detok_push: token %d is not in the vocabulary of %d", id,
                        d->v->n_tokens);
    size_t n_piece = (size_t)al_token_to_bytes(d->v, id, false, NULL, 0);
    size_t need = d->n_hold + n_piece;
    if (need > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < need)
            cap *= 2;
        char *buf = al_realloc(d->buf, cap);
        if (buf == NULL) return al_error(AL_ERR_NOMEM, "al_detok_push: out of memory");
        d->buf = buf;
        d->cap = cap;
    }
    if (need == 0) {
        *text = "";
        return AL_OK;
    }
    memcpy(d->buf, d->hold, d->n_hold);
    al_token_to_bytes(d->v, id, false, d->buf + d->n_hold, (int)n_piece);
    size_t keep = utf8_incomplete_tail((const unsigned char *)d->buf, need);
    memcpy(d->hold, d->buf + need - keep, keep);
    d->n_hold = keep;
    *text = d->buf;
    *len = need - keep;
    return AL_OK;
}

void al_detok_flush(al_detok *d, const char **text, size_t *len) {
    if (text != NULL) *text = "";
    if (len != NULL) *len = 0;
    if (d == NULL || text == NULL || len == NULL) return;
    memcpy(d->flushed, d->hold, d->n_hold);
    *text = d->flushed;
    *len = d->n_hold;
    d->n_hold = 0;
}
