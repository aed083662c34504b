/* anyllm.c: the command-line front end: option parsing and dispatch.
 *
 *   anyllm info       -m FILE
 *   anyllm logits     -m FILE --tokens 1,2,3 --out OUT.f32
 *   anyllm tokenize   -m FILE (-p TEXT | -f FILE) [--bos] [--special]
 *   anyllm run        -m FILE -p TEXT [-n N] [sampling options]
 *   anyllm chat       -m FILE [-s SYSTEM] [--chat-template NAME] [--show-reasoning] [sampling]
 *   anyllm perplexity -m FILE -f TEXT [--ctx N] [--chunks N]
 *   anyllm bench      -m FILE [-m FILE ...] [-p 512] [-n 128] [-r 5] [-t 2] [-o md|json|csv]
 *   anyllm devices    [--bandwidth]
 *   anyllm serve      -m FILE [--host H] [--port P] [--parallel N] [--api-key K] (HTTP server)
 *   anyllm quantize   IN.gguf OUT.gguf TYPE [-t N] [--pure]
 *   anyllm gen-model  OUT.gguf --arch A --dim D ... --type TYPE (random weights, benchmarks)
 *
 * Every error ends the program with a non-zero status and one line on stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cmd_quantize.h"

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "anyllm: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

int cli_fail_status(al_status st) {
    return cli_fail("%s: %s", al_status_str(st), al_last_error());
}

char *cli_read_file(const char *path, size_t *len) {
    bool in = !strcmp(path, "-");
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) {
        cli_fail("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *bigger = cap < ((size_t)1 << 30) ? realloc(buf, cap *= 2) : NULL;
        if (!bigger) {
            free(buf);
            buf = NULL;
        }
        buf = bigger;
    }
    int err = ferror(f);
    if (!in) fclose(f);
    if (!buf || err) {
        free(buf);
        cli_fail("cannot read %s%s", path, buf ? "" : ": out of memory or over 1 GiB");
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cli_check_ctx(const cli_opts *o, const al_model *m) {
    al_model_info mi;
    al_model_get_info(m, &mi);
    /* positions past the training context give garbage, and a huge --ctx would only
     * ask for a KV cache the machine cannot hold */
    if (o->n_ctx > mi.n_ctx_train)
        return cli_fail("%s: --ctx %d is more than the model's training context of %d (%s)",
                        o->command, o->n_ctx, mi.n_ctx_train, o->model);
    return 0;
}

