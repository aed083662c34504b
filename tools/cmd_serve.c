/* cmd_serve.c: `anyllm serve`, the OpenAI-compatible HTTP server (src/server/).
 *
 *   anyllm serve -m FILE [-m FILE]... | --models-dir DIR [--models-max N] [--idle-unload S]
 *                [--models-memory SIZE] [--host 127.0.0.1] [--port 8080] [--parallel 4] [--ctx-size 1024]
 *                [--queue N] [--api-key KEY] [--timeout 10] [--head-timeout 30]
 *                [--max-conns-per-ip 64] [--allowed-host NAME]... [--max-tokens 512]
 *                [--chat-template NAME] [--backend cpu|vulkan[:N]|auto] [-t N] [-v]
 *                [--drain-timeout 30] [--replica-id ID] [--prefix-hash-tokens 64]
 *                [--prefill-backend B --decode-backend B]
 *
 * SIGINT and SIGTERM are blocked before any thread starts, so that they reach sigwait
 * here and nowhere else. The server binds its port first, so that a balancer or a
 * readiness probe sees 503 "loading" rather than a refused connection, then the model
 * is loaded and the engine started on a thread of its own while this one waits for a
 * signal: a signal during start-up (a large model, a large cache) ends the process at
 * once. One after it drains: no new requests (503 with Retry-After), those accepted
 * run to their end for --drain-timeout seconds at most; then, or at a second signal,
 * the server stops, whose requests still in flight each get a complete answer (an
 * error), and frees everything. With several models (-m more than once, or
 * --models-dir) nothing loads at start: the server is ready at once and loads each
 * model on the first request for it, through load_model below (src/server/models.h).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "anyllm_server.h"

enum { DRAIN_POLL_MS = 50 }; /* how often a drain looks whether it is done */
#include "spec.h"
#include "split.h"

