/* metrics.h: what GET /metrics reports, in the Prometheus text format (version 0.0.4).
 *
 * Counters only grow; the rates are lifetime averages over the time the engine spent
 * evaluating (prompt tokens per second of prefill, generated tokens per second of
 * decode steps, which with several sequences is the aggregate rate of the batch).
 *
 * Routers read a few gauges and counters to pick a replica: waiting and running
 * requests, KV-cache use, prefix-cache hits, and whether the server takes requests at
 * all. Each is written under anyllm's own name and again under the name vLLM gives it,
 * which is what llm-d's endpoint picker and the Gateway API Inference Extension read by
 * default (the mapping is in the README's Serve section).
 * All functions are thread-safe.
 */
#ifndef AL_SERVER_METRICS_H
#define AL_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "server/server.h"

typedef enum srv_endpoint {
    SRV_EP_CHAT,        /* POST /v1/chat/completions */
    SRV_EP_COMPLETIONS, /* POST /v1/completions      */
    SRV_EP_MESSAGES,    /* POST /v1/messages         */
    SRV_EP_RESPONSES,   /* POST /v1/responses        */
    SRV_EP_MODELS,      /* GET /v1/models            */
    SRV_EP_HEALTH,      /* GET /health               */
    SRV_EP_METRICS,     /* GET /metrics              */
    SRV_EP_PAGE,        /* GET /                     */
    SRV_EP_OTHER,       /* anything else (404)       */
    SRV_EP_COUNT
} srv_endpoint;

/* The path of an endpoint as /metrics labels it. */
const char *srv_endpoint_path(srv_endpoint ep);

/* SRV_KV_BLOCK: the block size vllm:cache_config_info reports, in positions (anyllm's
 * cache has no blocks; routers that size a prefix index need one) */
enum { SRV_TTFT_BUCKETS = 11, SRV_STATUS_KEYS = 64, SRV_KV_BLOCK = 16 };

typedef struct srv_metrics {
    pthread_mutex_t lock;
    struct {
        srv_endpoint ep;
        int status;
        uint64_t n;
    } requests[SRV_STATUS_KEYS]; /* (endpoint, status) pairs seen so far */
    int n_keys;
    uint64_t prompt_tokens;      /* tokens of accepted prompts                   */
    uint64_t prompt_evaluated;   /* of those, evaluated (the rest came from cache) */
    double prompt_seconds;
    uint64_t generated_tokens;
    uint64_t decode_steps; /* evaluations of generated tokens: each one batch of sequences */
    double decode_seconds;
    uint64_t ttft_counts[SRV_TTFT_BUCKETS + 1]; /* the last one is +Inf */
    double ttft_sum;
    uint64_t ttft_n;
    uint64_t cancelled;          /* sequences ended because the client went away  */
    char prefill_backend[96], decode_backend[96]; /* al_model_info.backend of each phase */
    uint64_t handoffs, handoff_bytes; /* KV hand-offs between them, bytes they copied  */
    uint64_t drafts, drafted, accepted; /* n-gram drafts checked, their tokens, taken */
    double handoff_seconds;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status);
void srv_metrics_prompt(srv_metrics *m, int n_prompt, int n_evaluated, double seconds);
void srv_metrics_decode(srv_metrics *m, int n_tokens, double seconds);
void srv_metrics_ttft(srv_metrics *m, double seconds);
void srv_metrics_cancelled(srv_metrics *m);
/* The backends of the two phases (the same one twice without a split). */
void srv_metrics_backends(srv_metrics *m, const char *prefill, const char *decode);
void srv_metrics_handoff(srv_metrics *m, uint64_t n_bytes, double seconds);
/* A draft of n_drafted tokens checked, n_accepted of them taken. */
void srv_metrics_spec(srv_metrics *m, int n_drafted, int n_accepted);

/* Whether the server takes requests: while the model loads, and while it drains after
 * SIGTERM, /health answers 503 and completions get 503 with Retry-After. */
typedef enum srv_state { SRV_STATE_LOADING, SRV_STATE_READY, SRV_STATE_DRAINING } srv_state;

/* "loading", "ready" or "draining". */
const char *srv_state_name(srv_state st);

/* What the exposition reports besides the counters, read by the caller at render time. */
typedef struct srv_gauges {
    srv_state state;
    int n_active, n_queued, n_slots;
    long long kv_used, kv_total; /* KV-cache positions held by running sequences, and all */
    const char *replica;         /* the replica's id (X-Replica), a label of anyllm_info  */
    const char *model;
    int n_models, n_loaded;      /* models the server answers for, and loaded now */
    unsigned long long loads, unloads; /* models loaded and unloaded so far       */
} srv_gauges;

/* Appends the whole exposition. */
void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *out);

#endif /* AL_SERVER_METRICS_H */
