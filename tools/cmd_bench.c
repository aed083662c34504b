/* cmd_bench.c: `anyllm bench`, prompt-processing and generation speed per model.
 *
 *   anyllm bench -m FILE [-m FILE ...] [-p 512] [-n 128] [-r 5] [-t 2] [-o md|json|csv]
 *
 * pp N: a prompt of N tokens evaluated as one batch from an empty context (its time is
 * also the time to first token); tg N: N tokens evaluated one at a time from an empty
 * context. Each test runs once as a warm-up, then -r times; the mean and standard
 * deviation of tokens/s are reported. Lists (-p 128,512) run each value. Field names
 * of the JSON and CSV output follow llama-bench's where the meaning is the same.
 *
 * The roofline column: generation reads every weight once per token, and the keys and
 * values before it, so its speed is bounded by memory bandwidth / bytes read per token.
 * The bandwidth is measured by a multi-threaded read of a buffer much larger than the
 * caches, at start and right before and after each tg repetition (bw_probe).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "anyllm.h"
#include "bench_spec.h"
#include "cli.h"
#include "spec.h"
#include "plot.h"
#include "profile.h"

#ifndef AL_BUILD
#define AL_BUILD "unknown"
#endif

enum { MAX_LIST = 8, MAX_MODELS = 16, MAX_REPS = 100 };

typedef struct bench_opts {
    const char *models[MAX_MODELS];
    int n_models;
    int pp[MAX_LIST], n_pp;
    int tg[MAX_LIST], n_tg;
    int threads[MAX_LIST], n_threads;
    int reps;
    const char *format;
    const char *backends[MAX_LIST]; /* --backend cpu,vulkan; "all": every one there is */
    int n_backends;
    int depth[MAX_LIST], n_depth;   /* -d: tokens already in the context */
    const char *plot;               /* --plot FILE.svg */
    bool save_profile;              /* --save-profile: the device profile (profile.h) */
    const char *spec, *prompt;      /* --spec KIND -f FILE: bench_spec.h */
    const char *draft;              /* --model-draft FILE */
    int draft_max;                  /* --draft-max */
    al_kv_type ctk[MAX_LIST], ctv[MAX_LIST]; /* -ctk, -ctv: KV cache types, a row each */
    int n_ctk, n_ctv;
    int mla_expand;                 /* --mla-expand: al_context_params.mla_expand_min */
} bench_opts;

typedef struct bench_result {
    const char *model;
    al_model_info info;   /* its strings point to arch and backend below */
    char arch[16], backend[64];
    const char *spec;     /* the --backend value it ran on */
    uint64_t file_bytes;
    int n_threads;
    bool is_pp;
    int n_tokens;
    int n_depth; /* tokens in the context before the test */
    al_kv_type type_k, type_v; /* the KV cache's */
    double load_ms;
    double ts[MAX_REPS]; /* tokens/s per repetition */
    double mean_ts, sd_ts, mean_ms;
    double dispatches;   /* Vulkan: compute dispatches recorded per token, mean of the
                            timed repetitions; < 0 on other backends */
    double record_ms, wait_ms; /* Vulkan, per token, means: the host's recording, the */
    double gpu_ms;             /* wait for the fence, the device's time (timestamps; < 0
                                  where the queue has none) */
    uint64_t kv_per_pos;      /* the KV cache's bytes per position (latent rows: one) */
    uint64_t bytes_per_token; /* tg: the weights a token reads and its keys and values,
                                 the mean over the tokens generated; pp: 0 */
    double bw_gbs;       /* tg: the bandwidth measured around its repetitions, mean */
    double roof_pct;     /* tg: the mean over repetitions of its share of the roofline
                            of the bandwidth measured right before and after it */
    bool own_memory;     /* a GPU reading weights from its own memory (a staging copy):
                            the host's bandwidth bounds nothing there, so no roofline */
    struct shader_times *shaders; /* ANYLLM_VK_PROFILE: device time per shader build over
                                     the timed repetitions; NULL otherwise */
} bench_result;

/* ---- memory bandwidth --------------------------------------------------------------- */

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

/* Reads at the widest vector width the CPU has (al_memory_read_sum): a plain C loop
 * reads narrower and measured ~25% less on this machine. */
static void *bw_read(void *varg) {
    bw_arg *a = varg;
    a->sum = al_memory_read_sum(a->p, a->n * sizeof *a->p);
    return NULL;
}

/* A buffer of 512 MiB in huge pages where the kernel gives them (TLB misses cost
 * another ~20%), every page touched. */
