/* engine.c: the model thread of `anyllm serve`: slots, queue, prefill, batched decode,
 * sampling and stop strings (the design is in engine.h).
 *
 * Locking: one mutex guards the queue, the active count and every job's shared fields.
 * The engine never holds it while evaluating, so HTTP threads can read text and submit
 * requests while a step runs. Slot fields and a job's engine fields are touched only by
 * the engine thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/engine.h"
#include "server/toolcall.h"
#include "util.h"

/* Prompt tokens evaluated per iteration: big enough that prefill runs as a matrix-matrix
 * product, small enough that the sequences already generating wait at most one chunk. */
enum { PREFILL_CHUNK = 128 };

typedef struct slot {
    al_context *ctx;
    al_context *dctx; /* on the decode model, or NULL (engine.h) */
    bool on_decode;   /* the sequence is in dctx (handed over after its prompt) */
    int32_t *cached; /* [n_ctx] the tokens the KV cache holds, for prefix reuse */
    int n_cached;
    al_draft_len dl; /* the length of this sequence's next draft */
    al_drafter *drafter; /* with a draft model: this sequence's */
    srv_job *job;    /* NULL when free */
    bool decoding;   /* the prompt is in; job->next_token waits for the decode step */
} slot;

struct srv_engine {
    const al_model *model;
    const al_model *decode_model; /* NULL: model decodes too */
    const al_vocab *vocab;
    int n_vocab, n_ctx;
    /* the model has a recurrent state, which goes back only to checkpoints: one before
     * each prompt's last token and one at each job's end, where the next request of a
     * conversation (or the same request again) starts */
    bool recurrent;
    srv_metrics *metrics;
    slot *slots;
    int n_slots;
    float *logits;           /* [n_slots][n_vocab] */
    int draft_max;           /* drafts of at most this many tokens; 0: none */
    const al_model *draft;   /* the draft model, or NULL: n-gram drafts */
    bool mtp;                /* the model's own block drafts (al_draft_mtp) */
    float *spec_logits;      /* [draft_max + 1][n_vocab] a draft's check */
    al_context **batch_ctx;  /* [n_slots] the decode step's sequences */
    int32_t *batch_tok;      /* [n_slots] */
    int *batch_slot;         /* [n_slots] */
    uint64_t n_admitted;

    pthread_mutex_t lock;
    pthread_cond_t wake;     /* a job was queued or cancelled, or stop */
    srv_job *head, *tail;    /* the queue */
    int n_queued, max_queued;
    int n_active;            /* slots with a job */
    long long kv_used;       /* positions the running jobs' slots hold, as of the last step */
    bool stopping;
    pthread_t thread;
    bool started;
};

/* ---- jobs ------------------------------------------------------------------------------ */

