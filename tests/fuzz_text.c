/* fuzz_text.c: libFuzzer target for the tokenizer, the detokenizer and the chat
 * templates (make fuzz; tests/fuzz_run.sh).
 *
 * The vocabularies of $SHARED/vocab (SentencePiece, GPT-2 byte-level BPE, Phi-3) and
 * those named by FUZZ_VOCABS are loaded once. The first input byte picks a vocabulary;
 * the rest is text,
 * which is
 *   - tokenized with every combination of add_special and parse_special; every id must
 *     be in range, and each token is decoded with al_token_to_bytes and streamed through
 *     al_detok; for the byte-level BPE vocabulary, without special parsing, the decoded
 *     text must equal the input (every byte has a token, so nothing may be lost);
 *   - given to al_chat_template_detect as a template, and rendered by every format with
 *     itself as the template (the default-system extraction reads it) and as the
 *     content of the messages;
 *   - parsed as a Harmony reply, whole and cut into pieces (the text per channel and the
 *     end state must not depend on the cuts), and fed token by token to a parser with
 *     the vocabulary (al_harmony_push_token);
 *   - compiled as a grammar; one that compiles takes the text's own tokens while it
 *     allows them, and its mask must agree with al_grammar_allows on every token;
 *   - read as a model's reply by the server's tool-call parser in each of its modes
 *     (tags, Llama 3, Mistral), whole and byte by byte (the same text and calls, every
 *     call's arguments a JSON object), and as a Harmony reply whose pieces go through
 *     the parser's Harmony mode, whole and byte by byte;
 *   - rendered with itself as the tools and as an assistant's tool_calls (Mistral,
 *     Harmony): rendered, or refused as bad JSON;
 *   - parsed as JSON and, if it is, compiled as a JSON Schema to grammar text, which
 *     must then compile as a grammar (or be refused with a reason).
 * Without vocabularies (SHARED unset and ../shared absent) only the chat part runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "server/schema.h"
#include "server/toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) __builtin_trap();                                                             \
    } while (0)

static const char *const k_vocab_files[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                                            "ggml-vocab-phi-3.gguf"};
enum { N_SHARED_VOCABS = 3, BPE_VOCAB = 1, MAX_VOCABS = 64 };
static al_vocab *g_vocab[MAX_VOCABS]; /* the shared ones at 0..2 (NULL if absent), then extras */
static int g_n_vocab = N_SHARED_VOCABS;
static volatile uint64_t g_sink;

/* FUZZ_VOCABS: more files, separated by spaces, e.g. the generator's odd vocabularies
 * (all-user tokens, invalid UTF-8 tokens, merges of absent tokens); those that do not
 * load are skipped. */
static void load_extra_vocabs(void) {
    const char *list = getenv("FUZZ_VOCABS");
    if (!list) return;
    char *copy = strdup(list), *save = NULL;
    for (char *p = copy ? strtok_r(copy, " ", &save) : NULL; p && g_n_vocab < MAX_VOCABS;
         p = strtok_r(NULL, " ", &save))
        if (al_vocab_load(p, &g_vocab[g_n_vocab]) == AL_OK) g_n_vocab++;
    free(copy);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *shared = getenv("SHARED");
    int n = 0;
    for (int i = 0; i < N_SHARED_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/%s", shared ? shared : "../shared", k_vocab_files[i]);
        if (al_vocab_load(path, &g_vocab[i]) == AL_OK) n++;
    }
    load_extra_vocabs();
    fprintf(stderr, "fuzz_text: %d of %d shared vocabularies and %d more loaded%s\n", n,
            N_SHARED_VOCABS, g_n_vocab - N_SHARED_VOCABS,
            n || g_n_vocab > N_SHARED_VOCABS ? "" : " (set SHARED): fuzzing the chat templates only");
    return 0;
}

/* Decodes ids one by one and through the streaming detokenizer; returns the bytes of
 * the first (malloc'd, *len bytes) for the round-trip check. */