static uint64_t *bw_buffer(size_t n_bytes) {
    void *map = mmap(NULL, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    madvise(map, n_bytes, MADV_HUGEPAGE); /* a hint: no huge pages is no error */
    uint64_t *buf = map;
    for (size_t i = 0; i < n_bytes / 8; i++) buf[i] = i;
    return buf;
}

/* Best of n_passes multi-threaded reads of the buffer, in GB/s (1e9 B/s): what reading
 * memory can reach, the bound token generation is measured against. */
static double bandwidth_pass(const uint64_t *buf, size_t n_bytes, int n_threads, int n_passes) {
    const size_t n = n_bytes / 8;
    double best = 0;
    pthread_t th[MAX_LIST * 32];
    bw_arg args[MAX_LIST * 32];
    if (n_threads > (int)(sizeof th / sizeof *th)) n_threads = (int)(sizeof th / sizeof *th);
    uint64_t sink = 0;
    for (int rep = 0; rep < n_passes; rep++) {
        double t0 = cli_now_s();
        size_t per = n / (size_t)n_threads & ~(size_t)15; /* whole cache lines */
        for (int t = 0; t < n_threads; t++) {
            args[t] = (bw_arg){.p = buf + per * (size_t)t, .n = per};
            if (t > 0) pthread_create(&th[t], NULL, bw_read, &args[t]);
        }
        bw_read(&args[0]);
        for (int t = 1; t < n_threads; t++) pthread_join(th[t], NULL);
        double dt = cli_now_s() - t0;
        for (int t = 0; t < n_threads; t++) sink += args[t].sum;
        if (n_bytes / dt / 1e9 > best) best = (double)n_bytes / dt / 1e9;
    }
    return sink == 42 ? best + 1e-9 : best; /* keep the sums alive */
}

/* The bandwidth probe: a child process that holds the buffer and measures on request,
 * so that the buffer does not count in this process's peak RSS (which bench reports)
 * and a measurement can come between any two repetitions. The machines this runs on
 * are shared: their bandwidth drifts by a third within minutes, so tg's roofline share
 * is taken against measurements made right before and after its own repetitions. */
typedef struct bw_probe {
    pid_t pid;
    int to, from; /* request and answer pipes; -1: no probe, each measurement is 0 */
} bw_probe;

static void bw_child(int req, int ans, int n_threads) {
    const size_t n_bytes = (size_t)512 << 20;
    uint64_t *buf = bw_buffer(n_bytes);
    unsigned char n_passes;
    while (read(req, &n_passes, 1) == 1) { /* end of file: the parent is gone */
        double gbs = buf ? bandwidth_pass(buf, n_bytes, n_threads, n_passes) : 0;
        if (write(ans, &gbs, sizeof gbs) != (ssize_t)sizeof gbs) break;
    }
    _exit(0);
}

/* Starts the probe before any model is loaded: fork() copies only the calling thread. */
static bw_probe bw_probe_start(int n_threads) {
    bw_probe p = {.pid = -1, .to = -1, .from = -1};
    int req[2], ans[2];
    if (pipe(req) != 0) return p;
    if (pipe(ans) != 0) {
        close(req[0]);
        close(req[1]);
        return p;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(req[1]);
        close(ans[0]);
        bw_child(req[0], ans[1], n_threads);
    }
    close(req[0]);
    close(ans[1]);
    if (pid < 0) {
        close(req[1]);
        close(ans[0]);
        return p;
    }
    return (bw_probe){.pid = pid, .to = req[1], .from = ans[0]};
}

/* GB/s, best of n_passes; 0 when there is no probe. */
static double bw_probe_measure(bw_probe *p, int n_passes) {
    unsigned char n = (unsigned char)n_passes;
    double gbs = 0;
    if (p->to < 0 || write(p->to, &n, 1) != 1 || read(p->from, &gbs, sizeof gbs) != sizeof gbs)
        return 0;
    return gbs;
}

static void bw_probe_stop(bw_probe *p) {
    if (p->to < 0) return;
    close(p->to); /* the child reads end of file and exits */
    close(p->from);
    waitpid(p->pid, NULL, 0);
    p->to = p->from = -1;
}

static void cpu_name(char *buf, size_t size) {
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        colon += 2;
        colon[strcspn(colon, "\n")] = 0;
        snprintf(buf, size, "%s", colon);
        break;
    }
    fclose(f);
}

/* ---- runs ------------------------------------------------------------------------------ */

static void fill_tokens(int32_t *ids, int n, int n_vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)n_vocab);
    }
}

/* Brings the context to `depth` tokens of ids[0 .. depth): cut back to them when it
 * holds more (a sliding-window model may have to start over), else evaluated, in
 * batches, untimed. */
static al_status fill_depth(al_context *c, const int32_t *ids, int depth) {
    if (al_context_n_past(c) >= depth) al_context_truncate(c, depth);
    if (al_context_n_past(c) != depth) al_context_reset(c);
    al_status st = AL_OK;
    for (int done = al_context_n_past(c); st == AL_OK && done < depth; done += 512) {
        int nb = depth - done < 512 ? depth - done : 512;
        st = al_eval(c, ids + done, nb, NULL, false);
    }
    return st;
}

/* What the GPU backend of m has done so far: dispatches recorded, and seconds of
 * recording, waiting and device time (al_backend_stats); dispatches < 0 on a backend
 * that runs on the host. */
typedef struct vk_cost {
    double dispatches, record_s, wait_s, gpu_s, n_timed;
} vk_cost;

static vk_cost vk_cost_now(const al_model *m) {
    al_backend_stats bs;
    al_model_get_backend_stats(m, &bs);
    if (!bs.gpu) return (vk_cost){.dispatches = -1};
    return (vk_cost){(double)bs.n_dispatches, bs.record_s, bs.wait_s, bs.gpu_s,
                     (double)bs.n_timed};
}


/* ---- device time per shader build (ANYLLM_VK_PROFILE) ---------------------------------- */

enum { MAX_SHADERS = 96 };

typedef struct shader_times {
    int n;
    al_dispatch_time t[MAX_SHADERS];
} shader_times;

/* Adds after - before to acc, build by build, matched by name (a build that first ran
 * in between is in after alone). */
static void shader_times_add(shader_times *acc, const al_dispatch_time *before, int n_before,
                             const al_dispatch_time *after, int n_after) {
    for (int i = 0; i < n_after; i++) {
        al_dispatch_time d = after[i];
        for (int j = 0; j < n_before; j++)
            if (!strcmp(before[j].name, d.name)) {
                d.n -= before[j].n;
                d.gpu_s -= before[j].gpu_s;
                break;
            }
        int k = 0;
        while (k < acc->n && strcmp(acc->t[k].name, d.name)) k++;
        if (d.n == 0 || (k == acc->n && acc->n == MAX_SHADERS)) continue;
        if (k == acc->n) acc->t[acc->n++] = (al_dispatch_time){.n = 0};
        snprintf(acc->t[k].name, sizeof acc->t[k].name, "%s", d.name);
        acc->t[k].n += d.n;
        acc->t[k].gpu_s += d.gpu_s;
    }
}