srv_job *srv_job_create(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* waits are immune to clock changes */
    pthread_cond_init(&j->cond, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    return j;
}

static void job_free(srv_job *j) {
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    al_sampler_destroy(j->sampler);
    al_detok_destroy(j->detok);
    al_harmony_destroy(j->harmony);
    al_grammar_destroy(j->grammar);
    srv_tc_destroy(j->harmony_calls);
    srv_buf_free(&j->hold);
    srv_buf_free(&j->text);
    srv_buf_free(&j->reasoning);
    pthread_cond_destroy(&j->cond);
    free(j);
}

void srv_job_ref(srv_engine *e, srv_job *j) {
    pthread_mutex_lock(&e->lock);
    j->refs++;
    pthread_mutex_unlock(&e->lock);
}

void srv_job_release(srv_engine *e, srv_job *j) {
    if (!j) return;
    if (e) pthread_mutex_lock(&e->lock);
    bool last = --j->refs == 0;
    if (e) pthread_mutex_unlock(&e->lock);
    if (last) job_free(j);
}

/* Ends a job (lock held): publishes the reason and wakes its readers. The caller then
 * drops the engine's reference. */
static void job_end_locked(srv_job *j, srv_finish why, const char *error) {
    j->timings = (srv_timings){.prompt_s = j->t_prefill,
                               .decode_s = j->n_generated ? al_time_s() - j->t_first : 0,
                               .n_drafted = j->n_drafted, .n_accepted = j->n_accepted};
    j->finish = why;
    j->n_gen = j->n_generated;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    pthread_cond_broadcast(&j->cond);
}

static void unlink_queued_locked(srv_engine *e, srv_job *j) {
    srv_job **p = &e->head;
    while (*p && *p != j) p = &(*p)->next;
    if (!*p) return;
    *p = j->next;
    if (e->tail == j) {
        e->tail = e->head;
        while (e->tail && e->tail->next) e->tail = e->tail->next;
    }
    j->next = NULL;
    j->queued = false;
    e->n_queued--;
}

srv_submit srv_engine_submit(srv_engine *e, srv_job *j) {
    pthread_mutex_lock(&e->lock);
    srv_submit r = SRV_SUBMIT_OK;
    /* free slots take jobs at the engine's next iteration, so they count as room too */
    int room = e->max_queued + (e->n_slots - e->n_active);
    if (e->stopping) r = SRV_SUBMIT_STOPPING;
    else if (e->n_queued >= room) r = SRV_SUBMIT_FULL;
    else {
        j->refs++;
        j->queued = true;
        j->next = NULL;
        if (e->tail) e->tail->next = j;
        else e->head = j;
        e->tail = j;
        e->n_queued++;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    return r;
}

void srv_job_cancel(srv_engine *e, srv_job *j) {
    bool drop = false;
    pthread_mutex_lock(&e->lock);
    if (j->finish == SRV_FINISH_NONE) {
        j->cancel = true;
        if (j->queued) { /* never started: end it here, nothing to undo */
            unlink_queued_locked(e, j);
            job_end_locked(j, SRV_FINISH_CANCELLED, NULL);
            drop = true;
        }
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
    if (drop) {
        srv_metrics_cancelled(e->metrics);
        srv_job_release(e, j);
    }
}

bool srv_job_poll(srv_engine *e, srv_job *j, size_t from, size_t r_from, int ms, srv_buf *out,
                  srv_buf *r_out, srv_job_state *st) {
    pthread_mutex_lock(&e->lock);
    if (j->text.len <= from && j->reasoning.len <= r_from && j->finish == SRV_FINISH_NONE &&
        ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&j->cond, &e->lock, &ts);
    }
    if (out && j->text.len > from) srv_buf_add(out, j->text.s + from, j->text.len - from);
    if (r_out && j->reasoning.len > r_from)
        srv_buf_add(r_out, j->reasoning.s + r_from, j->reasoning.len - r_from);
    *st = (srv_job_state){.text_len = j->text.len, .reasoning_len = j->reasoning.len,
                          .finish = j->finish, .stop_hit = j->stop_hit, .n_prompt = j->n_prompt,
                          .n_gen = j->n_gen, .n_reused = j->n_reused,
                          .timings = j->timings};
    memcpy(st->error, j->error, sizeof st->error);
    bool news = j->text.len > from || j->reasoning.len > r_from || j->finish != SRV_FINISH_NONE;
    pthread_mutex_unlock(&e->lock);
    return news;
}

/* ---- text and stop strings ---------------------------------------------------------- */

/* The longest tail of s[0..n) that is a proper prefix of some stop string: text that
 * must wait, since the next token may complete the stop string. */
static size_t stop_prefix_tail(const srv_job *j, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < j->n_stop; i++) {
        size_t ls = strlen(j->stop[i]);
        for (size_t k = ls - 1 < n ? ls - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, j->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Moves what may be shown from the job's held text to its public text. Returns true if
 * a stop string was found: the text before it is released and the rest is dropped. With
 * final, everything not cut by a stop string is released. */
static bool release_text(srv_engine *e, srv_job *j, bool final) {
    srv_buf *h = &j->hold;
    size_t cut = h->len;
    const char *hit = NULL;
    for (int i = 0; i < j->n_stop && h->len; i++) {
        const char *p = memmem(h->s, h->len, j->stop[i], strlen(j->stop[i]));
        if (p && (size_t)(p - h->s) < cut) {
            cut = (size_t)(p - h->s);
            hit = j->stop[i];
        }
    }
    bool stopped = hit != NULL;
    size_t n = cut;
    if (!stopped && !final) n = h->len - stop_prefix_tail(j, h->s, h->len);
    pthread_mutex_lock(&e->lock);
    if (hit) j->stop_hit = hit;
    if (n) srv_buf_add_utf8(&j->text, h->s, n);
    j->n_gen = j->n_generated;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&e->lock);
    if (stopped || final) h->len = 0;
    else if (n) {
        memmove(h->s, h->s + n, h->len - n);
        h->len -= n;
    }
    return stopped;
}

/* A message addressed to a function: a call's arguments, not reasoning. */
static bool to_function(const al_chat_piece *p) {
    return p->recipient && p->recipient_len > 10 && !memcmp(p->recipient, "functions.", 10);
}

/* The Harmony call parser's events into the held text: text as it is, each call in the
 * tagged form the HTTP side reads (engine.h). */
static al_status hold_calls(srv_job *j, const srv_tc_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == SRV_TC_TEXT) {
            srv_buf_add(&j->hold, ev[i].text, ev[i].len);
            continue;
        }
        json_t *name = json_string(ev[i].name);
        char *quoted = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
        json_decref(name);
        if (quoted)
            srv_buf_printf(&j->hold, "<tool_call>{\"name\": %s, \"arguments\": %s}</tool_call>",
                           quoted, ev[i].arguments);
        free(quoted);
        if (!quoted) return AL_ERR_NOMEM;
    }
    return j->hold.failed ? AL_ERR_NOMEM : AL_OK;
}

/* A Harmony reply's pieces: the final channel joins the held text (stop strings apply
 * to the answer only), the other channels are published as reasoning at once; with
 * tools, the pieces go through the call parser, whose text and calls are held. */
static al_status route_pieces(srv_engine *e, srv_job *j, const al_chat_piece *p, int n) {
    bool reasoning = false;
    if (j->harmony_calls) {
        const srv_tc_event *ev;
        int n_ev;
        if (!srv_tc_pieces(j->harmony_calls, p, n, &ev, &n_ev)) return AL_ERR_NOMEM;
        al_status st = hold_calls(j, ev, n_ev);
        if (st != AL_OK) return st;
    }
    for (int i = 0; i < n; i++) {
        if (p[i].channel != AL_CHANNEL_FINAL) reasoning |= !j->harmony_calls || !to_function(&p[i]);
        else if (!j->harmony_calls) srv_buf_add(&j->hold, p[i].text, p[i].len);
    }
    if (!reasoning) return AL_OK;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < n; i++)
        if (p[i].channel != AL_CHANNEL_FINAL && (!j->harmony_calls || !to_function(&p[i])))
            srv_buf_add_utf8(&j->reasoning, p[i].text, p[i].len);
    j->n_gen = j->n_generated;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&e->lock);
    return AL_OK;
}

