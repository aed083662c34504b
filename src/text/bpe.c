/* bpe.c: byte-level BPE (GPT-2 and its descendants: tokenizer.ggml.model
 * "gpt2"), as Hugging Face tokenizers and llama.cpp do it.
 *
 *   1. Pre-tokenize: the regexes named by tokenizer.ggml.pre cut the text into pieces.
 *      With several regexes each one cuts the pieces of the one before; both what a
 *      regex matches and the text between matches become pieces. Lookbehind and
 *      lookahead see only the piece being cut, as in llama.cpp.
 *   2. Spell each piece in GPT-2's byte alphabet: every byte becomes one printable code
 *      point (bytes that are printable Latin-1 stand for themselves, the rest map to
 *      U+0100.. in byte order, so a space is "Ġ" U+0120 and a newline "Ċ" U+010A).
 *   3. Merge inside each piece: starting from one symbol per byte, repeatedly merge the
 *      neighbouring pair whose merge rule ("left right" in tokenizer.ggml.merges) has the
 *      lowest rank; on a tie the leftmost pair. Stale heap entries are skipped as in
 *      spm.c.
 *   4. Each final symbol is its token; a symbol the vocabulary lacks falls back to the
 *      tokens of its single bytes.
 *
 * The regexes run on PCRE2 in UTF + UCP mode (Unicode properties for \p, \s, \d), JIT
 * compiled once when the vocabulary is loaded; match data is per call, so a vocabulary
 * can be shared by threads. Text that is not valid UTF-8 is cut as llama.cpp cuts it
 * (see matchable_text()), but unlike llama.cpp, which turns such bytes into U+FFFD, the
 * tokens spell the original bytes exactly.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#define TEXT_INTERNAL
#include "text/bpe.h"

#include <pcre2.h>
#include <string.h>

#include "util.h"

/* ---- GPT-2's byte alphabet ------------------------------------------------------------ */

/* The printable bytes are 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF. The other 68 take the code
 * points from U+0100 on in byte order: 0x00-0x20 (33 of them), then 0x7F-0xA0 (34), then
 * 0xAD. */
uint32_t bpe_byte_cp(uint8_t b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    if (b == 0xAD) return 0x100 + 67;
    return b;
}

int bpe_cp_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x100 + 32) return (int)(cp - 0x100);
    if (cp >= 0x100 + 33 && cp <= 0x100 + 66) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

/* Writes the spelling of byte b (1 or 2 bytes of UTF-8) and returns its length. */
static size_t spell_byte(uint8_t b, char *dst) {
    uint32_t cp = bpe_byte_cp(b);
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ---- pre-tokenizers ------------------------------------------------------------------- */

/* The regex of GPT-2: English contractions, letters with an optional leading space,
 * numbers likewise, other symbols likewise, then whitespace (a run of whitespace before
 * a word leaves its last space to the word). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Llama 3: contractions in either case, a letter run with one optional leading
 * non-letter, digits in groups of up to three, symbols with trailing newlines, and
 * newlines kept with the whitespace before them. The case-insensitive group is spelled
 * out so that only ASCII letters match (PCRE2's caseless mode would also match U+017F
 * for 's', unlike llama.cpp). */
#define RE_LLAMA3_HEAD                                                                             \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const k_re_gpt2[] = {RE_GPT2, NULL};
static const char *const k_re_llama3[] = {RE_LLAMA3_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL, NULL};
static const char *const k_re_qwen2[] = {RE_LLAMA3_HEAD "\\p{N}" RE_LLAMA3_TAIL, NULL};
/* StarCoder and relatives: every digit on its own, then GPT-2. */
static const char *const k_re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const k_re_falcon[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]",
                                          NULL};
/* llama.cpp's choice for files that name no pre-tokenizer. */
static const char *const k_re_default[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+",
                                           "[0-9][0-9][0-9]", NULL};
/* clang-format off */
static const char *const k_re_deepseek_coder[] = {
    "[\\r\\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", /* as tokenizer.json has it */
    "\\p{N}",
    NULL,
};
/* clang-format on */
/* DeepSeek LLM: the second regex lists the cased letters of Unicode explicitly, as the
 * model's tokenizer.json does (rather than \p{L}, which would include CJK). */
static const char *const k_re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-"
    "\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-"
    "\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-"
    "\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}"
    "-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-"
    "\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-"
    "\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-"
    "\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-"
    "\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
    NULL};

