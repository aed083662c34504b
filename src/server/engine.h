/* engine.h: the one thread that runs the model for every request (continuous batching).
 *
 * The engine holds n_slots sequence slots, each an al_context with the tokens its KV
 * cache holds. Each iteration it
 *   1. ends the jobs whose client went away, freeing their slots,
 *   2. moves queued jobs into free slots, picking the slot whose cached tokens share the
 *      longest prefix with the prompt (a chat's system prompt and earlier turns are then
 *      not evaluated again),
 *   3. evaluates one chunk of one slot's prompt (al_eval), so a long prompt does not
 *      stall the sequences already generating for more than one chunk,
 *   4. evaluates the pending token of every generating slot as one batch
 *      (al_eval_multi) and samples each slot's next token with the job's own sampler.
 * With a decode model on another backend, step 3 ends a prompt by handing its sequence
 * to the slot's decode context (before the first token is sampled, so TTFT counts the
 * hand-off), step 4 runs on the decode contexts, and step 2 hands a slot's sequence
 * back before a new prompt reuses its prefix; /metrics names each phase's backend.
 * Text goes through the job's streaming detokenizer and is held back while it could be
 * the start of a stop string, so a stop string never reaches the client, not even in part.
 * A chat in the Harmony format (gpt-oss) goes through the job's al_harmony parser
 * instead: its final channel is the text (stop strings apply to it), the other channels
 * are the reasoning, published as they come; the reply ends when the parser says so.
 * With tools, the messages addressed to functions.NAME are calls: the job's Harmony call
 * parser (toolcall.h) reads them from the pieces and the engine writes each into the
 * text in the tagged form, <tool_call>{"name", "arguments"}</tool_call>, which the HTTP
 * side parses as it parses chatml's, so one reader serves every format. Mistral's,
 * Gemma 4's and GLM's calls are written with control tokens, which print as nothing: for
 * a job with tools in these formats their text is written into the reply.
 * A job with a grammar (response_format) samples only tokens the grammar allows and
 * ends as soon as the grammar allows nothing more.
 * With drafts (serve --spec ngram, or a draft model), step 4 first looks for a draft of
 * each generating slot (al_draft_ngram or the slot's al_drafter over the tokens its
 * cache holds and its pending one, at the length al_draft_len gives): a slot with one
 * evaluates its pending token and
 * the draft as one batch of its own, the job's sampler draws from each position in
 * turn, the draft's tokens it draws are taken (they are in the cache already) and the
 * first other draw is the next pending token; the refused positions are cut from the
 * cache. The text is the one decoding without drafts gives; slots without a draft go
 * into the shared batch as before.
 *
 * Jobs are reference counted: the submitter holds one reference, the engine another
 * while the job is queued or running. Functions here are thread-safe unless marked.
 */
#ifndef AL_SERVER_ENGINE_H
#define AL_SERVER_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "server/metrics.h"
#include "server/server.h"

enum { SRV_MAX_STOP = 4, SRV_DRAFT_MAX = 64 };

/* The error of the jobs ended by srv_engine_stop (HTTP answers 503 for them). */
#define SRV_SHUTDOWN_MESSAGE "the server is shutting down"

typedef enum srv_finish {
    SRV_FINISH_NONE,      /* still running                                  */
    SRV_FINISH_STOP,      /* end-of-generation token or a stop string       */
    SRV_FINISH_LENGTH,    /* max_tokens, or the context is full             */
    SRV_FINISH_CANCELLED, /* the client went away                           */
    SRV_FINISH_ERROR,     /* evaluation failed or the server is stopping    */
} srv_finish;

/* How a job's time went, as llama.cpp's server reports it ("timings"). */
typedef struct srv_timings {
    double prompt_s;        /* evaluating the prompt's new tokens                  */
    double decode_s;        /* from the first token sampled to the end             */
    int n_drafted, n_accepted; /* speculative decoding: tokens drafted, taken       */
} srv_timings;

typedef struct srv_job srv_job;
struct srv_job {
    /* ---- set by the submitter before srv_engine_submit, read-only after; owned ---- */
    int32_t *prompt;          /* [n_prompt] token ids, from malloc                  */
    int n_prompt;
    int max_tokens;           /* tokens to generate at most (>= 1)                  */
    char *stop[SRV_MAX_STOP]; /* NUL-terminated UTF-8, non-empty, from malloc       */
    int n_stop;
    al_sampler *sampler;
    al_detok *detok;
    al_harmony *harmony;      /* a Harmony chat's reply parser, or NULL             */
    al_grammar *grammar;      /* what the output must match (the sampler holds it), or NULL */
    bool control_text;        /* control tokens the Mistral, Gemma 4 and GLM call formats
                                 use ([TOOL_CALLS], <|tool_call>, <|"|>, <arg_key>, ...) are
                                 written into the text as their text */
    struct srv_tc *harmony_calls; /* a Harmony chat with tools: its calls, read from the
                                 parser's pieces and written into the text as
                                 <tool_call>{"name", "arguments"}</tool_call>, or NULL */
    double t_arrival;         /* al_time_s() when the request arrived (for TTFT)    */

