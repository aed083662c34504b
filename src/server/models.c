/* models.c: the models one server answers for, loaded on first use and unloaded when
 * idle or when room is needed (the design is in models.h). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "server/models.h"
#include "server/responses.h"
#include "util.h"

enum { WAIT_MS = 50 }; /* how often a waiting request looks whether its client went away */

void srv_models_init(srv_models *ms, const srv_params *p, srv_metrics *metrics,
                     struct srv_store *store) {
    *ms = (srv_models){.p = p, .metrics = metrics, .store = store};
    pthread_mutex_init(&ms->lock, NULL);
    pthread_cond_init(&ms->changed, NULL);
}

static al_status add(srv_models *ms, const char *name, const char *path, srv_model **out) {
    for (int i = 0; i < ms->n; i++)
        if (!strcmp(ms->list[i].name, name))
            return al_error(AL_ERR_ARG,
                            "two models are named '%s' (%s and %s); model names "
                            "are file names and must differ",
                            name, ms->list[i].path ? ms->list[i].path : name, path ? path : name);
    if (ms->n == ms->cap) {
        int cap = ms->cap ? 2 * ms->cap : 4;
        srv_model *grown = realloc(ms->list, (size_t)cap * sizeof *grown);
        if (!grown) return al_error(AL_ERR_NOMEM, "out of memory adding model %s", name);
        ms->list = grown;
        ms->cap = cap;
    }
    srv_model *e = &ms->list[ms->n];
    *e = (srv_model){.name = strdup(name), .path = path ? strdup(path) : NULL};
    if (!e->name || (path && !e->path)) {
        free(e->name);
        free(e->path);
        return al_error(AL_ERR_NOMEM, "out of memory adding model %s", name);
    }
    ms->n++;
    *out = e;
    return AL_OK;
}

al_status srv_models_add(srv_models *ms, const char *name, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return al_error(AL_ERR_IO, "model %s: not a readable file", path);
    srv_model *e;
    al_status st = add(ms, name, path, &e);
    if (st == AL_OK) e->file_bytes = (long long)sb.st_size;
    return st;
}

/* The chat format: the one named, or the one recognised in the model's template, or
 * for a file with none the built-in format of its architecture (Gemma). NULL (chat
 * refused, a warning printed) when none works. */
static const char *chat_format(const char *model_name, const al_model *m, const char *name) {
    const char *tmpl = al_model_chat_template(m);
    al_model_info mi;
    al_model_get_info(m, &mi);
    char *probe = NULL;
    if (!name && al_chat_template_choose(tmpl, mi.arch, &name) != AL_OK) name = NULL;
    if (name && al_chat_render(name, tmpl, NULL, 0, true, &probe) != AL_OK) name = NULL;
    al_string_free(probe);
    if (!name)
        fprintf(stderr,
                "anyllm serve: warning: %s: no chat template (%s); chat requests for "
                "it will be refused\n",
                model_name, al_last_error());
    return name;
}

/* The engine of a loaded model, and what parsing needs to know about it. */
static al_status start_engine(srv_models *ms, srv_model *e, const al_model *m, const al_model *dm,
                              int n_ctx) {
    const srv_params *p = ms->p;
    const al_vocab *v = al_model_vocab(m);
    if (!v)
        return al_error(AL_ERR_ARG, "%s: the model file has no tokenizer: %s", e->name,
                        al_last_error());
    if (n_ctx < p->n_parallel)
        return al_error(AL_ERR_ARG, "%s: %d sequences need at least as many positions, not %d",
                        e->name, p->n_parallel, n_ctx);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_checkpoints = p->n_checkpoints;
    cp.type_k = p->type_k, cp.type_v = p->type_v, cp.kv_unrotated = p->kv_unrotated;
    cp.mtp = p->draft_max > 0 && p->mtp;
    srv_engine *engine;
    /* the draft model goes with the model given loaded (serve -m FILE --model-draft) */
    const al_model *draft = e->path ? NULL : p->draft_model;
    al_status st = srv_engine_create(m, dm, p->n_parallel, &cp, p->n_queue, p->draft_max, draft,
                                     ms->metrics, &engine);
    if (st != AL_OK) return st;
    e->m = m;
    e->dm = dm;
    e->engine = engine;
    e->api = (srv_api){.vocab = v,
                       .n_vocab = al_vocab_n_tokens(v),
                       .n_ctx = n_ctx,
                       .max_tokens_default = p->max_tokens_default,
                       .tmpl_name = chat_format(e->name, m, p->chat_template),
                       .tmpl = al_model_chat_template(m),
                       .model_name = e->name,
                       .store = ms->store};
    return AL_OK;
}