static int by_gpu_time(const void *a, const void *b) {
    const double x = ((const al_dispatch_time *)a)->gpu_s, y = ((const al_dispatch_time *)b)->gpu_s;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* "pp512", "tg128 @ d2048" */
static void test_name(const bench_result *r, char *out, size_t n) {
    int len = snprintf(out, n, "%s%d", r->is_pp ? "pp" : "tg", r->n_tokens);
    if (r->n_depth) snprintf(out + len, n - (size_t)len, " @ d%d", r->n_depth);
}

/* Per test, its builds by device time: which kernel is slow, and what a dispatch costs. */
static void print_shader_times(FILE *f, const bench_result *res, int n, int reps) {
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        if (!r->shaders || r->shaders->n == 0) continue;
        shader_times st = *r->shaders;
        qsort(st.t, (size_t)st.n, sizeof st.t[0], by_gpu_time);
        double total = 0, count = 0;
        for (int k = 0; k < st.n; k++) total += st.t[k].gpu_s, count += (double)st.t[k].n;
        const double per = 1.0 / (reps * (r->is_pp ? 1 : r->n_tokens));
        char test[48];
        test_name(r, test, sizeof test);
        fprintf(f, "\n%s %s: device time per shader build, per %s (ANYLLM_VK_PROFILE: the "
                "dispatches ran one at a time)\n| shader | dispatches | us each | ms | share |\n"
                "|---|---:|---:|---:|---:|\n",
                r->info.backend, test, r->is_pp ? "prompt" : "token");
        for (int k = 0; k < st.n; k++)
            fprintf(f, "| %s | %.1f | %.1f | %.3f | %.1f%% |\n", st.t[k].name,
                    (double)st.t[k].n * per, 1e6 * st.t[k].gpu_s / (double)st.t[k].n,
                    1e3 * st.t[k].gpu_s * per, total > 0 ? 100 * st.t[k].gpu_s / total : 0);
        fprintf(f, "| all | %.1f | %.1f | %.3f | 100%% |\n", count * per,
                count > 0 ? 1e6 * total / count : 0, 1e3 * total * per);
    }
}

/* The device time per build so far, at most MAX_SHADERS of them. */
static int shader_times_now(const al_model *m, al_dispatch_time *out) {
    const int n = al_model_get_dispatch_times(m, out, MAX_SHADERS);
    return n < MAX_SHADERS ? n : MAX_SHADERS;
}

/* One timed repetition after `depth` tokens (ids[0 .. depth)), on ids[depth ..];
 * returns seconds, or a negative value on failure. *vk: the Vulkan work of the timed
 * part (dispatches -1 elsewhere); shaders, unless NULL, gains its device time per
 * shader build. */
static double run_once(const al_model *m, al_context *c, const int32_t *all_ids, int depth, int n,
                       bool is_pp, float *logits, vk_cost *vk, shader_times *shaders) {
    if (fill_depth(c, all_ids, depth) != AL_OK) return -1;
    const int32_t *ids = all_ids + depth;
    al_dispatch_time before[MAX_SHADERS], after[MAX_SHADERS];
    const int n_before = shaders ? shader_times_now(m, before) : 0;
    const vk_cost v0 = vk_cost_now(m);
    double t0 = cli_now_s();
    if (is_pp) {
        if (al_eval(c, ids, n, logits, false) != AL_OK) return -1;
    } else {
        for (int i = 0; i < n; i++)
            if (al_eval(c, ids + i, 1, logits, false) != AL_OK) return -1;
    }
    double dt = cli_now_s() - t0;
    const vk_cost v1 = vk_cost_now(m);
    if (shaders) shader_times_add(shaders, before, n_before, after, shader_times_now(m, after));
    *vk = (vk_cost){v0.dispatches < 0 ? -1 : v1.dispatches - v0.dispatches,
                    v1.record_s - v0.record_s, v1.wait_s - v0.wait_s, v1.gpu_s - v0.gpu_s,
                    v1.n_timed - v0.n_timed};
    return dt;
}

/* Erases the progress line, so that an error is a line of its own. */
static void clear_line(void) {
    if (isatty(2)) fprintf(stderr, "\r%-70s\r", "");
}

/* Passes per bandwidth measurement between tg repetitions: best of 2 is ~50 ms here. */
enum { BW_PASSES_REP = 2 };