/* tokenizer.ggml.pre names, grouped by the regexes they share (as in llama.cpp). "gpt-neox"
 * is not in llama.cpp's list; GPT-NeoX's tokenizer uses GPT-2's byte-level regex. The
 * Llama 3 group emits a pre-token that is a token whole, without merging, and adds BOS
 * unless the file says otherwise. */
static const struct pre_def {
    const char *name;
    const char *const *regexes;
    bool ignore_merges, add_bos;
} k_pre[] = {
    {"default", k_re_default, false, false},
    {"gpt-2", k_re_gpt2, false, false},
    {"gpt-neox", k_re_gpt2, false, false},
    {"mpt", k_re_gpt2, false, false},
    {"olmo", k_re_gpt2, false, false},
    {"llama-bpe", k_re_llama3, true, true},
    {"llama3", k_re_llama3, true, true},
    {"qwen2", k_re_qwen2, false, false},
    {"smollm", k_re_starcoder, false, false},
    {"starcoder", k_re_starcoder, false, false},
    {"refact", k_re_starcoder, false, false},
    {"command-r", k_re_starcoder, false, false},
    {"falcon", k_re_falcon, false, false},
    {"deepseek-llm", k_re_deepseek_llm, false, false},
    {"deepseek-coder", k_re_deepseek_coder, false, false},
};

#define BPE_MAX_REGEX 8

struct bpe_pre {
    const struct pre_def *def;
    pcre2_general_context *gctx; /* routes PCRE2's allocations through al_malloc */
    pcre2_code *code[BPE_MAX_REGEX];
    int n_code;
};

static void *pcre_alloc(PCRE2_SIZE n, void *data) {
    (void)data;
    return al_malloc(n);
}

static void pcre_free(void *p, void *data) {
    (void)data;
    al_free(p);
}

void bpe_pre_destroy(struct bpe_pre *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->n_code; i++)
        pcre2_code_free(p->code[i]);
    pcre2_general_context_free(p->gctx);
    al_free(p);
}

static al_status compile_all(struct bpe_pre *p, const char *path) {
    pcre2_compile_context *cctx = pcre2_compile_context_create(p->gctx);
    if (cctx == NULL) return al_error(AL_ERR_NOMEM, "%s: out of memory", path);
    al_status st = AL_OK;
    for (int i = 0; p->def->regexes[i] != NULL && st == AL_OK; i++) {
        AL_ASSERT(i < BPE_MAX_REGEX);
        int err;
        PCRE2_SIZE at;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)p->def->regexes[i], PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP, &err, &at, cctx);
        if (c == NULL) {
            /* Our own table is at fault, or PCRE2 ran out of memory. */
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            st = al_error(err == PCRE2_ERROR_HEAP_FAILED ? AL_ERR_NOMEM : AL_ERR_UNSUPPORTED,
                          "%s: pre-tokenizer '%s': regex %d: %s at offset %zu", path, p->def->name,
                          i, (const char *)msg, (size_t)at);
            break;
        }
        p->code[p->n_code++] = c;
        /* Without JIT (not built in, or no executable memory) matching still works. */
        (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    }
    pcre2_compile_context_free(cctx);
    return st;
}

al_status bpe_pre_create(const char *path, const char *name, struct bpe_pre **out,
                         bool *ignore_merges, bool *add_bos) {
    *out = NULL;
    const struct pre_def *def = NULL;
    const char *want = name != NULL ? name : "default";
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strcmp(k_pre[i].name, want) == 0) def = &k_pre[i];
    if (def == NULL)
        return al_error(AL_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not supported", path,
                        want);
    struct bpe_pre *p = al_calloc(1, sizeof *p);
    if (p == NULL) return al_error(AL_ERR_NOMEM, "%s: out of memory", path);
    p->def = def;
    p->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    al_status st =
        p->gctx ? compile_all(p, path) : al_error(AL_ERR_NOMEM, "%s: out of memory", path);
    if (st != AL_OK) {
        bpe_pre_destroy(p);
        return st;
    }
    *ignore_merges = def->ignore_merges;
    *add_bos = def->add_bos;
    *out = p;
    return AL_OK;
}

/* ---- splitting ------------------------------------------------------------------------ */

typedef struct span {
    size_t off, len;
} span;

typedef struct span_vec {
    span *s;
    size_t n, cap;
} span_vec;