static void serve_usage(FILE *f) {
    fprintf(f,
        "usage: anyllm serve -m MODEL.gguf [options]\n"
        "       anyllm serve --models-dir DIR | -m A.gguf -m B.gguf ... [options]\n"
        "An OpenAI-compatible server: POST /v1/chat/completions, /v1/completions,\n"
        "/v1/responses, /v1/messages (Anthropic), GET /v1/models, /health, /metrics, and a\n"
        "chat page at /.\n"
        "  --models-dir DIR   serve every *.gguf file in DIR, each by its file name (a\n"
        "                     request's \"model\", with or without .gguf); -m more than once\n"
        "                     does the same for the files named. Each loads on the first\n"
        "                     request for it; the first listed answers requests naming none\n"
        "  --models-max N     at most N models loaded at once: loading another first unloads\n"
        "                     the least recently used idle one (default 4; 0: no limit)\n"
        "  --models-memory SIZE  the loaded models' files together at most SIZE bytes (K, M,\n"
        "                     G suffixes); default: a model loads when the system has its\n"
        "                     size available, else idle models are unloaded first\n"
        "  --idle-unload S    unload a model no request has used for S seconds (default 0:\n"
        "                     keep it)\n"
        "  --spec ngram       speculative decoding: each sequence drafts the continuation of\n"
        "                     the latest earlier occurrence of its last tokens, checked in\n"
        "                     one evaluation (the same text as without; /metrics counts the\n"
        "                     drafts); --draft-max N tokens at most (default 8)\n"
        "  --spec mtp         drafts with the file's next-token-prediction block (Qwen3.5/3.6)\n"
        "  --model-draft FILE drafts with a small model of the model's vocabulary instead\n"
        "  --host ADDR        address to bind (default 127.0.0.1: this machine only)\n"
        "  --port N           TCP port (default 8080; 0 picks a free one)\n"
        "  --parallel N       sequences decoded together (default 4)\n"
        "  -c, --ctx-size N   positions per sequence (default 1024; more than the model's\n"
        "                     training context is refused)\n"
        "  --queue N          requests that may wait for a sequence (default 2*parallel+32)\n"
        "  --api-key KEY      require 'Authorization: Bearer KEY' on every route but /health\n"
        "                     and the chat page at / (which asks for it); or ANYLLM_API_KEY\n"
        "  --timeout S        drop a connection idle for S seconds while sending (default 10)\n"
        "  --head-timeout S   a request's headers and body must arrive within S seconds, or\n"
        "                     408 and the connection is closed (default 30)\n"
        "  --max-conns-per-ip N  connections one client address may hold (default 64; 0: any)\n"
        "  --allowed-host NAME   also accept requests whose Host header is NAME (repeatable;\n"
        "                     '*' accepts any). Loopback names, IP addresses and --host are\n"
        "                     always accepted; other names get 403 (DNS rebinding)\n"
        "  --max-tokens N     tokens generated when a request gives no max_tokens (default 512)\n"
        "  --chat-template NAME   chatml, llama3, llama2, mistral, gemma, gemma4, phi3,\n"
        "                     harmony, glm45, glm47\n"
        "                     (harmony, gpt-oss: the answer is the message's content, the\n"
        "                     reasoning its reasoning_content)\n"
        "  --backend NAME     cpu (default), cpu:precise, vulkan, vulkan:N or auto (with\n"
        "                     a device profile, the fastest backend per phase)\n"
        "  --prefill-backend B, --decode-backend B   prompts on B, generated tokens on B:\n"
        "                     the KV cache is handed over (0 bytes copied on unified memory)\n"
        "  --precise          the CPU rounds activations to ~15 bits, not 8 (cpu:precise)\n"
        "  --no-repack        the CPU reads the weights in place, not in its faster layout\n"
        "                     (ANYLLM_X16=0): a quicker load, a slower decode\n"
        "  -t, --threads N    threads (default: all cores)\n"
        "  -ngl N             llama.cpp's flag: N > 0 is --backend vulkan, 0 is cpu\n"
        "  --drain-timeout S  on SIGTERM or SIGINT, take no new requests (503, Retry-After)\n"
        "                     and let those accepted finish for up to S seconds, then exit\n"
        "                     (default 30; 0 ends them at once; a second signal too)\n"
        "  --replica-id ID    the X-Replica header of every answer and the replica label\n"
        "                     of /metrics (default HOSTNAME:PORT)\n"
        "  --prefix-hash-tokens K  answers carry X-Prefix-Hash, a hash of the prompt's\n"
        "                     first K tokens, for balancers that route by prefix (default\n"
        "                     64; 0: none; prompts shorter than K get none)\n"
        "  --ctx-checkpoints N  a model with a recurrent state (qwen35...): checkpoints of\n"
        "                     it per sequence, where a later request sharing the prompt's\n"
        "                     start goes back to (default 4, each the state's size; -1: none)\n"
        "  -ctk, --cache-type-k T  the KV cache's keys: f32 (default), f16, q8_0 or q4_0\n"
        "  -ctv, --cache-type-v T  its values, as -ctk\n"
        "  --kv-unrotated     q8_0 and q4_0 caches without the Hadamard rotation of heads\n"
        "  -v, --verbose      one line per request on stderr\n");
}