static char *decode(const al_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, o = 0;
    char *out = malloc(cap);
    al_detok *d = NULL;
    REQUIRE(out && al_detok_create(v, &d) == AL_OK);
    for (int i = 0; i < n; i++) {
        int k = al_token_to_bytes(v, ids[i], true, NULL, 0);
        REQUIRE(k >= 0);
        while (o + (size_t)k > cap) out = realloc(out, cap *= 2);
        REQUIRE(out);
        REQUIRE(al_token_to_bytes(v, ids[i], true, out + o, k) == k);
        o += (size_t)k;
        const char *t;
        size_t tn;
        REQUIRE(al_detok_push(d, ids[i], &t, &tn) == AL_OK);
        if (tn) g_sink += (unsigned char)t[0] + (unsigned char)t[tn - 1];
    }
    const char *t;
    size_t tn;
    al_detok_flush(d, &t, &tn);
    REQUIRE(tn <= 4);
    al_detok_destroy(d);
    *len = o;
    return out;
}

static void fuzz_tokenizer(const al_vocab *v, bool bpe, const char *text, size_t len) {
    for (int mode = 0; mode < 4; mode++) {
        al_tokenize_params p = {.add_special = mode & 1, .parse_special = mode & 2};
        int32_t *ids = NULL;
        int n = 0;
        if (al_tokenize(v, text, len, &p, &ids, &n) != AL_OK) {
            REQUIRE(ids == NULL);
            continue;
        }
        for (int i = 0; i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < al_vocab_n_tokens(v));
        size_t out_len;
        char *out = decode(v, ids, n, &out_len);
        if (bpe && mode == 0) REQUIRE(out_len == len && memcmp(out, text, len) == 0);
        free(out);
        al_free_tokens(ids);
    }
}

/* The text per channel a parser released, and whether it was done before the end. */
typedef struct parse_out {
    char *text[3];
    size_t len[3], cap[3];
    bool done;
} parse_out;

static void take(parse_out *o, const al_chat_piece *p, int n) {
    for (int i = 0; i < n; i++) {
        int c = (int)p[i].channel;
        /* adjacent pieces of one channel are merged unless their recipients differ */
        bool other_to = i > 0 && (p[i - 1].recipient_len != p[i].recipient_len ||
                                  (p[i].recipient_len &&
                                   memcmp(p[i - 1].recipient, p[i].recipient, p[i].recipient_len)));
        REQUIRE(c >= 0 && c < 3 && p[i].len > 0 &&
                (i == 0 || p[i - 1].channel != p[i].channel || other_to));
        while (o->len[c] + p[i].len > o->cap[c]) {
            o->cap[c] = o->cap[c] ? 2 * o->cap[c] : 256;
            o->text[c] = realloc(o->text[c], o->cap[c]);
            REQUIRE(o->text[c]);
        }
        memcpy(o->text[c] + o->len[c], p[i].text, p[i].len);
        o->len[c] += p[i].len;
    }
}

/* Parses text in pieces of `step` bytes (0: whole). */
static void parse_steps(const char *text, size_t len, size_t step, parse_out *o) {
    al_harmony *h = NULL;
    REQUIRE(al_harmony_create(NULL, &h) == AL_OK);
    const al_chat_piece *p;
    int n;
    for (size_t at = 0; at < len;) {
        size_t k = step == 0 || step > len - at ? len - at : step;
        REQUIRE(al_harmony_push(h, text + at, k, &p, &n) == AL_OK);
        take(o, p, n);
        at += k;
    }
    o->done = al_harmony_done(h);
    REQUIRE(al_harmony_finish(h, &p, &n) == AL_OK);
    take(o, p, n);
    REQUIRE(al_harmony_done(h));
    al_harmony_destroy(h);
}

static void fuzz_harmony(const al_vocab *v, const char *text, size_t len) {
    parse_out whole = {0}, cut = {0};
    parse_steps(text, len, 0, &whole);
    parse_steps(text, len, 1 + (len ? (unsigned char)text[0] % 13 : 0), &cut);
    REQUIRE(whole.done == cut.done);
    for (int c = 0; c < 3; c++) {
        REQUIRE(whole.len[c] == cut.len[c]);
        REQUIRE(whole.len[c] == 0 || !memcmp(whole.text[c], cut.text[c], whole.len[c]));
        free(whole.text[c]);
        free(cut.text[c]);
    }
    if (!v) return;
    al_tokenize_params tp = {.add_special = false, .parse_special = true};
    int32_t *ids = NULL;
    int n_ids = 0;
    if (al_tokenize(v, text, len, &tp, &ids, &n_ids) != AL_OK) return;
    al_harmony *h = NULL;
    REQUIRE(al_harmony_create(v, &h) == AL_OK);
    parse_out tok = {0};
    const al_chat_piece *p;
    int n;
    for (int i = 0; i < n_ids; i++) {
        REQUIRE(al_harmony_push_token(h, ids[i], &p, &n) == AL_OK);
        take(&tok, p, n);
    }
    REQUIRE(al_harmony_finish(h, &p, &n) == AL_OK);
    take(&tok, p, n);
    for (int c = 0; c < 3; c++) free(tok.text[c]);
    al_harmony_destroy(h);
    al_free_tokens(ids);
}