static int run_test(const bench_opts *o, const al_model *m, al_context *c, int32_t *ids,
                    float *logits, bench_result *r, int model_i, bw_probe *probe) {
    const char *kind = r->is_pp ? "pp" : "tg";
    double bw[MAX_REPS + 1] = {0};
    vk_cost vk = {0};
    r->dispatches = r->record_ms = r->wait_ms = r->gpu_ms = 0;
    for (int rep = -1; rep < o->reps; rep++) { /* rep -1 is the warm-up */
        if (isatty(2)) /* a progress line is for a person watching, not for a log */
            fprintf(stderr, "\rbench: model %d/%d, %s, %s%d @ d%d, t=%d, %s %d/%d   ",
                    model_i + 1, o->n_models, r->backend, kind, r->n_tokens, r->n_depth,
                    r->n_threads, rep < 0 ? "warm-up" : "rep", rep < 0 ? 1 : rep + 1,
                    rep < 0 ? 1 : o->reps);
        if (!r->is_pp && !r->own_memory && rep >= 0)
            bw[rep] = bw_probe_measure(probe, BW_PASSES_REP);
        /* the warm-up ran every build a test uses, if anything is timed */
        if (rep == 0 && al_model_get_dispatch_times(m, NULL, 0) > 0) {
            free(r->shaders);
            r->shaders = calloc(1, sizeof *r->shaders);
            if (!r->shaders) return clear_line(), cli_fail("out of memory");
        }
        double dt = run_once(m, c, ids, r->n_depth, r->n_tokens, r->is_pp, logits, &vk,
                             rep >= 0 ? r->shaders : NULL);
        if (dt < 0) return clear_line(), cli_fail_status(AL_ERR_ARG);
        if (rep < 0) continue;
        r->ts[rep] = r->n_tokens / dt;
        if (vk.dispatches < 0) {
            r->dispatches = -1;
            continue;
        }
        const double per = 1.0 / r->n_tokens / o->reps; /* a token's share of the mean */
        r->dispatches += vk.dispatches * per;
        r->record_ms += 1e3 * vk.record_s * per;
        r->wait_ms += 1e3 * vk.wait_s * per;
        /* timestamps on every submission, or none counted */
        r->gpu_ms = r->gpu_ms < 0 || vk.n_timed <= 0 ? -1 : r->gpu_ms + 1e3 * vk.gpu_s * per;
    }
    double sum = 0, sq = 0;
    for (int i = 0; i < o->reps; i++) sum += r->ts[i];
    r->mean_ts = sum / o->reps;
    for (int i = 0; i < o->reps; i++) sq += (r->ts[i] - r->mean_ts) * (r->ts[i] - r->mean_ts);
    r->sd_ts = o->reps > 1 ? sqrt(sq / (o->reps - 1)) : 0;
    r->mean_ms = 1000.0 * r->n_tokens / r->mean_ts;
    if (!r->is_pp && !r->own_memory) {
        bw[o->reps] = bw_probe_measure(probe, BW_PASSES_REP);
        double bw_sum = 0, roof_sum = 0;
        bool all = true;
        for (int i = 0; i < o->reps; i++) {
            double gbs = (bw[i] + bw[i + 1]) / 2;
            all &= bw[i] > 0 && bw[i + 1] > 0;
            bw_sum += gbs;
            roof_sum += 100.0 * r->ts[i] * (double)r->bytes_per_token / (gbs * 1e9);
        }
        r->bw_gbs = all ? bw_sum / o->reps : 0;
        r->roof_pct = all ? roof_sum / o->reps : 0;
    }
    return 0;
}

/* Bytes a generated token reads, on average over tokens depth .. depth + n - 1: the
 * weights it uses and the keys and values before it, which at depth 2048 are a seventh
 * of bench-1b's reads. */
static uint64_t tg_bytes_per_token(const al_model *m, const al_model_info *info, int depth,
                                   int n, al_kv_type tk, al_kv_type tv) {
    uint64_t kv = 0;
    for (int i = 0; i < n; i++) kv += al_model_kv_read_bytes(m, depth + i, tk, tv);
    return info->n_bytes_per_token + (n > 0 ? kv / (uint64_t)n : 0);
}

static uint64_t file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n > 0 ? (uint64_t)n : 0;
}

/* Runs every test of one model on one backend at one thread count, appending to res. */
static int bench_model(const bench_opts *o, int mi, const char *backend, int n_threads, int ki,
                       bench_result *res, int *n_res, bw_probe *probe) {
    const al_kv_type tk = o->ctk[ki], tv = o->ctv[ki];
    int max_tokens = 1;
    for (int i = 0; i < o->n_pp; i++) max_tokens = o->pp[i] > max_tokens ? o->pp[i] : max_tokens;
    for (int i = 0; i < o->n_tg; i++) max_tokens = o->tg[i] > max_tokens ? o->tg[i] : max_tokens;
    int max_depth = 0;
    for (int i = 0; i < o->n_depth; i++) max_depth = o->depth[i] > max_depth ? o->depth[i] : max_depth;
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    mp.n_threads = n_threads;
    mp.backend = backend;
    mp.mla_absorbed = o->mla_expand < 0;
    al_model *m = NULL;
    al_context *c = NULL;
    double t0 = cli_now_s();
    al_status st = al_model_load(o->models[mi], &mp, &m);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = max_depth + max_tokens;
    cp.type_k = tk, cp.type_v = tv;
    cp.mla_expand_min = o->mla_expand;
    al_model_info info;
    if (st == AL_OK) {
        al_model_get_info(m, &info);
        /* positions past the training context measure a model that no longer works */
        if (info.n_ctx_train > 0 && cp.n_ctx > info.n_ctx_train) {
            al_model_destroy(m);
            clear_line();
            return cli_fail("bench: depth %d plus %d tokens is more than the training context "
                            "of %s (%d)", max_depth, max_tokens, o->models[mi], info.n_ctx_train);
        }
        st = al_context_create(m, &cp, &c);
    }
    double load_ms = 1000 * (cli_now_s() - t0);
    if (st != AL_OK) {
        al_model_destroy(m);
        clear_line();
        return cli_fail_status(st);
    }
    al_backend_stats bs;
    al_model_get_backend_stats(m, &bs);
    const bool own_memory = bs.gpu && bs.weight_path && !strcmp(bs.weight_path, "staging copy");
    int32_t *ids = malloc((size_t)(max_depth + max_tokens) * sizeof *ids);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    int rc = ids && logits ? 0 : cli_fail("out of memory");
    if (ids) fill_tokens(ids, max_depth + max_tokens, info.n_vocab, 1234);
    const int n_tests = o->n_pp + o->n_tg;
    for (int k = 0; !rc && k < o->n_depth * n_tests; k++) {
        bench_result *r = &res[(*n_res)++];
        *r = (bench_result){.model = o->models[mi], .info = info, .n_threads = n_threads,
                            .is_pp = k % n_tests < o->n_pp, .load_ms = load_ms,
                            .n_depth = o->depth[k / n_tests],
                            .file_bytes = file_size(o->models[mi])};
        r->n_tokens = r->is_pp ? o->pp[k % n_tests] : o->tg[k % n_tests - o->n_pp];
        if (!r->is_pp)
            r->bytes_per_token = tg_bytes_per_token(m, &info, r->n_depth, r->n_tokens, tk, tv);
        r->kv_per_pos = al_model_kv_read_bytes(m, 1, tk, tv) - al_model_kv_read_bytes(m, 0, tk, tv);
        snprintf(r->arch, sizeof r->arch, "%s", info.arch);
        r->type_k = tk, r->type_v = tv;
        if (tk == AL_KV_F32 && tv == AL_KV_F32)
            snprintf(r->backend, sizeof r->backend, "%s", info.backend);
        else if (tk == tv)
            snprintf(r->backend, sizeof r->backend, "%s kv %s", info.backend, al_kv_type_name(tk));
        else
            snprintf(r->backend, sizeof r->backend, "%s kv %s/%s", info.backend,
                     al_kv_type_name(tk), al_kv_type_name(tv));
        r->info.arch = r->arch; /* the model's own strings die with it */
        r->info.backend = r->backend;
        r->spec = backend;
        r->own_memory = own_memory;
        rc = run_test(o, m, c, ids, logits, r, mi, probe);
    }
    free(ids);
    free(logits);
    al_context_destroy(c);
    al_model_destroy(m);
    return rc;
}