/* A byte count with an optional K, M or G suffix (powers of 1024), 1 byte to 1 PiB. */
static bool parse_size(const char *s, long long *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double unit = *end == 'K' || *end == 'k' ? 1024.0
                  : *end == 'M' || *end == 'm' ? 1048576.0
                  : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (unit > 1.0) end++;
    if (end == s || *end || errno || !(v * unit >= 1.0) || v * unit > 1125899906842624.0)
        return false;
    *out = (long long)(v * unit);
    return true;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static bool parse_int(const char *s, long lo, long hi, int *out) {
    int64_t v;
    if (!cli_parse_i64(s, lo, hi, &v)) return false;
    *out = (int)v;
    return true;
}

enum { MAX_ALLOWED_HOSTS = 32, MAX_MODELS = 256 };

typedef struct serve_opts {
    const char *model, *backend;
    const char *models[MAX_MODELS]; /* every -m */
    int n_models;
    const char *models_dir;
    const char *spec;    /* --spec ngram */
    const char *draft;   /* --model-draft FILE */
    int draft_max;       /* --draft-max */
    const char *prefill_backend, *decode_backend; /* split.h */
    int n_threads;
    int drain_timeout_s;
    bool queue_set, ctx_set;
    const char *hosts[MAX_ALLOWED_HOSTS];
    srv_params p;
} serve_opts;

/* Fills o from argv; 0 on success, -1 for --help, else an exit status (message printed). */
static int parse_serve(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.p = srv_default_params(), .drain_timeout_s = 30};
    o->p.models_max = 4;
    int timeout = o->p.timeout_s, ngl = -1;
    bool precise = false;
    static const char *const strs[] = {"-m", "--model", "--host", "--api-key", "--allowed-host",
                                       "--chat-template", "--backend", "--replica-id",
                                       "--prefill-backend", "--decode-backend", "--models-dir",
                                       "--models-memory", "--spec", "--model-draft", "-md",
                                       "--cache-type-k", "-ctk", "--cache-type-v", "-ctv"};
    const struct {
        const char *name, *alt;
        int *dst;
        long lo, hi;
        bool *set;
    } ints[] = {
        {"--port", NULL, &o->p.port, 0, 65535, NULL},
        {"--parallel", "-np", &o->p.n_parallel, 1, 256, NULL},
        {"--ctx-size", "-c", &o->p.n_ctx, 1, 1 << 20, &o->ctx_set},
        {"--ctx", NULL, &o->p.n_ctx, 1, 1 << 20, &o->ctx_set}, /* run's and chat's alias */
        {"-ngl", "--n-gpu-layers", &ngl, 0, 1 << 20, NULL},
        {"--queue", NULL, &o->p.n_queue, 0, 100000, &o->queue_set},
        {"--timeout", NULL, &timeout, 1, 3600, NULL},
        {"--head-timeout", NULL, &o->p.head_timeout_s, 1, 3600, NULL},
        {"--max-conns-per-ip", NULL, &o->p.max_conns_per_ip, 0, 100000, NULL},
        {"--max-tokens", NULL, &o->p.max_tokens_default, 1, 1 << 20, NULL},
        {"-t", "--threads", &o->n_threads, 1, 256, NULL},
        {"--drain-timeout", NULL, &o->drain_timeout_s, 0, 86400, NULL},
        {"--prefix-hash-tokens", NULL, &o->p.prefix_hash_tokens, 0, 1 << 20, NULL},
        {"--ctx-checkpoints", NULL, &o->p.n_checkpoints, -1, 64, NULL},
        {"--models-max", NULL, &o->p.models_max, 0, MAX_MODELS, NULL},
        {"--idle-unload", NULL, &o->p.idle_unload_s, 0, 30 * 86400, NULL},
        {"--draft-max", NULL, &o->draft_max, 1, 64, NULL},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return serve_usage(stdout), -1;
        if (!strcmp(a, "--precise")) {
            precise = true;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            cli_no_repack();
            continue;
        }
        if (!strcmp(a, "--kv-unrotated")) {
            o->p.kv_unrotated = true;
            continue;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o->p.verbose = true;
            continue;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
            known |= !strcmp(a, ints[k].name) || (ints[k].alt && !strcmp(a, ints[k].alt));
        for (size_t k = 0; k < sizeof strs / sizeof *strs; k++) known |= !strcmp(a, strs[k]);
        if (!known) return cli_fail("serve: unknown option %s (see anyllm serve --help)", a);
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
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (o->n_models == MAX_MODELS)
                return cli_fail("serve: at most %d models (-m)", MAX_MODELS);
            o->models[o->n_models++] = o->model = val;
        }
        else if (!strcmp(a, "--models-dir")) o->models_dir = val;
        else if (!strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk") ||
                 !strcmp(a, "--cache-type-v") || !strcmp(a, "-ctv")) {
            const bool k = !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk");
            if (al_kv_type_parse(val, k ? &o->p.type_k : &o->p.type_v) != AL_OK)
                return cli_fail("serve: %s %s: %s", a, val, al_last_error());
        }
        else if (!strcmp(a, "--spec")) o->spec = val;
        else if (!strcmp(a, "--model-draft") || !strcmp(a, "-md")) o->draft = val;
        else if (!strcmp(a, "--models-memory")) {
            if (!parse_size(val, &o->p.models_memory))
                return cli_fail("serve: --models-memory %s: expected a size in bytes, with an "
                                "optional K, M or G suffix", val);
        }
        else if (!strcmp(a, "--host")) o->p.host = val;
        else if (!strcmp(a, "--api-key")) o->p.api_key = val;
        else if (!strcmp(a, "--allowed-host")) {
            if (!*val || o->p.n_allowed_hosts == MAX_ALLOWED_HOSTS)
                return cli_fail("serve: --allowed-host takes a non-empty name, at most %d times",
                                MAX_ALLOWED_HOSTS);
            o->hosts[o->p.n_allowed_hosts++] = val;
        }
        else if (!strcmp(a, "--chat-template")) o->p.chat_template = val;
        else if (!strcmp(a, "--replica-id")) {
            if (!*val || strlen(val) > 200 || strpbrk(val, "\r\n"))
                return cli_fail("serve: --replica-id takes a name of 1 to 200 bytes on one line");
            o->p.replica_id = val;
        }
        else if (!strcmp(a, "--prefill-backend")) o->prefill_backend = val;
        else if (!strcmp(a, "--decode-backend")) o->decode_backend = val;
        else o->backend = val; /* --backend */
    }
    int rc = cli_resolve_backend("serve", &o->backend, ngl, precise);
    if (rc) return rc;
    o->p.timeout_s = timeout;
    o->p.allowed_hosts = o->hosts;
    if (!o->model && !o->models_dir) return cli_fail("serve: -m FILE (or --models-dir DIR) is "
                                                     "required");
    const char *kind = o->spec ? o->spec : o->draft ? "draft" : "none";
    if (strcmp(kind, "ngram") && strcmp(kind, "draft") && strcmp(kind, "mtp") &&
        strcmp(kind, "none"))
        return cli_fail("serve: --spec %s: the kinds are ngram, draft (with --model-draft FILE), "
                        "mtp (the file's next-token-prediction block) and none", kind);
    o->p.mtp = !strcmp(kind, "mtp");
    if (o->p.mtp && (o->prefill_backend || o->decode_backend))
        return cli_fail("serve: --spec mtp does not go with --prefill-backend/--decode-backend "
                        "(the block's cache is not handed over)");
    if (!strcmp(kind, "draft") != (o->draft != NULL))
        return cli_fail("serve: --model-draft FILE %s", o->draft ? "drafts by itself: it does "
                        "not go with --spec ngram" : "is what --spec draft drafts with");
    if (o->draft && (o->models_dir || o->n_models > 1))
        return cli_fail("serve: --model-draft goes with one model (-m FILE), not several");
    if (o->draft_max && !strcmp(kind, "none"))
        return cli_fail("serve: --draft-max needs --spec ngram or --model-draft FILE");
    if (strcmp(kind, "none")) o->p.draft_max = o->draft_max ? o->draft_max : 8;
    if (!o->p.api_key && getenv("ANYLLM_API_KEY") && *getenv("ANYLLM_API_KEY"))
        o->p.api_key = getenv("ANYLLM_API_KEY");
    if (o->p.api_key && !*o->p.api_key) return cli_fail("serve: --api-key must not be empty");
    if (!o->queue_set) o->p.n_queue = 2 * o->p.n_parallel + 32;
    o->p.model_name = o->model ? base_name(o->model) : "";
    return 0;
}

