/* anyllm.c: the command-line front end: dispatch, help, --version, and what the
 * commands share (errors, reading files, loading a model and a context). Each
 * command's options are in options.c (or its own parser: bench, serve, quantize,
 * gen-model, devices); `anyllm help COMMAND` prints them with their defaults.
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
#include "options.h"
#include "progress.h"

#ifndef AL_BUILD
#define AL_BUILD "unknown"
#endif

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
    char buf[1024];
    return cli_fail("%s: %s", al_status_str(st),
                    cli_settings_message(al_last_error(), buf, sizeof buf));
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
        return cli_fail("%s: -c %d is more than the model's training context of %d (%s)",
                        o->command, o->n_ctx, mi.n_ctx_train, o->model);
    return 0;
}

static void load_progress(void *user, double done) {
    progress_update(user, (long)(done * 100 + 0.5));
}

al_status cli_model_load(const cli_opts *o, al_model **m) {
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    mp.n_threads = o->n_threads;
    mp.backend = o->backend;
    mp.mla_absorbed = o->mla_expand < 0;
    progress pr;
    progress_start(&pr, "loading", "%", 100);
    mp.progress = load_progress;
    mp.progress_user = &pr;
    al_status st = al_model_load(o->model, &mp, m);
    progress_end(&pr);
    return st;
}

int cli_load(const cli_opts *o, int n_ctx, al_model **m, al_context **c) {
    *m = NULL;
    *c = NULL;
    al_status st = cli_model_load(o, m);
    if (st != AL_OK) return cli_fail_status(st);
    if (cli_check_ctx(o, *m)) {
        al_model_destroy(*m);
        *m = NULL;
        return 1;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    cli_kv_params(o, &cp);
    if ((st = al_context_create(*m, &cp, c)) != AL_OK) {
        al_model_destroy(*m);
        *m = NULL;
        return cli_fail_status(st);
    }
    return 0;
}

int cli_resolve_backend(const char *command, const char **backend, int ngl, bool precise) {
    const char *b = *backend; /* --backend as given, or NULL */
    if (ngl >= 0 && b) return cli_fail("%s: give one of --backend and -ngl", command);
    if (precise && ngl > 0)
        return cli_fail("%s: --precise is for the CPU backend, not -ngl %d (the GPU)", command, ngl);
    if (precise && b && strcmp(b, "cpu") && strcmp(b, "cpu:precise") && strcmp(b, "cpu:q8x2"))
        return cli_fail("%s: --precise is for the CPU backend, not --backend %s", command, b);
    if (ngl >= 0) *backend = ngl > 0 ? "vulkan" : "cpu";
    if (precise) *backend = "cpu:precise";
    if (ngl >= 0)
        fprintf(stderr, "anyllm: -ngl %d: anyllm runs all layers or none on the GPU; this is "
                        "--backend %s\n", ngl, *backend);
    return 0;
}

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static void usage(FILE *f) {
    fprintf(f, "usage: anyllm COMMAND [options]   (anyllm help COMMAND: its options and defaults)\n"
               "commands:\n");
    cli_list_commands(f);
    fprintf(f,
        "  bench        bench -m FILE [-m FILE ...]: prefill and decode speed per backend\n"
        "  devices      devices [--bandwidth]: the Vulkan devices (for --backend vulkan:N)\n"
        "  serve        serve -m FILE: an OpenAI-compatible HTTP server\n"
        "  profile      profile -m FILE: the device profile bench --save-profile saved\n"
        "  quantize     quantize IN.gguf OUT.gguf TYPE: as llama-quantize\n"
        "  gen-model    gen-model OUT.gguf --arch A ...: random weights, benchmarks only\n"
        "  help         help [COMMAND]: this list, or a command's options\n"
        "  --version    the version, the build and the backends compiled in\n");
}

/* The commands that parse their own options (bench takes several -m, serve has its
 * own set, quantize and gen-model take positional files). */
static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} own_parsers[] = {
    {"bench", cmd_bench},       {"devices", cmd_devices},     {"serve", cmd_serve},
    {"quantize", cmd_quantize}, {"gen-model", cmd_gen_model},
    {"profile", cmd_profile},
};

static int help(int argc, char **argv) {
    if (argc < 3) return usage(stdout), 0;
    if (cli_has_opts(argv[2])) return cli_help(argv[2]), 0;
    for (size_t i = 0; i < sizeof own_parsers / sizeof *own_parsers; i++)
        if (!strcmp(argv[2], own_parsers[i].name)) {
            char *args[] = {argv[2], "--help", NULL};
            return own_parsers[i].fn(2, args);
        }
    return cli_fail("help: unknown command '%s' (anyllm help lists them)", argv[2]);
}

static int version(void) {
    printf("anyllm %s (build %s)\nbackends: %s\n", al_version(), AL_BUILD, al_backends());
    return 0;
}

/* The library's notes go to stderr, as the CLI's own do. */
static void log_to_stderr(void *user, al_log_level level, const char *line) {
    (void)user;
    (void)level;
    char buf[1024];
    fprintf(stderr, "anyllm: %s\n", cli_settings_message(line, buf, sizeof buf));
}

int main(int argc, char **argv) {
    al_set_log(log_to_stderr, NULL);
    if (cli_settings_instance()) return 1;
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
    if (!strcmp(argv[1], "help")) return help(argc, argv);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) return version();
    for (size_t i = 0; i < sizeof own_parsers / sizeof *own_parsers; i++)
        if (!strcmp(argv[1], own_parsers[i].name)) return own_parsers[i].fn(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        cli_opts o;
        int rc = cli_parse(argc, argv, &o);
        if (rc) return rc < 0 ? 0 : rc;
        return commands[i].fn(&o);
    }
    return cli_fail("unknown command '%s' (anyllm help lists them)", argv[1]);
}
