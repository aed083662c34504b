/* options.c: the options of the commands that share cli_opts (info, logits, tokenize,
 * run, chat, perplexity), in one table: names, the commands each applies to, range,
 * help and default. The parser and `COMMAND --help` both read it, so an option has one
 * name everywhere, help always shows the defaults in force, and an option a command
 * does not use is refused rather than silently ignored.
 *
 * Names follow llama.cpp where the meaning is the same (-s is the seed, -sys the system
 * prompt, -c the context, -n -1 "until the end"), so its users' habits work here.
 */
#include "options.h"
#include "spec.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    C_INFO = 1, C_LOGITS = 2, C_TOKENIZE = 4, C_RUN = 8, C_CHAT = 16, C_PPL = 32,
    C_MODEL = C_INFO | C_LOGITS | C_RUN | C_CHAT | C_PPL, /* those that load weights */
    C_GEN = C_RUN | C_CHAT,
};

typedef enum { K_INT, K_FLOAT, K_STR, K_FLAG, K_SEED, K_KV } opt_kind;

typedef struct opt_spec {
    const char *names; /* "-s, --seed": every spelling, the first is shown first */
    const char *arg;   /* the value's name in help; NULL for a flag */
    unsigned cmds;
    opt_kind kind;
    size_t off;        /* offsetof(cli_opts, field) */
    double lo, hi;
    const char *help;
    const char *def;   /* the default, when it is not simply the field's initial value */
} opt_spec;