/* ---- output ------------------------------------------------------------------------------- */

typedef struct bench_env {
    char cpu[128];
    double bandwidth_gbs;
    long peak_rss_kib;
} bench_env;

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* tg speed as a share of the bandwidth bound: bytes per token / bandwidth. The
 * bandwidth measured around the row's own repetitions where there is one. */
static double roofline_pct(const bench_result *r, double gbs) {
    if (r->is_pp || r->own_memory) return 0;
    if (r->roof_pct > 0) return r->roof_pct;
    if (gbs <= 0) return 0;
    double bound_ts = gbs * 1e9 / (double)r->bytes_per_token;
    return 100.0 * r->mean_ts / bound_ts;
}

/* The bandwidth a row's roofline is taken against. */
static double row_gbs(const bench_result *r, double start_gbs) {
    if (r->own_memory) return 0;
    return r->bw_gbs > 0 ? r->bw_gbs : start_gbs;
}

/* Where a Vulkan token's time goes: replaying a recorded command buffer could save at
 * most the recording, and the device's own time bounds what fusion can. */
static void print_vk_costs(const bench_result *res, int n) {
    bool first = true;
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        if (r->is_pp || r->dispatches < 0) continue;
        char gpu[64] = "";
        if (r->gpu_ms >= 0)
            snprintf(gpu, sizeof gpu, ", of which the device ran %.3f ms", r->gpu_ms);
        printf("%s%s tg%d @ d%d, per token: %.1f dispatches, %.3f ms recording them, %.3f ms "
               "waiting%s\n", first ? "\n" : "", r->info.backend, r->n_tokens, r->n_depth,
               r->dispatches, r->record_ms, r->wait_ms, gpu);
        first = false;
    }
}

static void print_md(const bench_result *res, int n, const bench_env *env) {
    printf("| model | size | params | backend | threads | test | t/s | TTFT ms | load ms "
           "| read/token | kv/pos | GB/s | roofline |\n");
    printf("|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    bool own_memory = false;
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        char ttft[32] = "", roof[32] = "", bpt[32] = "", gbs[32] = "";
        if (r->is_pp) snprintf(ttft, sizeof ttft, "%.1f", r->mean_ms);
        else {
            /* decoding reads the weights a token uses and the keys and values before it
             * once per token: the roofline is the measured bandwidth over these bytes */
            snprintf(bpt, sizeof bpt, "%.1f MiB", r->bytes_per_token / 1048576.0);
            if (r->own_memory) {
                snprintf(roof, sizeof roof, "-");
                snprintf(gbs, sizeof gbs, "-");
                own_memory = true;
            } else {
                snprintf(roof, sizeof roof, "%.0f%%", roofline_pct(r, env->bandwidth_gbs));
                snprintf(gbs, sizeof gbs, "%.1f", row_gbs(r, env->bandwidth_gbs));
            }
        }
        char test[48];
        test_name(r, test, sizeof test);
        /* the KV cache's bytes per position: what a longer context costs (latent
         * attention: one row for every head's keys and values) */
        char kvp[32];
        snprintf(kvp, sizeof kvp, "%.1f KiB%s", r->kv_per_pos / 1024.0,
                 r->info.kv_latent_dim ? " latent" : "");
        printf("| %s | %.2f GiB | %.2f B | %s | %d | %s | %.2f ± %.2f | %s | %.0f | %s | %s | %s | %s |\n",
               base_name(r->model), (double)r->file_bytes / (1u << 30), r->info.n_params / 1e9,
               r->info.backend, r->n_threads, test, r->mean_ts, r->sd_ts, ttft, r->load_ms, bpt,
               kvp, gbs, roof);
    }
    print_vk_costs(res, n);
    if (own_memory)
        printf("\nno roofline for a GPU with its own memory (-): the bandwidth below is the "
               "host's; `anyllm devices --bandwidth` measures the GPU's\n");
    printf("\nbuild %s | CPU %s | memory read bandwidth %.1f GB/s (measured at start; a tg row's "
           "GB/s and roofline: measured around its repetitions) | peak RSS %.0f MiB\n",
           AL_BUILD, env->cpu, env->bandwidth_gbs, env->peak_rss_kib / 1024.0);
}