al_status srv_models_put(srv_models *ms, const char *name, const al_model *m, const al_model *dm,
                         int n_ctx) {
    srv_model *e;
    al_status st = add(ms, name, NULL, &e);
    if (st != AL_OK) return st;
    if ((st = start_engine(ms, e, m, dm, n_ctx)) != AL_OK) {
        free(e->name);
        ms->n--;
        return st;
    }
    e->state = SRV_MODEL_READY;
    return AL_OK;
}

/* Loads e's file and starts its engine; outside the lock (e is LOADING, so no other
 * thread touches it). The context is the server's, capped by the model's training
 * context: a larger one would only allocate a cache the model cannot use. */
static al_status open_model(srv_models *ms, srv_model *e) {
    const srv_loader *ld = &ms->p->loader;
    const al_model *m = NULL, *dm = NULL;
    void *handle = NULL;
    double t0 = al_time_s();
    al_status st = ld->load(ld->ud, e->path, &m, &dm, &handle);
    if (st != AL_OK) return st;
    al_model_info mi;
    al_model_get_info(m, &mi);
    int n_ctx = ms->p->n_ctx;
    if (mi.n_ctx_train > 0 && mi.n_ctx_train < n_ctx) n_ctx = mi.n_ctx_train;
    if ((st = start_engine(ms, e, m, dm, n_ctx)) != AL_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", al_last_error());
        ld->unload(ld->ud, handle);
        return al_error(st, "%s", why);
    }
    e->handle = handle;
    fprintf(stderr, "anyllm serve: loaded %s (%s, %d sequences of %d positions) in %.1f s\n",
            e->name, mi.backend, ms->p->n_parallel, n_ctx, al_time_s() - t0);
    return AL_OK;
}

/* Stops e's engine and gives its model back to the loader; outside the lock (e is
 * UNLOADING and nobody holds it). */
static void close_model(srv_models *ms, srv_model *e, const char *why) {
    srv_engine_destroy(e->engine);
    e->engine = NULL;
    if (e->path) ms->p->loader.unload(ms->p->loader.ud, e->handle);
    e->handle = NULL;
    e->m = e->dm = NULL;
    /* the weights were large blocks: give the heap's free pages back to the system, so
     * that the process's memory falls back to what the models still loaded take */
    malloc_trim(0);
    if (why) fprintf(stderr, "anyllm serve: unloaded %s (%s)\n", e->name, why);
}

/* MemAvailable from /proc/meminfo in bytes, or -1 when it cannot be read. */
static long long mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Whether e may load now. When it may not, *victim is the least recently used model
 * that can be unloaded to make room (NULL: wait for one). */
static bool room_for(srv_models *ms, const srv_model *e, srv_model **victim) {
    const srv_params *p = ms->p;
    int loaded = 0;
    long long bytes = 0;
    *victim = NULL;
    for (int i = 0; i < ms->n; i++) {
        srv_model *o = &ms->list[i];
        if (o == e || o->state == SRV_MODEL_UNLOADED) continue;
        loaded++;
        bytes += o->file_bytes;
        if (o->state == SRV_MODEL_READY && o->refs == 0 && o->path &&
            (!*victim || o->last_used < (*victim)->last_used))
            *victim = o;
    }
    if (loaded == 0) return true;
    bool full = p->models_max > 0 && loaded >= p->models_max;
    if (!full && p->models_memory > 0) full = bytes + e->file_bytes > p->models_memory;
    if (!full && p->models_memory == 0) {
        long long avail = mem_available();
        full = avail >= 0 && e->file_bytes > avail;
    }
    return !full;
}

/* Waits on ms->changed (lock held) for WAIT_MS at most. */
static void wait_changed(srv_models *ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&ms->changed, &ms->lock, &ts);
}