#define F(field) offsetof(cli_opts, field)
static const opt_spec specs[] = {
    {"-m, --model", "FILE", ~0u, K_STR, F(model), 0, 0, "the GGUF model file", "required"},
    {"-p, --prompt", "TEXT", C_TOKENIZE | C_RUN, K_STR, F(prompt), 0, 0, "the text", "-"},
    {"-f, --file", "FILE", C_TOKENIZE | C_RUN | C_PPL, K_STR, F(prompt_file), 0, 0,
     "read the text from FILE (- is stdin)", "-"},
    {"-t, --threads", "N", C_MODEL, K_INT, F(n_threads), 1, 256, "CPU threads", "all cores"},
    {"--backend", "B", C_MODEL, K_STR, F(backend), 0, 0,
     "cpu, cpu:precise, vulkan, vulkan:N or auto (run, chat: the fastest per phase by the "
     "device profile of `anyllm bench --save-profile`; else the first GPU, else the CPU)",
     "cpu"},
    {"--prefill-backend", "B", C_GEN, K_STR, F(prefill_backend), 0, 0,
     "evaluate the prompt on B (as --backend) and hand the KV cache to the decode backend",
     "--backend's, or auto's choice"},
    {"--decode-backend", "B", C_GEN, K_STR, F(decode_backend), 0, 0,
     "generate the tokens on B (as --backend), after the prompt on the prefill backend",
     "--backend's, or auto's choice"},
    {"--precise", NULL, C_MODEL, K_FLAG, F(precise), 0, 0,
     "the CPU rounds activations to ~15 bits, not 8 (cpu:precise): closer to the "
     "reference, slower", "off"},
    {"--no-repack", NULL, C_MODEL, K_FLAG, F(no_repack), 0, 0,
     "the CPU reads the weights in place instead of moving them into its faster layout at "
     "load (ANYLLM_X16=0): a quicker load, a slower decode", "off"},
    {"-ngl, --n-gpu-layers", "N", C_MODEL, K_INT, F(ngl), 0, 1 << 20,
     "llama.cpp's flag: N > 0 runs every layer on the GPU (--backend vulkan), 0 on the CPU",
     "-"},
    {"-c, --ctx-size, --ctx", "N", C_RUN | C_CHAT | C_PPL, K_INT, F(n_ctx), 1, 1 << 24,
     "context positions; at most the model's training context", NULL},
    {"-n, --n-predict", "N", C_GEN, K_INT, F(n_predict), -1, 1 << 24,
     "tokens to generate (per reply in chat); -1: until the end or a full context", NULL},
    {"--ignore-eos", NULL, C_GEN, K_FLAG, F(ignore_eos), 0, 0,
     "never end at an end-of-generation token", "off"},
    {"--temp", "T", C_GEN, K_FLOAT, F(sampling.temperature), 0, 100,
     "temperature; 0 is greedy", NULL},
    {"--top-k", "K", C_GEN, K_INT, F(sampling.top_k), 0, 1 << 24,
     "keep the K most likely tokens; 0: all", NULL},
    {"--top-p", "P", C_GEN, K_FLOAT, F(sampling.top_p), 1e-6, 1,
     "keep the smallest set with probability mass >= P", NULL},
    {"--min-p", "P", C_GEN, K_FLOAT, F(sampling.min_p), 0, 1,
     "drop tokens less likely than P times the best", NULL},
    {"--repeat-penalty", "R", C_GEN, K_FLOAT, F(sampling.repeat_penalty), 1e-3, 10,
     "penalise recent tokens; 1: off", NULL},
    {"--frequency-penalty", "F", C_GEN, K_FLOAT, F(sampling.frequency_penalty), -10, 10,
     "minus F times a recent token's count", NULL},
    {"--presence-penalty", "P", C_GEN, K_FLOAT, F(sampling.presence_penalty), -10, 10,
     "minus P for a token seen recently", NULL},
    {"--penalty-last-n", "N", C_GEN, K_INT, F(sampling.penalty_last_n), 0, 1 << 20,
     "how many recent tokens the penalties see", NULL},
    {"-s, --seed", "S", C_GEN, K_SEED, F(sampling.seed), 0, 0x7fffffff,
     "random seed; the same seed and input give the same text", "random; run prints it"},
    {"-sys, --system-prompt, --system", "TEXT", C_CHAT, K_STR, F(system), 0, 0,
     "the system prompt", "none"},
    {"--chat-template", "NAME", C_CHAT, K_STR, F(chat_template), 0, 0,
     "chatml, llama3, llama2, mistral, gemma, gemma4, phi3, harmony, glm45 or glm47",
     "the file's"},
    {"--show-reasoning", NULL, C_CHAT, K_FLAG, F(show_reasoning), 0, 0,
     "print a Harmony (gpt-oss) reply's reasoning too, each channel marked", "off"},
    {"--no-context-shift", NULL, C_CHAT, K_FLAG, F(no_context_shift), 0, 0,
     "end the chat when the conversation outgrows the context, instead of dropping its "
     "oldest turns", "off"},
    {"--ctx-checkpoints", "N", C_CHAT, K_INT, F(ctx_checkpoints), -1, 64,
     "a model with a recurrent state (qwen35...): checkpoints of it kept, where a turn "
     "goes back to when the next one shares its start; -1: none", "4"},
    {"--spec", "KIND", C_GEN, K_STR, F(spec), 0, 0,
     "speculative decoding: 'ngram' drafts the continuation of the latest earlier "
     "occurrence of the last tokens (prompt and output), 'draft' a draft model "
     "(--model-draft), 'mtp' the file's next-token-prediction block (Qwen3.5 / 3.6); the "
     "model checks a draft in one evaluation; the same tokens as "
     "without", "none; draft with --model-draft"},
    {"--draft-max", "N", C_GEN, K_INT, F(draft_max), 1, SPEC_DRAFT_LIMIT,
     "the longest draft (--spec)", "8"},
    {"-md, --model-draft", "FILE", C_GEN, K_STR, F(model_draft), 0, 0,
     "speculative decoding with a draft model of the same vocabulary (--spec draft): it "
     "continues the text greedily and the model checks its tokens in one evaluation", "none"},
    {"-ctk, --cache-type-k", "TYPE", C_MODEL, K_KV, F(cache_type_k), 0, 0,
     "the KV cache's keys: f32, f16 (half the memory), q8_0 (about a quarter) or q4_0 "
     "(about an eighth); the CPU backend reads them all", "f32"},
    {"-ctv, --cache-type-v", "TYPE", C_MODEL, K_KV, F(cache_type_v), 0, 0,
     "the KV cache's values, as --cache-type-k", "f32"},
    {"--kv-unrotated", NULL, C_MODEL, K_FLAG, F(kv_unrotated), 0, 0,
     "store q8_0 and q4_0 caches without the Hadamard rotation of each head (which "
     "spreads outliers before rounding), to measure what it gives", "off"},
    {"--mla-expand", "N", C_MODEL, K_INT, F(mla_expand), -1, 1 << 24,
     "latent attention (deepseek2): batches of at least N tokens attend over each head's "
     "keys and values made from the cached rows, shorter ones over the rows themselves; "
     "-1: never", "192"},
    {"--tokens", "IDS", C_LOGITS, K_STR, F(tokens), 0, 0, "token ids: 1,2,3", "required"},
    {"-o, --out", "FILE", C_LOGITS, K_STR, F(out), 0, 0,
     "where float32 [n_tokens][n_vocab] logits go", "required"},
    {"--bos", NULL, C_TOKENIZE, K_FLAG, F(bos), 0, 0, "add the BOS token as the model does",
     "off"},
    {"--special", NULL, C_TOKENIZE | C_RUN, K_FLAG, F(special), 0, 0,
     "recognise special tokens written in the text", "off"},
    {"--chunks", "N", C_PPL, K_INT, F(n_chunks), 1, 1 << 24, "score at most N windows", "all"},
    {"--kl-divergence-base", "FILE", C_PPL, K_STR, F(kld_base), 0, 0,
     "write each scored position's top 64 log-probabilities to FILE, the reference for "
     "--kl-divergence", "-"},
    {"--kl-divergence", "FILE", C_PPL, K_STR, F(kld), 0, 0,
     "compare with the reference in FILE (same text, -c and --chunks): mean and 99th "
     "percentile KL divergence, same top token %, perplexity ratio", "-"},
};
#undef F