static void print_json(const bench_result *res, int n, const bench_env *env) {
    printf("[\n");
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        printf("  {\"build_commit\": \"%s\", \"cpu_info\": \"%s\", \"backends\": \"%s\", "
               "\"model_filename\": \"%s\", \"model_type\": \"%s\", \"model_size\": %" PRIu64 ", "
               "\"model_n_params\": %" PRIu64 ", \"n_threads\": %d, \"n_prompt\": %d, "
               "\"n_gen\": %d, \"n_depth\": %d, \"avg_ns\": %.0f, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, "
               "\"ttft_ms\": %.3f, \"load_ms\": %.3f, \"bandwidth_gbs\": %.2f, "
               "\"bytes_per_token\": %" PRIu64 ", \"roofline_pct\": %.2f, \"peak_rss_mib\": %.1f, "
               "\"weights_copied_bytes\": %" PRIu64 "",
               AL_BUILD, env->cpu, r->info.backend, r->model, r->info.arch, r->file_bytes,
               r->info.n_params, r->n_threads, r->is_pp ? r->n_tokens : 0,
               r->is_pp ? 0 : r->n_tokens, r->n_depth, r->mean_ms * 1e6, r->mean_ts, r->sd_ts,
               r->is_pp ? r->mean_ms : 0, r->load_ms, row_gbs(r, env->bandwidth_gbs),
               r->bytes_per_token, roofline_pct(r, env->bandwidth_gbs),
               env->peak_rss_kib / 1024.0, r->info.n_bytes_copied);
        printf(", \"type_k\": \"%s\", \"type_v\": \"%s\", \"kv_bytes_per_pos\": %" PRIu64,
               al_kv_type_name(r->type_k), al_kv_type_name(r->type_v), r->kv_per_pos);
        /* Vulkan rows: how many dispatches a token costs (fusion shows here) */
        if (r->dispatches >= 0)
            printf(", \"vk_dispatches_per_token\": %.2f, \"vk_record_ms_per_token\": %.4f, "
                   "\"vk_wait_ms_per_token\": %.4f", r->dispatches, r->record_ms, r->wait_ms);
        if (r->dispatches >= 0 && r->gpu_ms >= 0)
            printf(", \"vk_gpu_ms_per_token\": %.4f", r->gpu_ms);
        printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("]\n");
}

static void print_csv(const bench_result *res, int n, const bench_env *env) {
    printf("build_commit,cpu_info,backends,model_filename,model_type,model_size,model_n_params,"
           "n_threads,n_prompt,n_gen,n_depth,avg_ns,avg_ts,stddev_ts,ttft_ms,load_ms,bandwidth_gbs,"
           "roofline_pct\n");
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        printf("%s,\"%s\",%s,%s,%s,%" PRIu64 ",%" PRIu64 ",%d,%d,%d,%d,%.0f,%.4f,%.4f,%.3f,%.3f,%.2f,%.2f\n",
               AL_BUILD, env->cpu, r->info.backend, r->model, r->info.arch, r->file_bytes,
               r->info.n_params, r->n_threads, r->is_pp ? r->n_tokens : 0,
               r->is_pp ? 0 : r->n_tokens, r->n_depth, r->mean_ms * 1e6, r->mean_ts, r->sd_ts,
               r->is_pp ? r->mean_ms : 0, r->load_ms, row_gbs(r, env->bandwidth_gbs),
               roofline_pct(r, env->bandwidth_gbs));
    }
}

/* Two panels, prefill and decode, with a line per model, backend, thread count and
 * test size over the depths: where two backends' lines cross is what the picture is
 * for. */
static int plot_results(const char *path, const bench_result *res, int n) {
    static plot_panel pan[2];
    pan[0] = (plot_panel){.title = "prefill (pp)", .x_label = "depth (tokens in the context)",
                          .y_label = "tokens/s"};
    pan[1] = (plot_panel){.title = "decode (tg)", .x_label = "depth (tokens in the context)",
                          .y_label = "tokens/s"};
    bool many_models = false;
    for (int i = 1; i < n; i++) many_models |= strcmp(res[i].model, res[0].model) != 0;
    for (int i = 0; i < n; i++) {
        const bench_result *r = &res[i];
        plot_panel *p = &pan[r->is_pp ? 0 : 1];
        char label[96];
        snprintf(label, sizeof label, "%s%s%s %s%d t=%d", many_models ? base_name(r->model) : "",
                 many_models ? " " : "", r->spec, r->is_pp ? "pp" : "tg", r->n_tokens,
                 r->n_threads);
        int k = 0;
        while (k < p->n_series && strcmp(p->s[k].label, label)) k++;
        if (k == p->n_series) {
            if (k == PLOT_MAX_SERIES) return cli_fail("bench --plot: over %d lines", k);
            p->s[p->n_series++] = (plot_series){0};
            snprintf(p->s[k].label, sizeof p->s[k].label, "%s", label);
            snprintf(p->s[k].key, sizeof p->s[k].key, "%s %s t=%d", r->model, r->spec,
                     r->n_threads);
        }
        if (p->s[k].n < PLOT_MAX_POINTS) {
            p->s[k].x[p->s[k].n] = r->n_depth;
            p->s[k].y[p->s[k].n++] = r->mean_ts;
        }
    }
    char title[256];
    snprintf(title, sizeof title, "anyllm bench%s%s: tokens/s against context depth",
             many_models ? "" : ", ", many_models ? "" : base_name(res[0].model));
    if (!pan[0].n_series) return plot_svg(path, title, &pan[1], 1); /* -p 0 */
    return plot_svg(path, title, pan, pan[1].n_series ? 2 : 1);
}

/* ---- options ------------------------------------------------------------------------------ */

/* "128,512" -> {128, 512}; each in [lo, hi]. */
/* "f32,q8_0": KV cache types (al_kv_type_parse), at most MAX_LIST. */
static int parse_kv_list(const char *opt, const char *s, al_kv_type *out, int *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) return cli_fail("bench: %s: at most %d types", opt, MAX_LIST);
        if (al_kv_type_parse(t, &out[*n]) != AL_OK)
            return cli_fail("bench: %s %s: %s", opt, s, al_last_error());
        (*n)++;
    }
    return *n ? 0 : cli_fail("bench: %s needs a type (f32, f16, q8_0, q4_0)", opt);
}