/* What the start-up thread hands back to the main one. */
typedef struct startup {
    serve_opts *o;
    pthread_t main_thread;
    cli_split sp;       /* the model per phase (split.h; no contexts: the engine's) */
    al_model *m;
    al_model *draft;    /* --model-draft, or NULL */
    srv_server *s;
    al_model_info info;
    int rc;             /* 0: serving; else the exit status (message printed) */
} startup;

/* srv_loader.load for several models: each file on the backends the options name
 * (the same plan as one model's), on the thread of the request that needs it. A
 * failure leaves its reason in al_last_error(), where the server reads it. */
static al_status load_model(void *ud, const char *path, const al_model **m, const al_model **dm,
                            void **handle) {
    serve_opts *o = ud;
    cli_split *sp = calloc(1, sizeof *sp);
    if (!sp) return AL_ERR_NOMEM;
    cli_opts co = {.command = "serve", .model = path, .backend = o->backend,
                   .prefill_backend = o->prefill_backend, .decode_backend = o->decode_backend,
                   .n_threads = o->n_threads};
    int rc = cli_split_plan(&co, 128, 0, sp);
    if (rc || (rc = cli_split_load(&co, sp))) {
        cli_split_destroy(sp);
        free(sp);
        return AL_ERR_IO; /* al_last_error() says why */
    }
    *m = sp->m;
    *dm = sp->m_decode;
    *handle = sp;
    return AL_OK;
}