/* Mistral's, Gemma 4's and GLM's call markers are control tokens, which print as
 * nothing: a job parsed for calls in these formats gets their text (engine.h). One list
 * serves them all; another family's marker in a vocabulary is only text to the parser. */
static bool call_marker(const srv_engine *e, const srv_job *j, int32_t tok) {
    static const char *const markers[] = {
        "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",        /* Mistral */
        "<|tool_call>", "<tool_call|>", "<|\"|>",     /* Gemma 4 */
        "<tool_call>", "</tool_call>", "<arg_key>",   /* GLM     */
        "</arg_key>", "<arg_value>", "</arg_value>",
    };
    if (!j->control_text || !al_vocab_is_control(e->vocab, tok)) return false;
    const char *t = al_vocab_text(e->vocab, tok);
    for (size_t i = 0; t && i < sizeof markers / sizeof *markers; i++)
        if (!strcmp(t, markers[i])) return true;
    return false;
}

/* A generated token's text into the job: through the detokenizer into the held text,
 * or through a Harmony job's parser. */
static al_status push_token(srv_engine *e, srv_job *j, int32_t tok) {
    const char *text;
    size_t len;
    if (!j->harmony && call_marker(e, j, tok)) {
        al_detok_flush(j->detok, &text, &len); /* a partial character before it */
        if (len) srv_buf_add(&j->hold, text, len);
        srv_buf_str(&j->hold, al_vocab_text(e->vocab, tok));
        return j->hold.failed ? AL_ERR_NOMEM : AL_OK;
    }
    if (!j->harmony) {
        al_status st = al_detok_push(j->detok, tok, &text, &len);
        if (st == AL_OK && len) srv_buf_add(&j->hold, text, len);
        return st;
    }
    const al_chat_piece *p;
    int n;
    al_status st = al_harmony_push_token(j->harmony, tok, &p, &n);
    return st == AL_OK ? route_pieces(e, j, p, n) : st;
}