static void fuzz_chat(const char *text) {
    static const char *const formats[] = {"chatml", "llama3", "llama2", "mistral", "gemma", "phi3",
                                          "harmony"};
    const char *name;
    if (al_chat_template_detect(text, &name) == AL_OK) REQUIRE(name != NULL);
    al_chat_message msgs[] = {{"system", text}, {"user", text}, {"assistant", text}, {"user", "hi"}};
    for (int f = 0; f < (int)(sizeof formats / sizeof *formats); f++) {
        for (int first = 0; first < 2; first++) { /* with and without the system message */
            char *out = NULL;
            REQUIRE(al_chat_render(formats[f], text, msgs + first, 4 - first, true, &out) == AL_OK);
            g_sink += strlen(out);
            al_string_free(out);
        }
    }
}

/* The text as a grammar, then its tokens through it, and the mask against the oracle. */
static void fuzz_grammar(al_vocab *v, const char *text, size_t len) {
    al_grammar *g = NULL;
    if (!v || al_grammar_create(v, text, &g) != AL_OK) return;
    al_tokenize_params tp = {0};
    int32_t *ids = NULL;
    int n = 0;
    if (al_tokenize(v, text, len, &tp, &ids, &n) == AL_OK)
        for (int i = 0; i < n && al_grammar_allows(g, ids[i]); i++)
            REQUIRE(al_grammar_accept(g, ids[i]) == AL_OK);
    al_free_tokens(ids);
    int nv = al_vocab_n_tokens(v);
    uint8_t *mask = malloc((size_t)nv);
    REQUIRE(mask);
    if (al_grammar_mask(g, mask) == AL_OK)
        for (int32_t id = 0; id < nv; id++) REQUIRE((mask[id] != 0) == al_grammar_allows(g, id));
    free(mask);
    g_sink += al_grammar_complete(g) + al_grammar_finished(g);
    al_grammar_destroy(g);
}

/* The events of a whole parse as one string: T<text> and C<name>(<arguments>) records. */
static void tc_record(srv_buf *b, const srv_tc_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == SRV_TC_TEXT) {
            srv_buf_add(b, ev[i].text, ev[i].len);
            continue;
        }
        json_t *args = json_loads(ev[i].arguments, JSON_ALLOW_NUL, NULL);
        REQUIRE(json_is_object(args));
        json_decref(args);
        srv_buf_printf(b, "\x01%s\x02%s\x03", ev[i].name, ev[i].arguments);
    }
}

static srv_tc *tc_new(int mode) {
    srv_tc *p = srv_tc_create(NULL);
    REQUIRE(p);
    if (mode == 1) srv_tc_bare(p);
    if (mode == 2) srv_tc_mistral(p);
    return p;
}

static void fuzz_toolcalls(const char *text, size_t len, int mode) {
    srv_buf whole = {0}, bytes = {0};
    const srv_tc_event *ev;
    int n;
    srv_tc *p = tc_new(mode);
    REQUIRE(srv_tc_push(p, text, len, &ev, &n));
    tc_record(&whole, ev, n);
    REQUIRE(srv_tc_finish(p, &ev, &n));
    tc_record(&whole, ev, n);
    srv_tc_destroy(p);
    p = tc_new(mode);
    for (size_t i = 0; i < len; i++) {
        REQUIRE(srv_tc_push(p, text + i, 1, &ev, &n));
        tc_record(&bytes, ev, n);
    }
    REQUIRE(srv_tc_finish(p, &ev, &n));
    tc_record(&bytes, ev, n);
    srv_tc_destroy(p);
    REQUIRE(whole.len == bytes.len && (whole.len == 0 || !memcmp(whole.s, bytes.s, whole.len)));
    srv_buf_free(&whole);
    srv_buf_free(&bytes);
}

