/* models.h: the models one server answers for.
 *
 * A server has one model given loaded (srv_start: kept until the end), or several named
 * files (srv_add_model: `serve --models-dir DIR`, or -m more than once) that load on the
 * first request naming them, through the program's loader (srv_loader). Each loaded
 * model has an engine of its own (its slots, queue and prefix cache), so requests for
 * one model never wait behind another's. A loaded model with no request in flight is
 * unloaded
 *   - when it has been idle for --idle-unload seconds (the reaper calls srv_models_reap),
 *   - when another must load and --models-max are loaded, or the other's file does not
 *     fit in the memory the system has available (or in --models-memory): least
 *     recently used first.
 * A request for a model that is loading, or that must wait for room, waits (its client
 * may hang up meanwhile); the requests for the other models go on. Every loaded model
 * is held by the requests using it (srv_models_acquire / srv_models_release), so it is
 * never unloaded under one. Thread-safe: one lock, held only for bookkeeping; loading,
 * starting engines and unloading run outside it.
 */
#ifndef AL_SERVER_MODELS_H
#define AL_SERVER_MODELS_H

#include <jansson.h>
#include <pthread.h>

#include "server/api.h"
#include "server/engine.h"
#include "server/error.h"
#include "server/metrics.h"

typedef enum srv_model_state {
    SRV_MODEL_UNLOADED,
    SRV_MODEL_LOADING,
    SRV_MODEL_READY,
    SRV_MODEL_UNLOADING,
} srv_model_state;

typedef struct srv_model {
    char *name;           /* what /v1/models lists and a request's "model" names */
    char *path;           /* the file; NULL for a model given loaded (never unloaded) */
    long long file_bytes; /* its size, the memory it is reckoned to need      */
    /* set while READY (or UNLOADING), read by the requests holding it: */
    const al_model *m, *dm; /* the model, and its decode model or NULL          */
    void *handle;           /* the loader's, for its unload                     */
    srv_engine *engine;
    srv_api api;
    /* under the table's lock: */
    srv_model_state state;
    int refs;         /* requests holding it                              */
    double last_used; /* al_time_s() when the last holder let go          */
    char error[256];  /* why its last load failed, or ""                  */
} srv_model;

typedef struct srv_models {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a model changed state or was let go */
    srv_model *list;
    int n, cap;
    bool stopping;       /* srv_models_stop ran: nothing loads any more      */
    const srv_params *p; /* the server's (loader, limits, engine sizes)      */
    srv_metrics *metrics;
    struct srv_store *store;
    uint64_t loads, unloads; /* for /metrics */
} srv_models;

void srv_models_init(srv_models *ms, const srv_params *p, srv_metrics *metrics,
                     struct srv_store *store);
/* Stops every engine: their jobs end with an error and no model loads any more. */
void srv_models_stop(srv_models *ms);
/* Unloads everything; no model may be held any more. */
void srv_models_free(srv_models *ms);

/* A named file, loaded on first use. AL_ERR_ARG for a name given twice. */
al_status srv_models_add(srv_models *ms, const char *name, const char *path);
/* A model given loaded, with n_ctx positions per sequence: ready at once, never
 * unloaded. */
al_status srv_models_put(srv_models *ms, const char *name, const al_model *m, const al_model *dm,
                         int n_ctx);

/* The model a request names: its name, or the name without ".gguf"; NULL or "" is the
 * first model. With one model given loaded, every name is that model (clients send
 * whatever name they were configured with). -1 when there is no such model. */
int srv_models_find(srv_models *ms, const char *name);

/* The model at index i, loaded if need be, held for the caller. While it waits (for a
 * load, or for room) it asks gone(ud) every few tens of milliseconds and gives up when
 * the client has gone. NULL with *err set (503 while stopping, 500 when the load fails,
 * 499 when the client went away). */
srv_model *srv_models_acquire(srv_models *ms, int i, bool (*gone)(void *), void *ud,
                              srv_error *err);
/* One more hold on a model held (a stream's, besides its request's). */
void srv_models_hold(srv_models *ms, srv_model *m);
/* Lets go of a model acquired or held. NULL is a no-op. */
void srv_models_release(srv_models *ms, srv_model *m);

/* Unloads the models idle for p->idle_unload_s seconds (0: never); the number unloaded. */
int srv_models_reap(srv_models *ms);

/* Load across the loaded models: running and queued jobs, KV positions used and in all,
 * slots; and how many models are loaded. */
void srv_models_gauges(srv_models *ms, srv_gauges *g);

/* Appends anyllm_model_loaded{model="NAME"} 0/1 per model to a /metrics exposition. */
void srv_models_render(srv_models *ms, srv_buf *out);

/* /v1/models: the list object, or one model's object for name (NULL when unknown). */
json_t *srv_models_json(srv_models *ms, const char *name, long long created);

#endif /* AL_SERVER_MODELS_H */
