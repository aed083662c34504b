/* cmd_serve.c: `anyllm serve`, the OpenAI-compatible HTTP server (src/server/).
 *
 *   anyllm serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel 4] [--ctx-size 1024]
 *                [--queue N] [--api-key KEY] [--timeout 10] [--max-tokens 512]
 *                [--chat-template NAME] [--backend cpu|vulkan[:N]|auto] [-t N] [-v]
 *
 * Loads the model, starts the server and waits for SIGINT or SIGTERM, then stops it:
 * requests in flight end with an error, every thread is joined, memory is freed.
 * The signals are blocked before any thread starts, so that they reach sigwait here.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server/server.h"

static void serve_usage(FILE *f) {
    fprintf(f,
        "usage: anyllm serve -m MODEL.gguf [options]\n"
        "An OpenAI-compatible server: POST /v1/chat/completions, POST /v1/completions,\n"
        "GET /v1/models, /health, /metrics, and a chat page at /.\n"
        "  --host ADDR        address to bind (default 127.0.0.1: this machine only)\n"
        "  --port N           TCP port (default 8080; 0 picks a free one)\n"
        "  --parallel N       sequences decoded together (default 4)\n"
        "  -c, --ctx-size N   positions per sequence (default 1024, at most the model's)\n"
        "  --queue N          requests that may wait for a sequence (default 2*parallel+32)\n"
        "  --api-key KEY      require 'Authorization: Bearer KEY' on every route but /health\n"
        "                     (or set ANYLLM_API_KEY)\n"
        "  --timeout S        drop a connection idle for S seconds while sending (default 10)\n"
        "  --max-tokens N     tokens generated when a request gives no max_tokens (default 512)\n"
        "  --chat-template NAME   chatml, llama3, llama2, mistral, gemma, phi3\n"
        "  --backend NAME     cpu (default), vulkan, vulkan:N or auto, as the library offers\n"
        "  -t N               threads (default: all cores)\n"
        "  -v, --verbose      one line per request on stderr\n");
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    int64_t v;
    if (!cli_parse_i64(s, lo, hi, &v)) return false;
    *out = (int)v;
    return true;
}

typedef struct serve_opts {
    const char *model, *backend;
    int n_threads;
    bool queue_set, ctx_set;
    srv_params p;
} serve_opts;

/* Fills o from argv; 0 on success, -1 for --help, else an exit status (message printed). */
static int parse_serve(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.p = srv_default_params()};
    int timeout = o->p.timeout_s;
    const struct {
        const char *name, *alt;
        int *dst;
        long lo, hi;
        bool *set;
    } ints[] = {
        {"--port", NULL, &o->p.port, 0, 65535, NULL},
        {"--parallel", "-np", &o->p.n_parallel, 1, 256, NULL},
        {"--ctx-size", "-c", &o->p.n_ctx, 1, 1 << 20, &o->ctx_set},
        {"--queue", NULL, &o->p.n_queue, 0, 100000, &o->queue_set},
        {"--timeout", NULL, &timeout, 1, 3600, NULL},
        {"--max-tokens", NULL, &o->p.max_tokens_default, 1, 1 << 20, NULL},
        {"-t", "--threads", &o->n_threads, 1, 256, NULL},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return serve_usage(stdout), -1;
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->p.verbose = true;
            continue;
        }
        const char *val = i + 1 < argc ? argv[++i] : NULL;
        if (!val) return cli_fail("serve: option %s needs a value", a);
        bool done = false;
        for (size_t k = 0; k < sizeof ints / sizeof *ints && !done; k++) {
            if (strcmp(a, ints[k].name) && (!ints[k].alt || strcmp(a, ints[k].alt))) continue;
            if (!parse_int(val, ints[k].lo, ints[k].hi, ints[k].dst))
                return cli_fail("serve: %s %s: expected an integer in [%ld, %ld]", a, val,
                                ints[k].lo, ints[k].hi);
            if (ints[k].set) *ints[k].set = true;
            done = true;
        }
        if (done) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = val;
        else if (!strcmp(a, "--host")) o->p.host = val;
        else if (!strcmp(a, "--api-key")) o->p.api_key = val;
        else if (!strcmp(a, "--chat-template")) o->p.chat_template = val;
        else if (!strcmp(a, "--backend")) o->backend = val;
        else return cli_fail("serve: unknown option %s (see anyllm serve --help)", a);
    }
    o->p.timeout_s = timeout;
    if (!o->model) return cli_fail("serve: -m FILE is required");
    if (!o->p.api_key && getenv("ANYLLM_API_KEY") && *getenv("ANYLLM_API_KEY"))
        o->p.api_key = getenv("ANYLLM_API_KEY");
    if (o->p.api_key && !*o->p.api_key) return cli_fail("serve: --api-key must not be empty");
    if (!o->queue_set) o->p.n_queue = 2 * o->p.n_parallel + 32;
    const char *slash = strrchr(o->model, '/');
    o->p.model_name = slash ? slash + 1 : o->model;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = parse_serve(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    /* before any thread exists, so every thread inherits the mask and sigwait below is
     * the one place these signals arrive */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a signal */

    al_model_params mp = al_model_default_params();
    mp.n_threads = o.n_threads;
    mp.backend = o.backend; /* NULL: the library's default; a bad name fails the load */
    al_model *m = NULL;
    al_status st = al_model_load(o.model, &mp, &m);
    if (st != AL_OK) return cli_fail_status(st);
    al_model_info info;
    al_model_get_info(m, &info);
    if (!o.ctx_set && info.n_ctx_train > 0 && info.n_ctx_train < o.p.n_ctx)
        o.p.n_ctx = info.n_ctx_train;
    if (o.p.n_parallel > o.p.n_ctx || o.p.n_parallel > 512) {
        al_model_destroy(m);
        return cli_fail("serve: --parallel %d must not exceed the context size %d (nor 512)",
                        o.p.n_parallel, o.p.n_ctx);
    }
    srv_server *s = NULL;
    if ((st = srv_create(m, &o.p, &s)) != AL_OK) {
        rc = cli_fail_status(st);
        al_model_destroy(m);
        return rc;
    }
    fprintf(stderr, "anyllm serve: %s on http://%s:%d/ (%s; %d sequences of %d positions, "
            "queue %d%s)\n", o.p.model_name, o.p.host, srv_port(s), info.backend, o.p.n_parallel,
            o.p.n_ctx, o.p.n_queue, o.p.api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "anyllm serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
    srv_destroy(s);
    al_model_destroy(m);
    return 0;
}