/* A Harmony reply fed to al_harmony in pieces of `step` bytes, each call's pieces to the
 * tool-call parser in Harmony mode: the events as one string. */
static void harmony_calls(const char *text, size_t len, size_t step, srv_buf *out) {
    al_harmony *h = NULL;
    srv_tc *p = srv_tc_create(NULL);
    REQUIRE(p && al_harmony_create(NULL, &h) == AL_OK);
    srv_tc_harmony(p);
    const al_chat_piece *pc;
    const srv_tc_event *ev;
    int n, n_ev;
    for (size_t at = 0; at < len; at += step) {
        REQUIRE(al_harmony_push(h, text + at, len - at < step ? len - at : step, &pc, &n) == AL_OK);
        REQUIRE(srv_tc_pieces(p, pc, n, &ev, &n_ev));
        tc_record(out, ev, n_ev);
    }
    REQUIRE(al_harmony_finish(h, &pc, &n) == AL_OK);
    REQUIRE(srv_tc_pieces(p, pc, n, &ev, &n_ev));
    tc_record(out, ev, n_ev);
    REQUIRE(srv_tc_finish(p, &ev, &n_ev));
    tc_record(out, ev, n_ev);
    srv_tc_destroy(p);
    al_harmony_destroy(h);
}

static void fuzz_harmony_calls(const char *text, size_t len) {
    srv_buf whole = {0}, bytes = {0};
    harmony_calls(text, len, len ? len : 1, &whole);
    harmony_calls(text, len, 1, &bytes);
    REQUIRE(whole.len == bytes.len && (whole.len == 0 || !memcmp(whole.s, bytes.s, whole.len)));
    srv_buf_free(&whole);
    srv_buf_free(&bytes);
}

/* The text as the tools and as the calls of a conversation: rendered or refused. */
static void fuzz_chat_tools(const char *text) {
    static const char *const formats[] = {"mistral", "harmony"};
    const al_chat_turn t[] = {{.role = "user", .content = text},
                              {.role = "assistant", .content = text, .tool_calls = text},
                              {.role = "tool", .content = text, .name = "f"}};
    for (int f = 0; f < 2; f++) {
        for (int as_tools = 0; as_tools < 2; as_tools++) {
            al_chat_params p = {.add_generation_prompt = true, .tools = as_tools ? text : NULL};
            char *out = NULL;
            al_status st = al_chat_render_turns(formats[f], NULL, t, as_tools ? 1 : 3, &p, &out);
            REQUIRE(st == AL_OK ? out != NULL : st == AL_ERR_ARG && out == NULL);
            if (out) g_sink += strlen(out);
            al_string_free(out);
        }
    }
}

static void fuzz_schema(al_vocab *v, const char *text, size_t len) {
    json_t *s = json_loadb(text, len, JSON_DECODE_ANY, NULL);
    if (!s) return;
    srv_gram g = {0};
    if (srv_gram_schema(&g, s, "root") && v) {
        al_grammar *gr = NULL;
        if (al_grammar_create(v, g.text.s, &gr) != AL_OK)
            REQUIRE(strstr(al_last_error(), "too large") != NULL); /* only size may refuse it */
        al_grammar_destroy(gr);
    }
    srv_gram_free(&g);
    json_decref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    char *text = malloc(size); /* the text after the selector byte, NUL-terminated */
    REQUIRE(text);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    int which = data[0] % g_n_vocab;
    if (g_vocab[which]) fuzz_tokenizer(g_vocab[which], which == BPE_VOCAB, text, size - 1);
    fuzz_chat(text);
    fuzz_harmony(g_vocab[which], text, size - 1);
    fuzz_grammar(g_vocab[which], text, size - 1);
    for (int mode = 0; mode < 3; mode++) fuzz_toolcalls(text, size - 1, mode);
    fuzz_harmony_calls(text, size - 1);
    fuzz_chat_tools(text);
    fuzz_schema(g_vocab[which], text, size - 1);
    free(text);
    return 0;
}