/* What the detokenizer or the parser still holds, at the end of the job. */
static void flush_text(srv_engine *e, srv_job *j) {
    const char *text;
    size_t len;
    if (!j->harmony) {
        al_detok_flush(j->detok, &text, &len); /* whatever partial character is held */
        if (len) srv_buf_add(&j->hold, text, len);
        return;
    }
    const al_chat_piece *p;
    int n;
    if (al_harmony_finish(j->harmony, &p, &n) == AL_OK) route_pieces(e, j, p, n);
    const srv_tc_event *ev;
    if (j->harmony_calls && srv_tc_finish(j->harmony_calls, &ev, &n)) hold_calls(j, ev, n);
}

/* ---- slots ------------------------------------------------------------------------------ */

/* The context that holds the slot's sequence now. */
static al_context *seq_ctx(const slot *s) { return s->on_decode ? s->dctx : s->ctx; }

/* Hands the slot's sequence to its decode context (to_decode) or back, counted in the
 * metrics; a no-op without a decode model or where it already is. */
static al_status slot_move(srv_engine *e, slot *s, bool to_decode) {
    if (!s->dctx || s->on_decode == to_decode) return AL_OK;
    al_context *dst = to_decode ? s->dctx : s->ctx, *src = seq_ctx(s);
    al_context_info before, after;
    al_context_get_info(dst, &before);
    double t0 = al_time_s();
    al_status st = al_context_handoff(dst, src);
    al_context_get_info(dst, &after);
    srv_metrics_handoff(e->metrics, after.kv_bytes_copied - before.kv_bytes_copied,
                        al_time_s() - t0);
    if (st == AL_OK) s->on_decode = to_decode;
    return st;
}

/* Publishes the KV-cache positions held by running jobs (lock held). A free slot's
 * cache is kept for prefix reuse but counts as free: any job may overwrite it. */
static void publish_kv_locked(srv_engine *e) {
    long long used = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].job) used += e->slots[i].n_cached;
    e->kv_used = used;
}

/* Ends the slot's job and frees the slot. The slot keeps its cache, which s->cached
 * describes exactly, for the next prompt that shares a prefix: a client that went away
 * and retries, or the next turn of a chat, is not evaluated again. After an error the
 * cache may not match and is reset. */
static void slot_end(srv_engine *e, slot *s, srv_finish why, const char *error) {
    srv_job *j = s->job;
    if (why == SRV_FINISH_STOP || why == SRV_FINISH_LENGTH) {
        flush_text(e, j);
        release_text(e, j, true);
    }
    if (why != SRV_FINISH_ERROR && e->recurrent) {
        /* without room for it, a later request evaluates more: nothing is lost */
        al_context_checkpoint(seq_ctx(s));
    } else if (why == SRV_FINISH_ERROR) {
        al_context_reset(s->ctx);
        if (s->dctx) al_context_reset(s->dctx);
        s->on_decode = false;
        s->n_cached = 0;
    }
    pthread_mutex_lock(&e->lock);
    job_end_locked(j, why, error);
    s->job = NULL;
    s->decoding = false;
    e->n_active--;
    /* in the same step as n_active: a reader that sees the slot free must not see its
     * positions still held */
    publish_kv_locked(e);
    pthread_mutex_unlock(&e->lock);
    if (why == SRV_FINISH_CANCELLED) srv_metrics_cancelled(e->metrics);
    srv_job_release(e, j);
}