static const struct {
    const char *name, *usage, *what;
    unsigned bit;
} commands[] = {
    {"info", "-m FILE", "metadata, tensors, parameter count, memory needed, features", C_INFO},
    {"logits", "-m FILE --tokens 1,2,3 -o OUT.f32",
     "evaluate the ids as one batch and write their logits", C_LOGITS},
    {"tokenize", "-m FILE (-p TEXT | -f FILE)", "token ids on one line", C_TOKENIZE},
    {"run", "-m FILE (-p TEXT | -f FILE)", "continue the text, streamed", C_RUN},
    {"chat", "-m FILE", "a conversation in the model's chat template", C_CHAT},
    {"perplexity", "-m FILE -f TEXT", "teacher-forced perplexity over windows", C_PPL},
};

static int command_index(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(commands[i].name, name)) return (int)i;
    return -1;
}

bool cli_has_opts(const char *command) { return command_index(command) >= 0; }

/* Does spelling `a` name spec s? names is "-x, --long, --alias". */
static bool spec_named(const opt_spec *s, const char *a) {
    size_t n = strlen(a);
    for (const char *p = s->names; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, a, n)) return true;
        if (!end) break;
        p = end + 2;
    }
    return false;
}

static const opt_spec *find_spec(const char *a) {
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
        if (spec_named(&specs[i], a)) return &specs[i];
    return NULL;
}

/* The defaults of a command before any option: sampling from the library, the token
 * counts and context of each command. */
static void set_defaults(cli_opts *o, const char *command) {
    *o = (cli_opts){.command = command, .sampling = al_sampler_default_params(), .ngl = -1};
    o->n_predict = strcmp(command, "chat") ? 128 : 512;
}

static const char *ctx_default(const char *command) {
    if (!strcmp(command, "perplexity")) return "512";
    const char *def = "the training context, less if its KV cache would take over half "
                      "the free memory (GPU: at most 4096)";
    return strcmp(command, "run") ? def : "the prompt plus -n; with -n -1, as chat";
}

static bool parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Stores one option's value; 0 or an exit status (message printed). */
static int set_value(cli_opts *o, const opt_spec *s, const char *a, const char *val) {
    char *base = (char *)o;
    int64_t lv;
    switch (s->kind) {
    case K_FLAG: *(bool *)(base + s->off) = true; return 0;
    case K_STR: *(const char **)(base + s->off) = val; return 0;
    case K_KV:
        if (al_kv_type_parse(val, (al_kv_type *)(base + s->off)) != AL_OK)
            return cli_fail("%s %s: %s", a, val, al_last_error());
        return 0;
    case K_FLOAT:
        if (!parse_float(val, s->lo, s->hi, (float *)(base + s->off)))
            return cli_fail("%s %s: expected a number in [%g, %g]", a, val, s->lo, s->hi);
        return 0;
    default: break;
    }
    if (!cli_parse_i64(val, (int64_t)s->lo, (int64_t)s->hi, &lv))
        return cli_fail("%s %s: expected an integer in [%.0f, %.0f]", a, val, s->lo, s->hi);
    if (s->kind == K_SEED) {
        o->sampling.seed = (uint64_t)lv;
        o->seed_set = true;
    } else {
        *(int *)(base + s->off) = (int)lv;
    }
    return 0;
}