static al_status span_push(span_vec *sv, size_t off, size_t len) {
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 32;
        span *s = al_realloc(sv->s, cap * sizeof *s);
        if (s == NULL) return al_error(AL_ERR_NOMEM, "tokenize: out of memory");
        sv->s = s;
        sv->cap = cap;
    }
    sv->s[sv->n++] = (span){off, len};
    return AL_OK;
}

/* Cuts text[sp.off .. +sp.len) with one regex into matches and the gaps between them. */
static al_status cut(const struct bpe_pre *p, int r, pcre2_match_data *md, const char *text,
                     span sp, span_vec *out) {
    PCRE2_SPTR s = (PCRE2_SPTR)(text + sp.off);
    size_t pos = 0, gap = 0, n = sp.len;
    al_status st = AL_OK;
    while (pos < n && st == AL_OK) {
        int rc = pcre2_match(p->code[r], s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its frames on the heap */
            rc = pcre2_match(p->code[r], s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return al_error(rc == PCRE2_ERROR_NOMEMORY ? AL_ERR_NOMEM : AL_ERR_ARG,
                            "tokenize: pre-tokenizer '%s' failed on %zu bytes of text: %s",
                            p->def->name, n, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a == b) { /* an empty match cuts nothing: search again one character on */
            size_t k = utf8_valid_len(s + a, n - a);
            pos = a + (k ? k : 1);
            continue;
        }
        if (a > gap) st = span_push(out, sp.off + gap, a - gap);
        if (st == AL_OK) st = span_push(out, sp.off + a, b - a);
        gap = pos = b;
    }
    if (st == AL_OK && gap < n) st = span_push(out, sp.off + gap, n - gap);
    return st;
}

/* PCRE2 needs valid UTF-8. Each byte that is not part of a well-formed character is
 * matched as if it were the control character U+0001: like U+FFFD, which llama.cpp puts
 * in its place, it is neither space, letter, digit nor punctuation, so the cuts are
 * llama.cpp's, while the bytes themselves survive for the merges. Returns text itself
 * when it is valid, else a copy in *copy. */
static const char *matchable_text(const char *text, size_t len, char **copy) {
    *copy = NULL;
    size_t i = 0, k;
    while (i < len && (k = utf8_valid_len((const unsigned char *)text + i, len - i)) > 0)
        i += k;
    if (i == len) return text;
    if ((*copy = al_malloc(len)) == NULL) return NULL;
    memcpy(*copy, text, len);
    while (i < len) {
        k = utf8_valid_len((const unsigned char *)text + i, len - i);
        if (k == 0) (*copy)[i] = '\x01';
        i += k ? k : 1;
    }
    return *copy;
}

/* Step 1 of the header comment, into *out. */
static al_status split_spans(const al_vocab *v, const char *text, size_t len, span_vec *out) {
    const struct bpe_pre *p = v->pre;
    char *copy;
    const char *m = matchable_text(text, len, &copy);
    span_vec other = {0};
    al_status st = m ? span_push(out, 0, len) : al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    pcre2_match_data *md = st == AL_OK ? pcre2_match_data_create(1, p->gctx) : NULL;
    if (st == AL_OK && md == NULL) st = al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    for (int r = 0; r < p->n_code && st == AL_OK; r++) {
        other.n = 0;
        for (size_t i = 0; i < out->n && st == AL_OK; i++)
            st = cut(p, r, md, m, out->s[i], &other);
        span_vec t = *out;
        *out = other;
        other = t;
    }
    pcre2_match_data_free(md);
    al_free(other.s);
    al_free(copy);
    return st;
}

al_status bpe_split(const al_vocab *v, const char *text, size_t len, size_t **ends,
                    size_t *n_pieces) {
    span_vec sv = {0};
    al_status st = split_spans(v, text, len, &sv);
    size_t *e = st == AL_OK ? al_malloc((sv.n + 1) * sizeof *e) : NULL;
    if (st == AL_OK && e == NULL) st = al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    if (st == AL_OK) {
        for (size_t i = 0; i < sv.n; i++)
            e[i] = sv.s[i].off + sv.s[i].len;
        *ends = e;
        *n_pieces = sv.n;
    }
    al_free(sv.s);
    return st;
}

/* ---- merging -------------------------------------------------------------------------- */

typedef struct bpe_sym {
    int prev, next;
    uint32_t off, n; /* in the spelled piece; n is 0 once merged into the left neighbour */
} bpe_sym;

typedef struct bpe_state {
    const al_vocab *v;
    char *word; /* the piece in GPT-2's spelling */
    bpe_sym *sym;
    tok_heap heap;
} bpe_state;

static al_status try_pair(bpe_state *st, int left, int right) {
    if (left < 0 || right < 0) return AL_OK;
    uint32_t n_left = st->sym[left].n, n = n_left + st->sym[right].n;
    int32_t rank = merge_lookup(st->v, st->word + st->sym[left].off, n_left, n);
    return rank < 0 ? AL_OK : tok_heap_push(&st->heap, (tok_pair){rank, left, right, n});
}

/* The token of a final symbol, or the tokens of its bytes. */
static al_status emit_symbol(const al_vocab *v, const char *s, uint32_t n, tok_vec *out) {
    int32_t id = vocab_lookup(v, s, n);
    if (id >= 0) return tok_vec_push(out, id);
    for (uint32_t i = 0; i < n;) {
        size_t k = utf8_valid_len((const unsigned char *)s + i, n - i);
        uint32_t cp = (unsigned char)s[i];
        if (k == 2) cp = ((cp & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
        int b = bpe_cp_byte(cp);
        AL_ASSERT(k >= 1 && k <= 2 && b >= 0); /* the word was spelled by spell_byte() */
        int32_t t = v->byte_token[b] >= 0 ? v->byte_token[b] : v->unk;
        if (t < 0)
            return al_error(AL_ERR_ARG,
                            "%s: the vocabulary has no token for byte 0x%02X and "
                            "no unknown token",
                            v->path, b);
        al_status st = tok_vec_push(out, t);
        if (st != AL_OK) return st;
        i += (uint32_t)k;
    }
    return AL_OK;
}

/* Steps 2 to 4 for one piece. */
static al_status merge_piece(bpe_state *st, const char *piece, size_t len, tok_vec *out) {
    const al_vocab *v = st->v;
    uint32_t n = 0;
    int n_sym = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t k = (uint32_t)spell_byte((uint8_t)piece[i], st->word + n);
        st->sym[n_sym] = (bpe_sym){n_sym - 1, n_sym + 1, n, k};
        n += k;
        n_sym++;
    }
    st->sym[n_sym - 1].next = -1;
    if (v->ignore_merges) {
        int32_t id = vocab_lookup(v, st->word, n);
        if (id >= 0) return tok_vec_push(out, id);
    }
    st->heap.n = 0;
    al_status s = AL_OK;
    for (int i = 1; i < n_sym && s == AL_OK; i++)
        s = try_pair(st, i - 1, i);
    while (st->heap.n > 0 && s == AL_OK) {
        tok_pair p = tok_heap_pop(&st->heap);
        bpe_sym *l = &st->sym[p.left], *r = &st->sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.n) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) st->sym[r->next].prev = p.left;
        s = try_pair(st, l->prev, p.left);
        if (s == AL_OK) s = try_pair(st, p.left, l->next);
    }
    for (int i = 0; i >= 0 && s == AL_OK; i = st->sym[i].next)
        s = emit_symbol(v, st->word + st->sym[i].off, st->sym[i].n, out);
    return s;
}

al_status bpe_tokenize(const al_vocab *v, const char *text, size_t len, tok_vec *out) {
    if (len == 0) return AL_OK;
    span_vec sv = {0};
    al_status st = split_spans(v, text, len, &sv);
    if (st != AL_OK) {
        al_free(sv.s);
        return st;
    }
    size_t longest = 0;
    for (size_t i = 0; i < sv.n; i++)
        if (sv.s[i].len > longest) longest = sv.s[i].len;
    /* A piece of k bytes spells as at most 2k bytes and starts as k symbols. */
    bpe_state bs = {.v = v};
    bs.word = al_malloc(2 * longest);
    bs.sym = al_malloc(longest * sizeof *bs.sym);
    if (bs.word == NULL || bs.sym == NULL) st = al_error(AL_ERR_NOMEM, "tokenize: out of memory");
    for (size_t i = 0; i < sv.n && st == AL_OK; i++)
        st = merge_piece(&bs, text + sv.s[i].off, sv.s[i].len, out);
    al_free(bs.word);
    al_free(bs.sym);
    al_free(bs.heap.a);
    al_free(sv.s);
    return st;
}