/* Samples the slot's next token from logits [n_vocab] and releases its text; ends the
 * job at an end-of-generation token, a stop string, max_tokens or a full context. */
static void sample_next(srv_engine *e, slot *s, const float *logits) {
    srv_job *j = s->job;
    int32_t tok = al_sampler_sample(j->sampler, logits);
    if (j->n_generated == 0) {
        j->t_first = al_time_s();
        srv_metrics_ttft(e->metrics, j->t_first - j->t_arrival);
    }
    if (tok < 0) { /* a grammar that allows no token; the sampler has no other failure */
        slot_end(e, s, SRV_FINISH_ERROR, "the output's grammar allows no token here");
        return;
    }
    if (al_vocab_is_eog(e->vocab, tok)) {
        slot_end(e, s, SRV_FINISH_STOP, NULL);
        return;
    }
    if (j->grammar && al_grammar_accept(j->grammar, tok) != AL_OK) {
        slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
        return;
    }
    /* the penalties see the generated tokens only: OpenAI's "frequency in the text so far" */
    al_sampler_accept(j->sampler, tok);
    j->n_generated++;
    if (push_token(e, j, tok) != AL_OK) {
        slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
        return;
    }
    if (j->hold.failed || j->reasoning.failed) {
        slot_end(e, s, SRV_FINISH_ERROR, "out of memory holding generated text");
        return;
    }
    /* Harmony's <|end|> after the answer ends the reply, though it is no EOG token; a
     * finished grammar allows nothing but the end */
    if (release_text(e, j, false) || (j->harmony && al_harmony_done(j->harmony)) ||
        (j->grammar && al_grammar_finished(j->grammar)))
        slot_end(e, s, SRV_FINISH_STOP, NULL);
    else if (j->n_generated >= j->max_tokens || al_context_n_past(seq_ctx(s)) >= e->n_ctx)
        slot_end(e, s, SRV_FINISH_LENGTH, NULL);
    else {
        j->next_token = tok;
        s->decoding = true;
    }
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Moves queued jobs into free slots (lock held). The cache of the chosen slot is cut to
 * the prefix it shares with the prompt, keeping at least one token to evaluate, since
 * the first token is sampled from the prompt's last logits. */
static void admit_locked(srv_engine *e) {
    while (e->head && e->n_active < e->n_slots) {
        srv_job *j = e->head;
        int best = -1, best_keep = -1;
        for (int i = 0; i < e->n_slots; i++) {
            if (e->slots[i].job) continue;
            int keep = common_prefix(e->slots[i].cached, e->slots[i].n_cached, j->prompt,
                                     j->n_prompt);
            if (keep > best_keep) best = i, best_keep = keep;
        }
        AL_ASSERT(best >= 0);
        unlink_queued_locked(e, j);
        slot *s = &e->slots[best];
        if (best_keep >= j->n_prompt) best_keep = j->n_prompt - 1;
        if (slot_move(e, s, false) != AL_OK) { /* the prompt's context starts afresh */
            al_context_reset(s->ctx);
            al_context_reset(s->dctx);
            s->on_decode = false;
            best_keep = 0;
        }
        al_context_truncate(s->ctx, best_keep);
        best_keep = al_context_n_past(s->ctx); /* a sliding window may keep less */
        s->n_cached = best_keep;
        s->job = j;
        s->decoding = false;
        al_draft_len_init(&s->dl, e->draft_max);
        j->n_prefilled = best_keep;
        j->n_reused = best_keep;
        j->admitted = ++e->n_admitted;
        e->n_active++;
    }
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* Evaluates the next chunk of the earliest admitted prompt; samples its first token when
 * the prompt is complete. */
static void prefill_one(srv_engine *e) {
    slot *s = NULL;
    for (int i = 0; i < e->n_slots; i++) {
        slot *c = &e->slots[i];
        if (c->job && !c->decoding && (!s || c->job->admitted < s->job->admitted)) s = c;
    }
    if (!s) return;
    srv_job *j = s->job;
    int n = j->n_prompt - j->n_prefilled;
    if (n > PREFILL_CHUNK) n = PREFILL_CHUNK;
    if (e->recurrent && n > 1 && j->n_prefilled + n == j->n_prompt) n--; /* a checkpoint first */
    bool last = j->n_prefilled + n == j->n_prompt;
    double t0 = al_time_s();
    al_status st = al_eval(s->ctx, j->prompt + j->n_prefilled, n, last ? e->logits : NULL, false);
    j->t_prefill += al_time_s() - t0;
    if (st != AL_OK) {
        slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
        return;
    }
    memcpy(s->cached + s->n_cached, j->prompt + j->n_prefilled, (size_t)n * sizeof(int32_t));
    s->n_cached += n;
    j->n_prefilled += n;
    if (e->recurrent && j->n_prefilled == j->n_prompt - 1) al_context_checkpoint(s->ctx);
    if (!last) return;
    /* the prompt's positions count before its first token reaches the client, who may
     * read the gauges as soon as it has it */
    pthread_mutex_lock(&e->lock);
    publish_kv_locked(e);
    pthread_mutex_unlock(&e->lock);
    srv_metrics_prompt(e->metrics, j->n_prompt, j->n_prompt - j->n_reused, j->t_prefill);
    if (slot_move(e, s, true) != AL_OK) {
        slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
        return;
    }
    sample_next(e, s, e->logits);
}

/* Cuts the positions of a draft the model refused from the slot's cache, so that it
 * holds its cached tokens again; a recurrent state goes back to the checkpoint made
 * before the draft and evaluates the kept tokens again. */
static void spec_rollback(srv_engine *e, slot *s) {
    al_context *c = seq_ctx(s);
    if (al_context_n_past(c) <= s->n_cached) return;
    al_status st = al_context_truncate(c, s->n_cached);
    int have = al_context_n_past(c);
    if (st == AL_OK && have < s->n_cached)
        st = al_eval(c, s->cached + have, s->n_cached - have, NULL, false);
    if (st != AL_OK && s->job) slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
    else if (st != AL_OK) s->n_cached = al_context_n_past(c); /* the cache says what it holds */
}

/* An n-gram draft after the slot's pending token, checked in one evaluation of its own
 * (engine.h): the job's sampler draws from each position in turn and the draft's token
 * is taken while it draws it. false when there is no draft: the slot joins the batch. */
static bool spec_step(srv_engine *e, slot *s) {
    srv_job *j = s->job;
    int base = s->n_cached, limit = e->n_ctx - base - 3;
    if (j->max_tokens - j->n_generated - 1 < limit) limit = j->max_tokens - j->n_generated - 1;
    int32_t seq[1 + SRV_DRAFT_MAX];
    int k = al_draft_len_next(&s->dl, limit);
    s->cached[base] = seq[0] = j->next_token; /* the history the draft reads ends with it */
    if (k > 0 && e->mtp) k = al_draft_mtp(seq_ctx(s), j->next_token, k, seq + 1);
    else if (k > 0)
        k = s->drafter ? al_drafter_draft(s->drafter, s->cached, base + 1, k, seq + 1)
                       : al_draft_ngram(s->cached, base + 1, k, seq + 1);
    if (k <= 0 || al_context_checkpoint(seq_ctx(s)) != AL_OK) return false;
    double t0 = al_time_s();
    al_status st = al_eval(seq_ctx(s), seq, k + 1, e->spec_logits, true);
    double dt = al_time_s() - t0;
    if (st != AL_OK) {
        slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
        return true;
    }
    s->n_cached++;
    s->decoding = false;
    j->n_drafted += k; /* counted before sample_next may end the job and publish them */
    int i = 0;
    for (;;) {
        sample_next(e, s, e->spec_logits + (size_t)i * e->n_vocab);
        if (!s->job || i == k || j->next_token != seq[1 + i]) break;
        s->cached[s->n_cached++] = seq[++i]; /* taken, and already evaluated */
        j->n_accepted++;
        s->decoding = false;
    }
    al_draft_len_result(&s->dl, k, i);
    srv_metrics_spec(e->metrics, k, i);
    srv_metrics_decode(e->metrics, 1, dt);
    spec_rollback(e, s);
    return true;
}

/* One token for every generating slot, as one batch; a slot with a draft is checked on
 * its own. */
static void decode_step(srv_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->job || !s->decoding) continue;
        if (e->draft_max > 0 && spec_step(e, s)) continue;
        e->batch_ctx[n] = seq_ctx(s);
        e->batch_tok[n] = s->job->next_token;
        e->batch_slot[n++] = i;
    }
    if (n == 0) return;
    double t0 = al_time_s();
    al_status st = al_eval_multi(e->batch_ctx, e->batch_tok, n, e->logits);
    double dt = al_time_s() - t0;
    for (int k = 0; k < n; k++) {
        slot *s = &e->slots[e->batch_slot[k]];
        if (st != AL_OK) {
            slot_end(e, s, SRV_FINISH_ERROR, al_last_error());
            continue;
        }
        s->cached[s->n_cached++] = e->batch_tok[k];
        s->decoding = false;
        sample_next(e, s, e->logits + (size_t)k * e->n_vocab);
    }
    if (st == AL_OK) srv_metrics_decode(e->metrics, n, dt);
}