/* A seed that differs from run to run, and even within one second. */
static uint64_t fresh_seed(void) {
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&s, sizeof s, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    if (f) fclose(f);
    return s & 0x7fffffff; /* so that --seed can give it back */
}

int cli_parse(int argc, char **argv, cli_opts *o) {
    const char *cmd = argv[1];
    int ci = command_index(cmd);
    set_defaults(o, cmd);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return cli_help(cmd), -1;
        const opt_spec *s = find_spec(a);
        if (!s) {
            if (a[0] != '-' || !a[1])
                return cli_fail("%s: unexpected argument '%s' (options take a name: "
                                "see anyllm %s --help)", cmd, a, cmd);
            return cli_fail("%s: unknown option %s (see anyllm %s --help)", cmd, a, cmd);
        }
        if (!(s->cmds & commands[ci].bit))
            return cli_fail("%s: option %s does not apply to %s (see anyllm %s --help)", cmd,
                            a, cmd, cmd);
        const char *val = NULL;
        if (s->arg) {
            if (i + 1 >= argc) return cli_fail("%s: option %s needs a value (%s)", cmd, a, s->arg);
            val = argv[++i];
        }
        int rc = set_value(o, s, a, val);
        if (rc) return rc;
    }
    if (!o->model) return cli_fail("%s: -m FILE is required", cmd);
    int rc = cli_resolve_backend(cmd, &o->backend, o->ngl, o->precise);
    if (rc) return rc;
    if (o->no_repack) cli_no_repack();
    if (!o->seed_set) o->sampling.seed = fresh_seed();
    return 0;
}

/* ---- help ---------------------------------------------------------------------------- */

/* The default of spec s for command cmd, as help shows it. */
static void default_text(const opt_spec *s, const char *cmd, char *buf, size_t size) {
    cli_opts d;
    set_defaults(&d, cmd);
    const char *base = (const char *)&d;
    if (s->off == offsetof(cli_opts, n_ctx)) snprintf(buf, size, "%s", ctx_default(cmd));
    else if (s->def) snprintf(buf, size, "%s", s->def);
    else if (s->kind == K_INT) snprintf(buf, size, "%d", *(const int *)(base + s->off));
    else if (s->kind == K_FLOAT) snprintf(buf, size, "%g", *(const float *)(base + s->off));
    else snprintf(buf, size, "-");
}

/* Prints text from column 31 on, wrapped before column 80. */
static void print_wrapped(const char *text, int col) {
    const int indent = 31, width = 80;
    while (*text) {
        int room = width - col, n = (int)strlen(text);
        if (n > room) { /* break at the last space that fits */
            n = room;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = (int)strcspn(text, " ");
        }
        printf("%.*s", n, text);
        text += n;
        while (*text == ' ') text++;
        if (*text) printf("\n%*s", indent, "");
        col = indent;
    }
    printf("\n");
}

void cli_help(const char *cmd) {
    int ci = command_index(cmd);
    printf("usage: anyllm %s %s [options]\n%c%s.\noptions (default in brackets):\n", cmd,
           commands[ci].usage, commands[ci].what[0] - 'a' + 'A', commands[ci].what + 1);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        const opt_spec *s = &specs[i];
        if (!(s->cmds & commands[ci].bit)) continue;
        char left[64], def[128], text[384];
        int n = snprintf(left, sizeof left, "  %s%s%s", s->names, s->arg ? " " : "",
                         s->arg ? s->arg : "");
        default_text(s, cmd, def, sizeof def);
        snprintf(text, sizeof text, "%s%s%s%s", s->help, strcmp(def, "-") ? " [" : "",
                 strcmp(def, "-") ? def : "", strcmp(def, "-") ? "]" : "");
        if (n > 30) printf("%s\n%31s", left, "");
        else printf("%-31s", left);
        print_wrapped(text, 31);
    }
    printf("%-31s%s\n", "  -h, --help", "this help");
}

void cli_list_commands(FILE *f) {
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-12s %s %s: %s\n", commands[i].name, commands[i].name, commands[i].usage,
                commands[i].what);
}
