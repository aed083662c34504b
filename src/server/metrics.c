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
}

void srv_metrics_render(srv_metrics *m, int n_active, int n_queued, int n_slots, srv_buf *out) {
    pthread_mutex_lock(&m->lock);
    header(out, "anyllm_requests_total", "counter",
           "HTTP requests answered, by endpoint and status.");
    for (int i = 0; i < m->n_keys; i++)
        srv_buf_printf(out, "anyllm_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                       srv_endpoint_path(m->requests[i].ep), m->requests[i].status,
                       (unsigned long long)m->requests[i].n);
    header(out, "anyllm_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
    srv_buf_printf(out, "anyllm_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    header(out, "anyllm_prompt_tokens_evaluated_total", "counter",
           "Prompt tokens evaluated (the others were reused from a sequence's cache).");
    srv_buf_printf(out, "anyllm_prompt_tokens_evaluated_total %llu\n",
                   (unsigned long long)m->prompt_evaluated);
    header(out, "anyllm_generated_tokens_total", "counter", "Tokens generated.");
    srv_buf_printf(out, "anyllm_generated_tokens_total %llu\n",
                   (unsigned long long)m->generated_tokens);
    header(out, "anyllm_prompt_tokens_per_second", "gauge",
           "Prompt processing rate: evaluated prompt tokens per second of prefill.");
    srv_buf_printf(out, "anyllm_prompt_tokens_per_second %.3f\n",
                   m->prompt_seconds > 0 ? (double)m->prompt_evaluated / m->prompt_seconds : 0.0);
    header(out, "anyllm_generation_tokens_per_second", "gauge",
           "Generation rate of the whole batch: tokens per second of decode steps.");
    srv_buf_printf(out, "anyllm_generation_tokens_per_second %.3f\n",
                   m->decode_seconds > 0 ? (double)m->generated_tokens / m->decode_seconds : 0.0);
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
    header(out, "anyllm_cancelled_total", "counter", "Sequences ended because the client left.");
    srv_buf_printf(out, "anyllm_cancelled_total %llu\n", (unsigned long long)m->cancelled);
    render_phases(m, out);
    pthread_mutex_unlock(&m->lock);
    header(out, "anyllm_active_sequences", "gauge", "Sequences being prefilled or decoded.");
    srv_buf_printf(out, "anyllm_active_sequences %d\n", n_active);
    header(out, "anyllm_queue_depth", "gauge", "Requests waiting for a free sequence.");
    srv_buf_printf(out, "anyllm_queue_depth %d\n", n_queued);
    header(out, "anyllm_sequence_slots", "gauge", "Sequences the server decodes together.");
    srv_buf_printf(out, "anyllm_sequence_slots %d\n", n_slots);
}