static int parse_list(const char *opt, const char *s, int lo, int hi, int *out, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < lo || v > hi || (*end && *end != ',') || *n == MAX_LIST)
            return cli_fail("%s %s: expected up to %d comma-separated integers in [%d, %d]", opt,
                            s, MAX_LIST, lo, hi);
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *n ? 0 : cli_fail("%s: empty list", opt);
}

static void bench_usage(void) {
    printf("usage: anyllm bench -m FILE [-m FILE ...] [options]\n"
           "Prompt processing (pp: one batch of N tokens) and text generation (tg: N tokens\n"
           "one at a time) in tokens/s, mean and sd over the repetitions after a warm-up,\n"
           "with the memory bandwidth measured first and tg's share of its roofline.\n"
           "options (default in brackets):\n"
           "  -m, --model FILE         a model; repeat for several [required]\n"
           "  -p, --n-prompt N,...     prompt lengths; 0 skips pp [512]\n"
           "  -n, --n-gen N,...        generated tokens; 0 skips tg [128]\n"
           "  -d, --n-depth N,...      tokens already in the context before each test [0]\n"
           "  -t, --threads N,...      CPU threads [2]\n"
           "  -r, --repetitions N      timed runs per test [5]\n"
           "  --backend B              cpu, cpu:precise, vulkan, vulkan:N, auto, or all (the\n"
           "                           CPU and every Vulkan device); repeat to compare\n"
           "                           side by side [cpu]\n"
           "  -o, --output FMT         md, json (llama-bench's fields) or csv [md]\n"
           "  -ctk, --cache-type-k T,... the KV cache's keys: f32, f16, q8_0, q4_0; a row\n"
           "                           each, the values of the same type unless -ctv [f32]\n"
           "  -ctv, --cache-type-v T,... the values' types, paired with -ctk's\n"
           "  --mla-expand N           latent attention (deepseek2): batches of at least N\n"
           "                           tokens take the expanded form; -1: never [192]\n"
           "  --plot FILE.svg          draw t/s against depth, a line per backend and test\n"
           "  --no-repack              the CPU reads the weights in place, not in its faster\n"
           "                           layout (ANYLLM_X16=0): a quicker load, a slower decode\n"
           "  --save-profile           store the figures as this machine's device profile of\n"
           "                           each model, which --backend auto reads (anyllm profile\n"
           "                           shows it)\n"
           "  --spec ngram -f FILE     instead: decode speed with and without speculative\n"
           "                           decoding, on FILE's greedy continuation of -n tokens\n"
           "                           (alternating, -r pairs), the drafts' acceptance, and\n"
           "                           whether the texts agree\n"
           "  --model-draft FILE       the same with a draft model of the model's vocabulary\n"
           "  --draft-max N            the longest draft (--spec) [8]\n"
           "  -h, --help               this help\n"
           "With ANYLLM_VK_PROFILE=1 in the environment, a table per Vulkan test follows:\n"
           "the device's time per shader build, each dispatch timed on its own.\n");
}

/* Every model can at least be opened: a typo should fail at once, not after the
 * bandwidth measurement and the models before it. */
static int check_models(const bench_opts *o) {
    for (int i = 0; i < o->n_models; i++) {
        FILE *f = fopen(o->models[i], "rb");
        if (!f) return cli_fail("bench: cannot open %s: %s", o->models[i], strerror(errno));
        fclose(f);
    }
    return 0;
}

static int parse_bench_opts(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.pp = {512}, .n_pp = 1, .tg = {128}, .n_tg = 1, .reps = 5, .format = "md",
                      .n_depth = 1};
    o->threads[0] = 2;
    o->n_threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return bench_usage(), -1;
        if (!strcmp(a, "--save-profile")) {
            o->save_profile = true;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            cli_no_repack();
            continue;
        }
        if (!v) return cli_fail("bench: option %s needs a value", a);
        i++;
        int rc = 0, reps[MAX_LIST], n_reps;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (o->n_models == MAX_MODELS) return cli_fail("bench: at most %d models", MAX_MODELS);
            o->models[o->n_models++] = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            rc = parse_list(a, v, 0, 1 << 16, o->pp, &o->n_pp);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            rc = parse_list(a, v, 0, 1 << 16, o->tg, &o->n_tg);
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            rc = parse_list(a, v, 0, 1 << 20, o->depth, &o->n_depth);
        } else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
                   !strcmp(a, "--cache-type-v")) {
            const bool k = a[3] == 'k' || !strcmp(a, "--cache-type-k");
            rc = parse_kv_list(a, v, k ? o->ctk : o->ctv, k ? &o->n_ctk : &o->n_ctv);
        } else if (!strcmp(a, "--plot")) {
            o->plot = v;
        } else if (!strcmp(a, "--spec")) {
            o->spec = v;
        } else if (!strcmp(a, "--model-draft") || !strcmp(a, "-md")) {
            o->draft = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            o->prompt = v;
        } else if (!strcmp(a, "--mla-expand")) {
            int me[MAX_LIST], n_me;
            rc = parse_list(a, v, -1, 1 << 24, me, &n_me);
            o->mla_expand = me[0];
        } else if (!strcmp(a, "--draft-max")) {
            int dm[MAX_LIST], n_dm;
            rc = parse_list(a, v, 1, SPEC_DRAFT_LIMIT, dm, &n_dm);
            o->draft_max = dm[0];
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            rc = parse_list(a, v, 1, 256, o->threads, &o->n_threads);
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            rc = parse_list(a, v, 1, MAX_REPS, reps, &n_reps);
            o->reps = reps[0];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (strcmp(v, "md") && strcmp(v, "json") && strcmp(v, "csv"))
                return cli_fail("bench: -o %s: expected md, json or csv", v);
            o->format = v;
        } else if (!strcmp(a, "--backend")) {
            if (o->n_backends == MAX_LIST) return cli_fail("bench: at most %d backends", MAX_LIST);
            o->backends[o->n_backends++] = v;
        } else {
            return cli_fail("bench: unknown option %s (see anyllm bench --help)", a);
        }
        if (rc) return rc;
    }
    /* a 0 in -p or -n means "skip" */
    int k = 0;
    for (int i = 0; i < o->n_pp; i++) if (o->pp[i] > 0) o->pp[k++] = o->pp[i];
    o->n_pp = k;
    k = 0;
    for (int i = 0; i < o->n_tg; i++) if (o->tg[i] > 0) o->tg[k++] = o->tg[i];
    o->n_tg = k;
    if (!o->n_models) return cli_fail("bench: -m FILE is required");
    if (!o->n_backends) o->backends[o->n_backends++] = "cpu";
    if (o->n_backends == 1 && !strcmp(o->backends[0], "all")) {
        o->n_backends = al_backend_list(o->backends, MAX_LIST);
        if (o->n_backends > MAX_LIST) o->n_backends = MAX_LIST;
    } else {
        for (int i = 0; i < o->n_backends; i++)
            if (!strcmp(o->backends[i], "all"))
                return cli_fail("bench: --backend all stands alone (it is every backend)");
    }
    if (!o->n_pp && !o->n_tg) return cli_fail("bench: nothing to run (-p 0 and -n 0)");
    if (o->n_ctv && o->n_ctv != (o->n_ctk ? o->n_ctk : 1))
        return cli_fail("bench: -ctv lists %d types and -ctk %d: they pair up, a row each",
                        o->n_ctv, o->n_ctk ? o->n_ctk : 1);
    if (!o->n_ctk) o->n_ctk = 1; /* f32 */
    for (int i = 0; !o->n_ctv && i < o->n_ctk; i++) o->ctv[i] = o->ctk[i];
    return check_models(o);
}