/* Ends the running jobs whose client went away (lock held on entry and exit). */
static void reap_cancelled_locked(srv_engine *e) {
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->job || !s->job->cancel) continue;
        pthread_mutex_unlock(&e->lock);
        slot_end(e, s, SRV_FINISH_CANCELLED, NULL);
        pthread_mutex_lock(&e->lock);
    }
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        publish_kv_locked(e);
        while (!e->stopping && !e->head && e->n_active == 0)
            pthread_cond_wait(&e->wake, &e->lock);
        if (e->stopping) break;
        reap_cancelled_locked(e);
        admit_locked(e);
        publish_kv_locked(e);
        pthread_mutex_unlock(&e->lock);
        prefill_one(e);
        /* a router may read the gauges between the two steps, which take as long */
        pthread_mutex_lock(&e->lock);
        publish_kv_locked(e);
        pthread_mutex_unlock(&e->lock);
        decode_step(e);
        pthread_mutex_lock(&e->lock);
    }
    /* stopping: every job, queued or running, ends with an error its reader can report */
    while (e->head) {
        srv_job *j = e->head;
        unlink_queued_locked(e, j);
        job_end_locked(j, SRV_FINISH_ERROR, SRV_SHUTDOWN_MESSAGE);
        pthread_mutex_unlock(&e->lock);
        srv_job_release(e, j);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].job) slot_end(e, &e->slots[i], SRV_FINISH_ERROR, SRV_SHUTDOWN_MESSAGE);
    return NULL;
}