/* One step of bringing e in (lock held, released meanwhile): make room or load. 1 when
 * something changed, 0 when the caller must wait for a model to be let go, -1 (*err
 * set) when the load failed. */
static int load_step(srv_models *ms, srv_model *e, srv_error *err) {
    srv_model *victim;
    if (!room_for(ms, e, &victim)) {
        if (!victim) return 0;
        victim->state = SRV_MODEL_UNLOADING;
        pthread_mutex_unlock(&ms->lock);
        close_model(ms, victim, "room for another");
        pthread_mutex_lock(&ms->lock);
        victim->state = SRV_MODEL_UNLOADED;
        ms->unloads++;
        pthread_cond_broadcast(&ms->changed);
        return 1;
    }
    e->state = SRV_MODEL_LOADING;
    pthread_mutex_unlock(&ms->lock);
    al_status st = open_model(ms, e);
    pthread_mutex_lock(&ms->lock);
    pthread_cond_broadcast(&ms->changed);
    if (st == AL_OK) {
        e->state = SRV_MODEL_READY;
        e->last_used = al_time_s();
        ms->loads++;
        return 1;
    }
    e->state = SRV_MODEL_UNLOADED;
    snprintf(e->error, sizeof e->error, "%s", al_last_error());
    fprintf(stderr, "anyllm serve: cannot load %s: %s\n", e->name, e->error);
    srv_fail(err, 500, "model", "model_load_failed", "model '%s' could not be loaded: %s", e->name,
             e->error);
    return -1;
}

srv_model *srv_models_acquire(srv_models *ms, int i, bool (*gone)(void *), void *ud,
                              srv_error *err) {
    pthread_mutex_lock(&ms->lock);
    srv_model *e = &ms->list[i];
    for (;;) {
        if (ms->stopping) {
            srv_fail(err, 503, NULL, "shutting_down", "the server is shutting down");
            break;
        }
        if (e->state == SRV_MODEL_READY) {
            e->refs++;
            pthread_mutex_unlock(&ms->lock);
            return e;
        }
        if (e->state == SRV_MODEL_UNLOADED) {
            int r = load_step(ms, e, err);
            if (r < 0) break;
            if (r > 0) continue;
        }
        wait_changed(ms);
        pthread_mutex_unlock(&ms->lock);
        bool left = gone(ud);
        pthread_mutex_lock(&ms->lock);
        if (left) {
            srv_fail(err, 499, NULL, "client_closed", "the client went away");
            break;
        }
    }
    pthread_mutex_unlock(&ms->lock);
    return NULL;
}

void srv_models_hold(srv_models *ms, srv_model *m) {
    pthread_mutex_lock(&ms->lock);
    m->refs++;
    pthread_mutex_unlock(&ms->lock);
}

void srv_models_release(srv_models *ms, srv_model *m) {
    if (!m) return;
    pthread_mutex_lock(&ms->lock);
    m->refs--;
    m->last_used = al_time_s();
    pthread_cond_broadcast(&ms->changed);
    pthread_mutex_unlock(&ms->lock);
}

int srv_models_reap(srv_models *ms) {
    int idle_s = ms->p->idle_unload_s, n = 0;
    if (idle_s <= 0) return 0;
    pthread_mutex_lock(&ms->lock);
    for (int i = 0; i < ms->n && !ms->stopping; i++) {
        srv_model *e = &ms->list[i];
        if (e->state != SRV_MODEL_READY || e->refs || !e->path ||
            al_time_s() - e->last_used < idle_s)
            continue;
        e->state = SRV_MODEL_UNLOADING;
        pthread_mutex_unlock(&ms->lock);
        close_model(ms, e, "idle");
        pthread_mutex_lock(&ms->lock);
        e->state = SRV_MODEL_UNLOADED;
        ms->unloads++;
        n++;
        pthread_cond_broadcast(&ms->changed);
    }
    pthread_mutex_unlock(&ms->lock);
    return n;
}

int srv_models_find(srv_models *ms, const char *name) {
    if (ms->n == 0) return -1;
    if (!name || !*name || (ms->n == 1 && !ms->list[0].path)) return 0;
    size_t n = strlen(name);
    for (int i = 0; i < ms->n; i++) {
        const char *id = ms->list[i].name;
        size_t k = strlen(id);
        if (!strcmp(id, name) || (k == n + 5 && !strncmp(id, name, n) && !strcmp(id + n, ".gguf")))
            return i;
    }
    return -1;
}

