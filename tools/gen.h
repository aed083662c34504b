/* gen.h: generation for the text commands (run, chat): evaluate a prompt, then sample
 * and stream tokens until an end, a limit, a full context or Ctrl-C. */
#ifndef AL_GEN_H
#define AL_GEN_H

#include <signal.h>
#include <stdbool.h>

#include "cli.h"
#include "spec.h"

/* Set by a SIGINT handler (chat's): generate stops at the next token or prompt chunk. */
extern volatile sig_atomic_t cli_interrupted;

typedef enum gen_end {
    GEN_LIMIT,       /* n_max tokens generated */
    GEN_EOG,         /* the model ended its turn (an end-of-generation token) */
    GEN_DONE,        /* a complete Harmony reply */
    GEN_FULL,        /* the context is full */
    GEN_INTERRUPTED, /* cli_interrupted was set */
} gen_end;

typedef struct gen_stats {
    int n_prompt, n_gen;
    int n_prompt_done;               /* prompt tokens evaluated (less if interrupted) */
    double t_prompt, t_first, t_gen; /* seconds: prompt eval, to first token (the
                                        hand-off included), decode */
    gen_end end;
    /* with gen_params.decode: the backends of the two phases and the hand-off */
    const char *prefill_on, *decode_on;
    double t_handoff;                /* seconds in al_context_handoff */
    bool kv_shared;                  /* the two contexts share the KV memory */
    uint64_t kv_bytes_copied;        /* by the hand-off after the prompt */
} gen_stats;

typedef struct reply_buf {
    char *s;
    size_t len, cap;
} reply_buf;

/* Where generated text goes: to stdout as it comes, or, for a Harmony reply, through
 * the parser, which keeps the answer (final channel) apart from the reasoning. */
typedef struct gen_sink {
    reply_buf *reply;    /* collects the answer; may be NULL                           */
    al_harmony *harmony; /* NULL: all the text is the answer                           */
    bool show_reasoning; /* print the other channels too, each run marked "[analysis] " */
    int shown;           /* the channel of the last text printed; -1 before any        */
    bool silent;         /* print nothing (bench): the reply still collects the answer */
} gen_sink;

typedef struct gen_params {
    int n_max;         /* tokens to generate at most; < 0: until an end or a full context */
    bool ignore_eos;   /* end-of-generation tokens are never sampled */
    bool quiet_full;   /* no "[context full]" line (the caller says what it does) */
    /* NULL, or the context the generated tokens are evaluated on (another backend's,
     * split.h): the prompt's context hands it the sequence (al_context_handoff) before
     * the first token is sampled, so TTFT includes the hand-off */
    al_context *decode;
    bool hand_back;    /* and takes the sequence back at the end (chat's next turn
                          starts from the prompt's context) */
    /* a model with a recurrent state: checkpoint it before the prompt's last token
     * (al_context_checkpoint), where the next turn's prompt, which starts with this
     * one, can go back to */
    bool checkpoint;
    /* NULL, or n-gram drafts checked several tokens per evaluation (spec.h): the same
     * tokens as without, the sampler seeing the same logits in the same order */
    spec_state *spec;
    const int32_t *held; /* the tokens the context holds before the prompt (chat's earlier
                            turns), which drafts read too; NULL: none */
    int n_held;
} gen_params;

/* Logits per position (the model's count, which al_eval writes). */
int cli_n_vocab(const al_model *m);
/* The model's tokenizer; NULL with a message printed if it has none. */
const al_vocab *cli_need_vocab(const al_model *m);
/* The text of -p, or of -f FILE (- is stdin); NULL (message printed) if neither. */
char *cli_read_prompt(const cli_opts *o, size_t *len);
/* al_tokenize with a message on failure; 0 or an exit status. */
int cli_tokenize(const al_vocab *v, const char *text, size_t len, bool add_special,
                 bool parse_special, int32_t **ids, int *n);

/* --spec, --model-draft and --draft-max into *s, and *out = s when speculation is asked
 * for (else NULL): a draft model is loaded as the model is (backend, threads), checked to
 * share m's vocabulary, with a context of c's positions; --spec mtp drafts over c itself
 * (the context that decodes, made with cli_kv_params' mtp). 0 or an exit status
 * (message printed). gen_spec_free frees what it made. */
int gen_spec_setup(const cli_opts *o, const al_model *m, al_context *c, spec_state *s,
                   spec_state **out);
void gen_spec_free(spec_state *s);
/* The drafts' line for the summary: drafts, tokens drafted and accepted. */
void gen_print_spec(const spec_state *s);

/* Evaluates the prompt (appended to what the context holds; a progress line on a
 * terminal if it takes over a second), then generates into the sink. 0 or an exit
 * status (message printed); gs says how it ended. */
int generate(al_context *c, const al_vocab *v, int n_vocab, al_sampler *smp,
             const int32_t *prompt, int n_prompt, const gen_params *gp, gen_sink *out,
             gen_stats *gs);

/* The one-line summary on stderr: prompt tokens, pp, TTFT, generated tokens, tg; and a
 * line on the split, if there was one. */
void gen_print_stats(const gen_stats *g);

#endif /* AL_GEN_H */