/* The results of one model as its device profile. "auto" names no backend a later run
 * could ask for, so its figures are left out. */
static int save_profile(const char *model, const bench_result *res, int n_res) {
    profile_point *pts = calloc((size_t)n_res, sizeof *pts);
    if (!pts) return cli_fail("out of memory");
    int n = 0;
    for (int i = 0; i < n_res; i++) {
        const bench_result *r = &res[i];
        /* the profile is of the default cache; auto names no backend */
        if (r->model != model || !strcmp(r->spec, "auto") || r->type_k || r->type_v) continue;
        pts[n++] = (profile_point){
            .backend = !strcmp(r->spec, "vulkan") ? "vulkan:0" : r->spec,
            .desc = r->info.backend, .is_pp = r->is_pp, .n_tokens = r->n_tokens,
            .n_depth = r->n_depth, .n_threads = r->n_threads, .ts = r->mean_ts, .sd = r->sd_ts};
    }
    char path[1024];
    int rc = n ? profile_save(model, pts, n, path, sizeof path)
               : cli_fail("bench: --save-profile: no figures of a named backend for %s (auto "
                          "is not one)", model);
    if (!rc) fprintf(stderr, "bench: profile of %s saved: %s\n", model, path);
    free(pts);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse_bench_opts(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.spec || o.prompt || o.draft_max || o.draft) {
        if (!o.spec && o.draft) o.spec = "draft";
        if (!o.spec) return cli_fail("bench: -f and --draft-max go with --spec ngram or "
                                     "--model-draft FILE");
        spec_bench sb = {.models = o.models, .n_models = o.n_models, .backends = o.backends,
                         .n_backends = o.n_backends, .n_threads = o.threads[0],
                         .n_gen = o.n_tg ? o.tg[0] : 128, .reps = o.reps,
                         .draft_max = o.draft_max ? o.draft_max : 8, .kind = o.spec,
                         .prompt = o.prompt, .draft = o.draft};
        return bench_spec(&sb);
    }
    int max_res =
        o.n_models * o.n_backends * o.n_threads * o.n_ctk * o.n_depth * (o.n_pp + o.n_tg);
    bench_result *res = calloc((size_t)max_res, sizeof *res);
    if (!res) return cli_fail("out of memory");
    bench_env env = {0};
    cpu_name(env.cpu, sizeof env.cpu);
    int max_threads = 1;
    for (int i = 0; i < o.n_threads; i++) max_threads = o.threads[i] > max_threads ? o.threads[i] : max_threads;
    if (isatty(2))
        fprintf(stderr, "bench: measuring memory read bandwidth with %d threads...", max_threads);
    bw_probe probe = bw_probe_start(max_threads);
    env.bandwidth_gbs = bw_probe_measure(&probe, 5);
    int n_res = 0;
    for (int mi = 0; !rc && mi < o.n_models; mi++)
        for (int bi = 0; !rc && bi < o.n_backends; bi++)
            for (int ti = 0; !rc && ti < o.n_threads; ti++)
                for (int ki = 0; !rc && ki < o.n_ctk; ki++)
                    rc = bench_model(&o, mi, o.backends[bi], o.threads[ti], ki, res, &n_res,
                                     &probe);
    bw_probe_stop(&probe);
    clear_line();
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) env.peak_rss_kib = ru.ru_maxrss;
    if (!rc) {
        if (!strcmp(o.format, "json")) print_json(res, n_res, &env);
        else if (!strcmp(o.format, "csv")) print_csv(res, n_res, &env);
        else print_md(res, n_res, &env);
        /* stdout stays JSON or CSV in those formats */
        print_shader_times(strcmp(o.format, "md") ? stderr : stdout, res, n_res, o.reps);
        if (o.plot) rc = plot_results(o.plot, res, n_res);
        for (int mi = 0; !rc && o.save_profile && mi < o.n_models; mi++)
            rc = save_profile(o.models[mi], res, n_res);
    }
    for (int i = 0; i < n_res; i++) free(res[i].shaders);
    free(res);
    return rc;
}