static void unload_model(void *ud, void *handle) {
    (void)ud;
    cli_split_destroy(handle);
    free(handle);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.gguf files of dir, sorted, added to the server by file name. */
static int add_dir(srv_server *s, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return cli_fail("serve: --models-dir %s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = 0;
    for (struct dirent *de; (de = readdir(d)) && !rc;) {
        size_t k = strlen(de->d_name);
        if (de->d_name[0] == '.' || k < 6 || strcmp(de->d_name + k - 5, ".gguf")) continue;
        char **grown = realloc(names, (size_t)(n + 1) * sizeof *names);
        if (!grown || !(grown[n] = malloc(strlen(dir) + k + 2))) rc = cli_fail("serve: out of memory");
        if (grown) names = grown;
        if (!rc) sprintf(names[n++], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    if (!rc && n == 0) rc = cli_fail("serve: --models-dir %s holds no .gguf file", dir);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n && !rc; i++) {
        al_status st = srv_add_model(s, base_name(names[i]), names[i]);
        if (st != AL_OK) rc = cli_fail_status(st);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Several models: the server is ready at once, each model loading on first use. */
static int start_many(startup *u) {
    serve_opts *o = u->o;
    for (int i = 0; i < o->n_models; i++) {
        al_status st = srv_add_model(u->s, base_name(o->models[i]), o->models[i]);
        if (st != AL_OK) return cli_fail_status(st);
    }
    int rc = o->models_dir ? add_dir(u->s, o->models_dir) : 0;
    if (rc) return rc;
    al_status st = srv_start_models(u->s);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* --model-draft: the draft model, on the model's backend, of its vocabulary. */
static int load_draft(startup *u) {
    serve_opts *o = u->o;
    cli_opts d = {.command = "serve", .model = o->draft, .backend = o->backend,
                  .n_threads = o->n_threads};
    al_status st = cli_model_load(&d, &u->draft);
    if (st != AL_OK) return cli_fail_status(st);
    char why[160];
    if (!spec_same_vocab(u->m, u->draft, why, sizeof why))
        return cli_fail("serve: --model-draft %s: its vocabulary is not the model's: %s",
                        o->draft, why);
    srv_set_draft_model(u->s, u->draft);
    return 0;
}

/* Binds the port, loads the model and starts the engine; the model's training context
 * caps --ctx-size: a larger one would only allocate a cache the model cannot use. */
static int start(startup *u) {
    serve_opts *o = u->o;
    if (o->models_dir || o->n_models > 1)
        o->p.loader = (srv_loader){.load = load_model, .unload = unload_model, .ud = o};
    al_status st = srv_create(&o->p, &u->s);
    if (st != AL_OK) return cli_fail_status(st);
    if (o->p.loader.load) return start_many(u);
    fprintf(stderr, "anyllm serve: loading %s (http://%s:%d/ answers 503 until it is ready)\n",
            o->model, o->p.host, srv_port(u->s));
    /* the backend of each phase: --backend (NULL: the CPU), or --prefill-backend and
     * --decode-backend, or auto's choice from the profile for prompts of 128 tokens */
    cli_opts co = {.command = "serve", .model = o->model, .backend = o->backend,
                   .prefill_backend = o->prefill_backend, .decode_backend = o->decode_backend,
                   .n_threads = o->n_threads};
    int rc = cli_split_plan(&co, 128, 0, &u->sp);
    if (rc || (rc = cli_split_load(&co, &u->sp))) return rc;
    u->m = u->sp.m;
    al_model_get_info(u->m, &u->info);
    int n_train = u->info.n_ctx_train;
    if (o->ctx_set && n_train > 0 && o->p.n_ctx > n_train)
        return cli_fail("serve: --ctx-size %d is more than the model's training context (%d "
                        "positions); use at most %d", o->p.n_ctx, n_train, n_train);
    if (!o->ctx_set && n_train > 0 && n_train < o->p.n_ctx) o->p.n_ctx = n_train;
    if (o->draft && (rc = load_draft(u))) return rc;
    if (o->p.n_parallel > o->p.n_ctx || o->p.n_parallel > 512)
        return cli_fail("serve: --parallel %d must not exceed the context size %d (nor 512)",
                        o->p.n_parallel, o->p.n_ctx);
    if ((st = srv_start(u->s, u->m, u->sp.m_decode, o->p.n_ctx)) != AL_OK)
        return cli_fail_status(st);
    return 0;
}

static void *startup_main(void *arg) {
    startup *u = arg;
    u->rc = start(u);
    pthread_kill(u->main_thread, SIGUSR1); /* "done": wakes sigwait */
    return NULL;
}

/* The first SIGINT or SIGTERM: no new requests; those accepted, queued or running, go
 * on to their end for timeout_s seconds at most. A second signal or the timeout ends
 * the wait; srv_destroy then ends what is left, each client getting an error. */
static void drain(srv_server *s, int timeout_s, const sigset_t *stop) {
    if (timeout_s <= 0) return;
    srv_drain_begin(s);
    if (srv_drained(s)) return;
    fprintf(stderr, "anyllm serve: draining: finishing the requests in flight (at most %d s; "
            "another signal stops at once)\n", timeout_s);
    double until = cli_now_s() + timeout_s;
    while (!srv_drained(s)) {
        if (cli_now_s() >= until) {
            fprintf(stderr, "anyllm serve: --drain-timeout %d s reached; ending the requests "
                    "still in flight\n", timeout_s);
            return;
        }
        struct timespec ts = {0, DRAIN_POLL_MS * 1000000L};
        int sig = sigtimedwait(stop, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "anyllm serve: a second signal; ending the requests still in "
                    "flight\n");
            return;
        }
    }
    fprintf(stderr, "anyllm serve: drained\n");
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    int rc = parse_serve(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    /* before any thread exists, so every thread inherits the mask and sigwait below is
     * the one place these signals arrive; SIGUSR1 is the start-up thread's "done" */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a signal */

    startup u = {.o = &o, .main_thread = pthread_self()};
    pthread_t t;
    if (pthread_create(&t, NULL, startup_main, &u) != 0)
        return cli_fail("serve: cannot start a thread");
    int sig = 0;
    sigwait(&stop, &sig);
    if (sig != SIGUSR1) {
        /* the load or the cache allocation may take long and cannot be interrupted:
         * end the process now, without waiting for them (the OS frees everything) */
        fprintf(stderr, "anyllm serve: %s during start-up, exiting\n",
                sig == SIGINT ? "interrupted" : "terminated");
        fflush(stderr);
        _exit(0);
    }
    pthread_join(t, NULL);
    if (u.rc) {
        srv_destroy(u.s);
        cli_split_destroy(&u.sp);
        al_model_destroy(u.draft);
        return u.rc;
    }
    al_model_info di = u.info;
    if (u.sp.m_decode) al_model_get_info(u.sp.m_decode, &di);
    if (o.p.loader.load)
        fprintf(stderr, "anyllm serve: models on http://%s:%d/, each loaded on first use (at "
                "most %d at once; %d sequences each; GET /v1/models lists them%s)\n", o.p.host,
                srv_port(u.s), o.p.models_max, o.p.n_parallel,
                o.p.api_key ? "; API key required" : "");
    else
        fprintf(stderr, "anyllm serve: %s on http://%s:%d/ (%s%s%s; %d sequences of %d "
                "positions, KV %s/%s, queue %d%s)\n", o.p.model_name, o.p.host, srv_port(u.s),
                u.info.backend, u.sp.m_decode ? ", decode on " : "",
                u.sp.m_decode ? di.backend : "", o.p.n_parallel, o.p.n_ctx,
                al_kv_type_name(o.p.type_k), al_kv_type_name(o.p.type_v), o.p.n_queue,
                o.p.api_key ? ", API key required" : "");
    do sigwait(&stop, &sig); while (sig == SIGUSR1);
    fprintf(stderr, "anyllm serve: %s\n", sig == SIGINT ? "interrupted" : "terminated");
    drain(u.s, o.drain_timeout_s, &stop);
    fprintf(stderr, "anyllm serve: stopping\n");
    srv_destroy(u.s);
    cli_split_destroy(&u.sp);
    al_model_destroy(u.draft);
    return 0;
}
