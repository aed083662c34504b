/* metrics.c: request counters, token totals and rates, and the time-to-first-token
 * histogram, written out as Prometheus text (see metrics.h). */
#include <stdio.h>
#include <string.h>

#include "server/metrics.h"

/* Upper bounds of the time-to-first-token buckets, in seconds: a CPU serving several
 * sequences can take seconds, so the range goes well past what a GPU would need. */
static const double ttft_le[SRV_TTFT_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60, 120};

const char *srv_endpoint_path(srv_endpoint ep) {
    static const char *const paths[SRV_EP_COUNT] = {
        [SRV_EP_CHAT] = "/v1/chat/completions", [SRV_EP_COMPLETIONS] = "/v1/completions",
        [SRV_EP_MESSAGES] = "/v1/messages", [SRV_EP_RESPONSES] = "/v1/responses",
        [SRV_EP_MODELS] = "/v1/models", [SRV_EP_HEALTH] = "/health",
        [SRV_EP_METRICS] = "/metrics", [SRV_EP_PAGE] = "/", [SRV_EP_OTHER] = "other",
    };
    return (unsigned)ep < SRV_EP_COUNT ? paths[ep] : "other";
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

void srv_metrics_free(srv_metrics *m) { pthread_mutex_destroy(&m->lock); }

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status) {
    pthread_mutex_lock(&m->lock);
    int i = 0;
    while (i < m->n_keys && !(m->requests[i].ep == ep && m->requests[i].status == status)) i++;
    if (i == m->n_keys && m->n_keys < SRV_STATUS_KEYS) {
        m->requests[i].ep = ep;
        m->requests[i].status = status;
        m->requests[i].n = 0;
        m->n_keys++;
    }
    if (i < m->n_keys) m->requests[i].n++; /* a 65th distinct pair is not counted */
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_prompt(srv_metrics *m, int n_prompt, int n_evaluated, double seconds) {
    pthread_mutex_lock(&m->lock);
    m->prompt_tokens += (uint64_t)n_prompt;
    m->prompt_evaluated += (uint64_t)n_evaluated;
    m->prompt_seconds += seconds;
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_decode(srv_metrics *m, int n_tokens, double seconds) {
    pthread_mutex_lock(&m->lock);
    m->generated_tokens += (uint64_t)n_tokens;
    m->decode_steps++;
    m->decode_seconds += seconds;
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_ttft(srv_metrics *m, double seconds) {
    pthread_mutex_lock(&m->lock);
    int b = 0;
    while (b < SRV_TTFT_BUCKETS && seconds > ttft_le[b]) b++;
    m->ttft_counts[b]++;
    m->ttft_sum += seconds;
    m->ttft_n++;
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_cancelled(srv_metrics *m) {
    pthread_mutex_lock(&m->lock);
    m->cancelled++;
    pthread_mutex_unlock(&m->lock);
}

const char *srv_state_name(srv_state st) {
    return st == SRV_STATE_LOADING ? "loading" : st == SRV_STATE_DRAINING ? "draining" : "ready";
}

void srv_metrics_backends(srv_metrics *m, const char *prefill, const char *decode) {
    pthread_mutex_lock(&m->lock);
    snprintf(m->prefill_backend, sizeof m->prefill_backend, "%s", prefill);
    snprintf(m->decode_backend, sizeof m->decode_backend, "%s", decode);
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_handoff(srv_metrics *m, uint64_t n_bytes, double seconds) {
    pthread_mutex_lock(&m->lock);
    m->handoffs++;
    m->handoff_bytes += n_bytes;
    m->handoff_seconds += seconds;
    pthread_mutex_unlock(&m->lock);
}

void srv_metrics_spec(srv_metrics *m, int n_drafted, int n_accepted) {
    pthread_mutex_lock(&m->lock);
    m->drafts++;
    m->drafted += (uint64_t)n_drafted;
    m->accepted += (uint64_t)n_accepted;
    pthread_mutex_unlock(&m->lock);
}

static void header(srv_buf *out, const char *name, const char *type, const char *help) {
    srv_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Which backend runs each phase, and the KV hand-offs between them (lock held). The
 * names are al_model_info.backend's: letters, digits, spaces and ()., only. */
static void render_phases(const srv_metrics *m, srv_buf *out) {
    header(out, "anyllm_phase_backend", "gauge",
           "The backend that runs each phase (prefill: prompts; decode: generated tokens).");
    srv_buf_printf(out, "anyllm_phase_backend{phase=\"prefill\",backend=\"%s\"} 1\n",
                   m->prefill_backend);
    srv_buf_printf(out, "anyllm_phase_backend{phase=\"decode\",backend=\"%s\"} 1\n",
                   m->decode_backend);
    header(out, "anyllm_kv_handoffs_total", "counter",
           "KV caches handed between the prefill and the decode backend.");
    srv_buf_printf(out, "anyllm_kv_handoffs_total %llu\n", (unsigned long long)m->handoffs);
    header(out, "anyllm_kv_handoff_bytes_copied_total", "counter",
           "Bytes those hand-offs copied (0 where the backends share the memory).");
    srv_buf_printf(out, "anyllm_kv_handoff_bytes_copied_total %llu\n",
                   (unsigned long long)m->handoff_bytes);
    header(out, "anyllm_kv_handoff_seconds_total", "counter", "Time spent in those hand-offs.");
    srv_buf_printf(out, "anyllm_kv_handoff_seconds_total %.6f\n", m->handoff_seconds);
    static const char *const spec[3][2] = {
        {"anyllm_spec_drafts_total", "N-gram drafts checked (serve --spec ngram)."},
        {"anyllm_spec_draft_tokens_total", "Tokens those drafts proposed."},
        {"anyllm_spec_accepted_tokens_total", "Drafted tokens the model took."}};
    const uint64_t v[3] = {m->drafts, m->drafted, m->accepted};
    for (int i = 0; i < 3; i++) {
        header(out, spec[i][0], "counter", spec[i][1]);
        srv_buf_printf(out, "%s %llu\n", spec[i][0], (unsigned long long)v[i]);
    }
}

/* One sample without labels, with its HELP and TYPE lines. */
static void sample(srv_buf *out, const char *name, const char *type, const char *help,
                   double v) {
    header(out, name, type, help);
    srv_buf_printf(out, "%s %.15g\n", name, v); /* integers exact below 1e15 */
}

/* A label value as the text format wants it: backslash, quote and newline escaped. */
static void label_value(srv_buf *out, const char *v) {
    for (; v && *v; v++) {
        if (*v == '\\' || *v == '"') srv_buf_printf(out, "\\%c", *v);
        else if (*v == '\n') srv_buf_str(out, "\\n");
        else srv_buf_add(out, v, 1);
    }
}

/* The lifetime counters and rates (m->lock held). */
static void render_counters(srv_metrics *m, srv_buf *out) {
    header(out, "anyllm_requests_total", "counter",
           "HTTP requests answered, by endpoint and status.");
    for (int i = 0; i < m->n_keys; i++)
        srv_buf_printf(out, "anyllm_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                       srv_endpoint_path(m->requests[i].ep), m->requests[i].status,
                       (unsigned long long)m->requests[i].n);
    sample(out, "anyllm_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
           (double)m->prompt_tokens);
    sample(out, "anyllm_prompt_tokens_evaluated_total", "counter",
           "Prompt tokens evaluated (the others were reused from a sequence's cache).",
           (double)m->prompt_evaluated);
    sample(out, "anyllm_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens found in a sequence's cache and not evaluated again.",
           (double)(m->prompt_tokens - m->prompt_evaluated));
    sample(out, "anyllm_generated_tokens_total", "counter", "Tokens generated.",
           (double)m->generated_tokens);
    sample(out, "anyllm_decode_steps_total", "counter",
           "Decode steps, each one batch of sequences: tokens generated / steps is the mean "
           "batch.", (double)m->decode_steps);
    sample(out, "anyllm_prompt_tokens_per_second", "gauge",
           "Prompt processing rate: evaluated prompt tokens per second of prefill.",
           m->prompt_seconds > 0 ? (double)m->prompt_evaluated / m->prompt_seconds : 0.0);
    sample(out, "anyllm_generation_tokens_per_second", "gauge",
           "Generation rate of the whole batch: tokens per second of decode steps.",
           m->decode_seconds > 0 ? (double)m->generated_tokens / m->decode_seconds : 0.0);
    sample(out, "anyllm_cancelled_total", "counter", "Sequences ended because the client left.",
           (double)m->cancelled);
}

/* The time-to-first-token histogram (m->lock held). */
static void render_ttft(srv_metrics *m, srv_buf *out) {
    header(out, "anyllm_time_to_first_token_seconds", "histogram",
           "From a request's arrival to its first generated token.");
    uint64_t cum = 0;
    for (int b = 0; b <= SRV_TTFT_BUCKETS; b++) {
        cum += m->ttft_counts[b];
        if (b < SRV_TTFT_BUCKETS)
            srv_buf_printf(out, "anyllm_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n",
                           ttft_le[b], (unsigned long long)cum);
        else
            srv_buf_printf(out, "anyllm_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n",
                           (unsigned long long)cum);
    }
    srv_buf_printf(out, "anyllm_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum);
    srv_buf_printf(out, "anyllm_time_to_first_token_seconds_count %llu\n",
                   (unsigned long long)m->ttft_n);
}

/* What the server is doing now: state, sequences, queue, KV cache. */
static void render_gauges(const srv_gauges *g, srv_buf *out) {
    header(out, "anyllm_info", "gauge", "Always 1; the labels name the replica and the model.");
    srv_buf_str(out, "anyllm_info{replica=\"");
    label_value(out, g->replica);
    srv_buf_str(out, "\",model=\"");
    label_value(out, g->model);
    srv_buf_str(out, "\"} 1\n");
    header(out, "anyllm_state", "gauge",
           "1 for the state the server is in: loading, ready (taking requests) or draining.");
    for (srv_state st = SRV_STATE_LOADING; st <= SRV_STATE_DRAINING; st++)
        srv_buf_printf(out, "anyllm_state{state=\"%s\"} %d\n", srv_state_name(st), g->state == st);
    sample(out, "anyllm_ready", "gauge", "1 while the server takes requests, else 0.",
           g->state == SRV_STATE_READY);
    sample(out, "anyllm_active_sequences", "gauge", "Sequences being prefilled or decoded.",
           g->n_active);
    sample(out, "anyllm_queue_depth", "gauge", "Requests waiting for a free sequence.",
           g->n_queued);
    sample(out, "anyllm_sequence_slots", "gauge", "Sequences the server decodes together.",
           g->n_slots);
    sample(out, "anyllm_kv_cache_used_positions", "gauge",
           "KV-cache positions held by running sequences.", (double)g->kv_used);
    sample(out, "anyllm_kv_cache_positions", "gauge",
           "KV-cache positions in all (sequences times positions per sequence).",
           (double)g->kv_total);
    sample(out, "anyllm_kv_cache_usage_ratio", "gauge",
           "KV-cache positions held by running sequences, as a fraction of all.",
           g->kv_total > 0 ? (double)g->kv_used / (double)g->kv_total : 0.0);
    sample(out, "anyllm_models", "gauge", "Models the server answers for.", g->n_models);
    sample(out, "anyllm_models_loaded", "gauge", "Models loaded now (the others load on "
           "first use).", g->n_loaded);
    sample(out, "anyllm_model_loads_total", "counter", "Models loaded on demand.",
           (double)g->loads);
    sample(out, "anyllm_model_unloads_total", "counter", "Models unloaded (idle, or to make "
           "room for another).", (double)g->unloads);
}

/* The same quantities under vLLM's names, the ones routers read by default. */
static void render_vllm(srv_metrics *m, const srv_gauges *g, srv_buf *out) {
    double usage = g->kv_total > 0 ? (double)g->kv_used / (double)g->kv_total : 0.0;
    sample(out, "vllm:num_requests_waiting", "gauge", "= anyllm_queue_depth", g->n_queued);
    sample(out, "vllm:num_requests_running", "gauge", "= anyllm_active_sequences", g->n_active);
    sample(out, "vllm:kv_cache_usage_perc", "gauge", "= anyllm_kv_cache_usage_ratio (1 = full)",
           usage);
    sample(out, "vllm:gpu_cache_usage_perc", "gauge", "= anyllm_kv_cache_usage_ratio, the older "
           "name", usage);
    /* the cache is per position; routers that size a prefix index from blocks get blocks
     * of SRV_KV_BLOCK positions */
    header(out, "vllm:cache_config_info", "gauge", "Always 1; the KV cache in blocks of "
           "positions (anyllm_kv_cache_positions / block_size).");
    srv_buf_printf(out, "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%lld\"} 1\n",
                   SRV_KV_BLOCK, g->kv_total / SRV_KV_BLOCK);
    pthread_mutex_lock(&m->lock);
    uint64_t prompt = m->prompt_tokens, hits = m->prompt_tokens - m->prompt_evaluated,
             gen = m->generated_tokens;
    pthread_mutex_unlock(&m->lock);
    sample(out, "vllm:prefix_cache_queries_total", "counter", "= anyllm_prompt_tokens_total",
           (double)prompt);
    sample(out, "vllm:prefix_cache_hits_total", "counter",
           "= anyllm_prefix_cache_hit_tokens_total", (double)hits);
    sample(out, "vllm:prompt_tokens_total", "counter", "= anyllm_prompt_tokens_total",
           (double)prompt);
    sample(out, "vllm:generation_tokens_total", "counter", "= anyllm_generated_tokens_total",
           (double)gen);
}

void srv_metrics_render(srv_metrics *m, const srv_gauges *g, srv_buf *out) {
    pthread_mutex_lock(&m->lock);
    render_counters(m, out);
    render_ttft(m, out);
    render_phases(m, out);
    pthread_mutex_unlock(&m->lock);
    render_gauges(g, out);
    render_vllm(m, g, out);
}