void srv_models_stop(srv_models *ms) {
    pthread_mutex_lock(&ms->lock);
    ms->stopping = true;
    pthread_cond_broadcast(&ms->changed);
    /* a READY model's engine stays while the lock is let go: only the reaper and
     * load_step unload, and both look at stopping first (or hold a victim nobody
     * holds, whose engine ends with it anyway) */
    for (int i = 0; i < ms->n; i++) {
        srv_model *e = &ms->list[i];
        if (e->state != SRV_MODEL_READY) continue;
        srv_engine *engine = e->engine;
        pthread_mutex_unlock(&ms->lock);
        srv_engine_stop(engine);
        pthread_mutex_lock(&ms->lock);
    }
    pthread_mutex_unlock(&ms->lock);
}

void srv_models_free(srv_models *ms) {
    for (int i = 0; i < ms->n; i++) {
        srv_model *e = &ms->list[i];
        if (e->engine) close_model(ms, e, NULL);
        free(e->name);
        free(e->path);
    }
    free(ms->list);
    pthread_cond_destroy(&ms->changed);
    pthread_mutex_destroy(&ms->lock);
    *ms = (srv_models){0};
}

void srv_models_gauges(srv_models *ms, srv_gauges *g) {
    pthread_mutex_lock(&ms->lock);
    g->n_models = ms->n;
    g->loads = ms->loads;
    g->unloads = ms->unloads;
    for (int i = 0; i < ms->n; i++) {
        srv_model *e = &ms->list[i];
        if (e->state != SRV_MODEL_READY) continue;
        int active, queued;
        long long kv;
        srv_engine_counts(e->engine, &active, &queued, &kv);
        g->n_loaded++;
        g->n_active += active;
        g->n_queued += queued;
        g->kv_used += kv;
        g->n_slots += ms->p->n_parallel;
        g->kv_total += (long long)ms->p->n_parallel * e->api.n_ctx;
    }
    pthread_mutex_unlock(&ms->lock);
}

void srv_models_render(srv_models *ms, srv_buf *out) {
    srv_buf_str(out, "# HELP anyllm_model_loaded 1 while the model is loaded, else 0.\n"
                     "# TYPE anyllm_model_loaded gauge\n");
    pthread_mutex_lock(&ms->lock);
    for (int i = 0; i < ms->n; i++) {
        srv_buf_str(out, "anyllm_model_loaded{model=\"");
        for (const char *c = ms->list[i].name; *c; c++) { /* a label value's escapes */
            if (*c == '\\' || *c == '"') srv_buf_add(out, "\\", 1);
            if (*c == '\n')
                srv_buf_str(out, "\\n");
            else
                srv_buf_add(out, c, 1);
        }
        srv_buf_printf(out, "\"} %d\n", ms->list[i].state == SRV_MODEL_READY);
    }
    pthread_mutex_unlock(&ms->lock);
}

static const char *state_word(srv_model_state st) {
    switch (st) {
    case SRV_MODEL_LOADING:
        return "loading";
    case SRV_MODEL_READY:
        return "loaded";
    case SRV_MODEL_UNLOADING:
        return "unloading";
    default:
        return "unloaded";
    }
}

/* One model as /v1/models lists it; with named files, also whether it is loaded now. */
static json_t *model_json(const srv_model *e, long long created) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s}", "id", e->name, "object", "model", "created",
                          (json_int_t)created, "owned_by", "anyllm");
    if (o && e->path) json_object_set_new(o, "status", json_string(state_word(e->state)));
    return o;
}

json_t *srv_models_json(srv_models *ms, const char *name, long long created) {
    pthread_mutex_lock(&ms->lock);
    json_t *o = NULL;
    if (name) {
        for (int i = 0; i < ms->n && !o; i++)
            if (!strcmp(ms->list[i].name, name)) o = model_json(&ms->list[i], created);
    } else {
        json_t *data = json_array();
        for (int i = 0; i < ms->n && data; i++)
            json_array_append_new(data, model_json(&ms->list[i], created));
        o = data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL;
    }
    pthread_mutex_unlock(&ms->lock);
    return o;
}