int cli_load(const cli_opts *o, int n_ctx, al_model **m, al_context **c) {
    *m = NULL;
    *c = NULL;
    al_model_params mp = al_model_default_params();
    mp.n_threads = o->n_threads;
    mp.backend = o->backend;
    al_status st = al_model_load(o->model, &mp, m);
    if (st != AL_OK) return cli_fail_status(st);
    if (cli_check_ctx(o, *m)) {
        al_model_destroy(*m);
        *m = NULL;
        return 1;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    if ((st = al_context_create(*m, &cp, c)) != AL_OK) {
        al_model_destroy(*m);
        *m = NULL;
        return cli_fail_status(st);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: anyllm COMMAND -m MODEL.gguf [options]\n"
        "commands:\n"
        "  info         metadata, tensors, parameter count, memory needed\n"
        "  logits       --tokens 1,2,3 --out OUT.f32: float32 [n_tokens][n_vocab], one batch\n"
        "  tokenize     -p TEXT | -f FILE [--bos] [--special]: token ids on one line\n"
        "  run          -p TEXT | -f FILE [-n N]: continue the text, streamed\n"
        "  chat         interactive chat in the model's template (stdin may be a pipe)\n"
        "  perplexity   -f TEXT [--ctx N] [--chunks N]: teacher-forced perplexity\n"
        "  bench        [-m FILE ...] [-p 512] [-n 128] [-r 5] [-t 2] [-o md|json|csv]: speed\n"
        "  devices      [--bandwidth]: the Vulkan devices (for --backend vulkan:N)\n"
        "  serve        [--host H] [--port P] [--parallel N] [--api-key K]: OpenAI-compatible server (--help)\n"
        "  quantize     IN.gguf OUT.gguf TYPE [-t N] [--pure]: as llama-quantize (--help)\n"
        "  gen-model    OUT.gguf --arch ... --type TYPE: random weights, benchmarks only (--help)\n"
        "options:\n"
        "  -t N               threads (default: all cores)\n"
        "  --backend B        cpu (default), cpu:q8, cpu:q8x2, vulkan, vulkan:N or auto\n"
        "  -c, --ctx N        context size\n"
        "  -n N               tokens to generate (run: 128; chat: 512 per reply)\n"
        "  --temp T           temperature (0 = greedy; default 0.8)\n"
        "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --seed S\n"
        "  --frequency-penalty F, --presence-penalty P\n"
        "  -s, --system TEXT  system prompt (chat)\n"
        "  --chat-template NAME   chatml, llama3, llama2, mistral, gemma, phi3, harmony\n"
        "  --show-reasoning   chat: print a Harmony (gpt-oss) reply's reasoning too, each\n"
        "                     channel marked ([analysis] ..., [final] ...)\n"
        "  --no-context-shift chat: exit when the conversation outgrows the context, instead\n"
        "                     of dropping its oldest turns\n");
}

/* ---- option parsing ------------------------------------------------------------------ */

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Options that take a number: name, field, range. */
typedef struct num_opt {
    const char *name, *alt;
    int *i;
    float *f;
    double lo, hi;
} num_opt;

static int parse_opts(int argc, char **argv, cli_opts *o) {
    *o = (cli_opts){.command = argv[1], .sampling = al_sampler_default_params()};
    int64_t seed = 0;
    const num_opt nums[] = {
        {"-t", "--threads", &o->n_threads, NULL, 1, 256},
        {"-n", "--n-predict", &o->n_predict, NULL, -1, 1 << 24},
        {"-c", "--ctx", &o->n_ctx, NULL, 1, 1 << 24},
        {"--chunks", NULL, &o->n_chunks, NULL, 1, 1 << 24},
        {"--top-k", NULL, &o->sampling.top_k, NULL, 0, 1 << 24},
        {"--penalty-last-n", NULL, &o->sampling.penalty_last_n, NULL, 0, 1 << 20},
        {"--temp", NULL, NULL, &o->sampling.temperature, 0, 100},
        {"--top-p", NULL, NULL, &o->sampling.top_p, 1e-6, 1},
        {"--min-p", NULL, NULL, &o->sampling.min_p, 0, 1},
        {"--repeat-penalty", NULL, NULL, &o->sampling.repeat_penalty, 1e-3, 10},
        {"--frequency-penalty", NULL, NULL, &o->sampling.frequency_penalty, -10, 10},
        {"--presence-penalty", NULL, NULL, &o->sampling.presence_penalty, -10, 10},
    };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout), -1;
        if (!strcmp(a, "--bos")) { o->bos = true; continue; }
        if (!strcmp(a, "--special")) { o->special = true; continue; }
        if (!strcmp(a, "--show-reasoning")) { o->show_reasoning = true; continue; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = true; continue; }
        if (!strcmp(a, "--no-context-shift")) { o->no_context_shift = true; continue; }
        const char *val = i + 1 < argc ? argv[++i] : NULL;
        if (!val) return cli_fail("option %s needs a value", a);
        const num_opt *n = NULL;
        for (size_t k = 0; k < sizeof nums / sizeof *nums; k++)
            if (!strcmp(a, nums[k].name) || (nums[k].alt && !strcmp(a, nums[k].alt))) n = &nums[k];
        int64_t lv;
        if (n && n->i) {
            if (!cli_parse_i64(val, (int64_t)n->lo, (int64_t)n->hi, &lv))
                return cli_fail("%s %s: expected an integer in [%.0f, %.0f]", a, val, n->lo, n->hi);
            *n->i = (int)lv;
            if (n->i == &o->n_predict) o->n_predict_set = true;
        } else if (n) {
            if (!parse_float(val, (float)n->lo, (float)n->hi, n->f))
                return cli_fail("%s %s: expected a number in [%g, %g]", a, val, n->lo, n->hi);
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = val;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = val;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->prompt_file = val;
        else if (!strcmp(a, "--tokens")) o->tokens = val;
        else if (!strcmp(a, "--out") || !strcmp(a, "-o")) o->out = val;
        else if (!strcmp(a, "--chat-template")) o->chat_template = val;
        else if (!strcmp(a, "-s") || !strcmp(a, "--system")) o->system = val;
        else if (!strcmp(a, "--backend")) o->backend = val;
        else if (!strcmp(a, "--seed")) {
            if (!cli_parse_i64(val, 0, 0x7fffffffL, &seed))
                return cli_fail("--seed %s: expected an integer in [0, 2147483647]", val);
            o->sampling.seed = (uint64_t)seed;
            o->seed_set = true;
        } else return cli_fail("unknown option %s (see anyllm --help)", a);
    }
    if (!o->model) return cli_fail("%s: -m FILE is required", o->command);
    if (!o->n_predict_set) o->n_predict = strcmp(o->command, "chat") ? 128 : 512;
    if (!o->seed_set) o->sampling.seed = (uint64_t)time(NULL);
    return 0;
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(const cli_opts *);
    } commands[] = {
        {"info", cmd_info}, {"logits", cmd_logits}, {"tokenize", cmd_tokenize},
        {"run", cmd_run}, {"chat", cmd_chat}, {"perplexity", cmd_perplexity},
    };
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gen-model")) return cmd_gen_model(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        cli_opts o;
        int rc = parse_opts(argc, argv, &o);
        if (rc) return rc < 0 ? 0 : rc;
        return commands[i].fn(&o);
    }
    return cli_fail("unknown command '%s' (see anyllm --help)", argv[1]);
}