/* ---- create / destroy ------------------------------------------------------------------ */

/* A slot's contexts: with a decode model, a pair that shares the KV memory
 * (al_context_create_pair decides which owns it). */
static al_status slot_contexts(srv_engine *e, slot *s, const al_context_params *params) {
    al_context_params cp = *params;
    cp.kv_shared_with = NULL;
    al_status st = e->draft ? al_drafter_create(e->draft, cp.n_ctx, &s->drafter) : AL_OK;
    if (st != AL_OK) return st;
    if (!e->decode_model) return al_context_create(e->model, &cp, &s->ctx);
    return al_context_create_pair(e->model, e->decode_model, &cp, &s->ctx, &s->dctx);
}

static void slot_free(slot *s) {
    al_drafter_destroy(s->drafter);
    al_context_destroy_pair(s->ctx, s->dctx);
    free(s->cached);
}

al_status srv_engine_create(const al_model *m, const al_model *dm, int n_slots,
                            const al_context_params *cp, int max_queued, int draft_max,
                            const al_model *draft, srv_metrics *metrics, srv_engine **out) {
    *out = NULL;
    const int n_ctx = cp->n_ctx;
    const al_vocab *v = al_model_vocab(m);
    if (!v) return al_error(AL_ERR_ARG, "the model file has no tokenizer: %s", al_last_error());
    if (n_slots < 1 || max_queued < 0)
        return al_error(AL_ERR_ARG, "engine: %d sequences, queue %d", n_slots, max_queued);
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return al_error(AL_ERR_NOMEM, "out of memory creating the engine");
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    e->model = m;
    e->decode_model = dm;
    e->vocab = v;
    e->n_vocab = al_vocab_n_tokens(v);
    e->n_ctx = n_ctx;
    e->metrics = metrics;
    e->n_slots = n_slots;
    e->max_queued = max_queued;
    e->slots = calloc((size_t)n_slots, sizeof *e->slots);
    e->logits = malloc((size_t)n_slots * (size_t)e->n_vocab * sizeof(float));
    e->draft_max = draft_max < SRV_DRAFT_MAX ? draft_max : SRV_DRAFT_MAX;
    e->draft = e->draft_max > 0 ? draft : NULL;
    e->mtp = e->draft_max > 0 && cp->mtp; /* the contexts keep the block's cache */
    if (e->draft_max > 0)
        e->spec_logits = malloc((size_t)(e->draft_max + 1) * (size_t)e->n_vocab * sizeof(float));
    e->batch_ctx = calloc((size_t)n_slots, sizeof *e->batch_ctx);
    e->batch_tok = calloc((size_t)n_slots, sizeof *e->batch_tok);
    e->batch_slot = calloc((size_t)n_slots, sizeof *e->batch_slot);
    al_status st = AL_OK;
    if (!e->slots || !e->logits || !e->batch_ctx || !e->batch_tok || !e->batch_slot ||
        (e->draft_max > 0 && !e->spec_logits))
        st = al_error(AL_ERR_NOMEM, "out of memory creating the engine");
    al_model_info pi, di;
    al_model_get_info(m, &pi);
    al_model_get_info(dm ? dm : m, &di);
    srv_metrics_backends(metrics, pi.backend, di.backend);
    e->recurrent = pi.n_recurrent > 0;
    for (int i = 0; st == AL_OK && i < n_slots; i++) {
        st = slot_contexts(e, &e->slots[i], cp);
        e->slots[i].cached = malloc((size_t)n_ctx * sizeof(int32_t));
        if (st == AL_OK && !e->slots[i].cached)
            st = al_error(AL_ERR_NOMEM, "out of memory for sequence %d", i);
    }
    if (st == AL_OK && pthread_create(&e->thread, NULL, engine_main, e) != 0)
        st = al_error(AL_ERR_NOMEM, "cannot start the engine thread: %s", strerror(errno));
    if (st != AL_OK) {
        srv_engine_destroy(e);
        return st;
    }
    e->started = true;
    *out = e;
    return AL_OK;
}

void srv_engine_stop(srv_engine *e) {
    if (!e || !e->started) return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    e->started = false;
}

void srv_engine_destroy(srv_engine *e) {
    if (!e) return;
    srv_engine_stop(e);
    for (int i = 0; e->slots && i < e->n_slots; i++) slot_free(&e->slots[i]);
    free(e->slots);
    free(e->logits);
    free(e->spec_logits);
    free(e->batch_ctx);
    free(e->batch_tok);
    free(e->batch_slot);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int srv_engine_n_ctx(const srv_engine *e) { return e->n_ctx; }

void srv_engine_counts(srv_engine *e, int *n_active, int *n_queued, long long *kv_used) {
    pthread_mutex_lock(&e->lock);
    *n_active = e->n_active;
    *n_queued = e->n_queued;
    *kv_used = e->kv_used;
    pthread_mutex_unlock(&e->lock);
}