    /* ---- the engine thread's own ---- */
    srv_buf hold;             /* generated text not released yet                    */
    int32_t next_token;       /* sampled, evaluated by the next decode step         */
    int n_prefilled;          /* prompt tokens in the KV cache so far               */
    int n_generated;
    double t_prefill;         /* seconds spent evaluating this prompt               */
    double t_first;           /* al_time_s() when its first token was sampled       */
    int n_drafted, n_accepted; /* draft tokens checked for it, and taken            */
    uint64_t admitted;        /* admission order: prefill goes first come first served */

    /* ---- shared: only under the engine's lock ---- */
    srv_job *next;            /* in the queue                                       */
    bool queued;
    pthread_cond_t cond;      /* broadcast when text grows or the job ends          */
    srv_buf text;             /* released text, valid UTF-8                         */
    srv_buf reasoning;        /* released reasoning (Harmony), valid UTF-8          */
    int n_gen;                /* generated tokens, as published with the text       */
    int n_reused;             /* prompt tokens found in the slot's cache            */
    srv_finish finish;
    const char *stop_hit;     /* the stop string that ended the reply, or NULL      */
    char error[256];          /* why, for SRV_FINISH_ERROR                          */
    srv_timings timings;      /* set when the job ends                              */
    bool cancel;
    int refs;
};

/* A snapshot of a job, taken under the lock by srv_job_poll. */
typedef struct srv_job_state {
    size_t text_len; /* bytes released so far                   */
    size_t reasoning_len; /* bytes of reasoning released so far */
    srv_finish finish;
    const char *stop_hit; /* the stop string that ended it (the job's), or NULL */
    int n_prompt, n_gen, n_reused;
    char error[256];
    srv_timings timings;  /* once it has ended */
} srv_job_state;

typedef struct srv_engine srv_engine;

/* Creates n_slots contexts with cp's parameters (n_ctx positions each; n_checkpoints of
 * a recurrent state; kv_shared_with is ignored) and starts the thread. At most
 * max_queued jobs wait for a slot; more are refused. draft_max > 0 turns drafts on, of
 * at most that many tokens (up to SRV_DRAFT_MAX): n-gram drafts, or with draft (a model
 * of m's vocabulary, or NULL) a drafter per slot (al_drafter). With a decode model dm (the same
 * file on another backend; NULL: none) each slot has a second context on dm, made on
 * the KV memory of the first where both backends see it (kv_shared_with): prompts run
 * on m, and the sequence is handed to dm's context to generate. */
al_status srv_engine_create(const al_model *m, const al_model *dm, int n_slots,
                            const al_context_params *cp, int max_queued, int draft_max,
                            const al_model *draft, srv_metrics *metrics, srv_engine **out);
/* Ends every job (SRV_FINISH_ERROR, which wakes their readers), refuses new ones and
 * joins the thread. The engine's lock stays usable, so readers can still poll and
 * release their jobs; call this before stopping the threads that hold jobs. */
void srv_engine_stop(srv_engine *e);
/* Stops if needed and frees the contexts; no job may be referenced any more. NULL is a
 * no-op. */
void srv_engine_destroy(srv_engine *e);

/* Positions per sequence. */
int srv_engine_n_ctx(const srv_engine *e);
/* Running and queued jobs, and the KV-cache positions the running ones hold (as of the
 * engine's last step). */
void srv_engine_counts(srv_engine *e, int *n_active, int *n_queued, long long *kv_used);

/* A new job with one reference (the caller's); NULL when out of memory. */
srv_job *srv_job_create(void);
/* Takes one more reference. */
void srv_job_ref(srv_engine *e, srv_job *j);
/* Drops a reference; the last one frees the job and everything it owns. e may be NULL
 * for a job that was never submitted. */
void srv_job_release(srv_engine *e, srv_job *j);

typedef enum srv_submit {
    SRV_SUBMIT_OK,
    SRV_SUBMIT_FULL,     /* every slot busy and the queue full: answer 429      */
    SRV_SUBMIT_STOPPING, /* the server is shutting down: answer 503             */
} srv_submit;

/* Queues the job; on SRV_SUBMIT_OK the engine takes its own reference. */
srv_submit srv_engine_submit(srv_engine *e, srv_job *j);

/* Asks the engine to drop the job: a queued job ends at once, a running one before the
 * next decode step. Harmless on a finished job. */
void srv_job_cancel(srv_engine *e, srv_job *j);

/* Waits up to ms milliseconds until the job has released text beyond byte `from`,
 * reasoning beyond byte r_from, or has ended; then appends the text from `from` on to
 * out and the reasoning from r_from on to r_out (each if not NULL) and fills *st.
 * Returns true when there was something new: text, reasoning or the end. */
bool srv_job_poll(srv_engine *e, srv_job *j, size_t from, size_t r_from, int ms, srv_buf *out,
                  srv_buf *r_out, srv_job_state *st);

#endif /* AL_SERVER_ENGINE_H */
