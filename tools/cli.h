/* cli.h: shared pieces of the anyllm command line (the tools folder). */
#ifndef AL_CLI_H
#define AL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "anyllm.h"

/* Seconds on a monotonic clock, for the tools' timings. */
static inline double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct cli_opts {
    const char *command;
    const char *model;         /* -m */
    const char *prompt;        /* -p */
    const char *prompt_file;   /* -f */
    const char *tokens;        /* --tokens 1,2,3 */
    const char *out;           /* --out */
    const char *chat_template; /* --chat-template NAME */
    const char *system;        /* -s / --system */
    const char *backend;       /* --backend cpu|vulkan[:N]|auto */
    const char *prefill_backend; /* --prefill-backend: the prompt's backend (split.h) */
    const char *decode_backend;  /* --decode-backend: the generated tokens' */
    int n_threads;             /* -t; 0 = all cores */
    int n_predict;             /* -n; -1 = until an end or a full context */
    int n_ctx;                 /* -c / --ctx; 0 = command's default */
    int n_chunks;              /* --chunks (perplexity); 0 = all */
    const char *kld_base;      /* --kl-divergence-base FILE (perplexity): write the reference */
    const char *kld;           /* --kl-divergence FILE (perplexity): compare with it */
    const char *spec;          /* --spec ngram (run, chat): speculative decoding */
    int draft_max;             /* --draft-max N: the longest draft */
    const char *model_draft;   /* --model-draft FILE: the draft model (--spec draft) */
    bool bos;                  /* --bos (tokenize) */
    bool special;              /* --special */
    bool show_reasoning;       /* --show-reasoning (chat): a Harmony reply's analysis too */
    bool ignore_eos;           /* --ignore-eos */
    bool precise;              /* --precise: backend cpu:precise */
    bool no_repack;            /* --no-repack: the CPU reads the weights in place */
    bool seed_set;
    int ngl;                   /* -ngl N; -1: not given */
    al_sampler_params sampling;
    bool no_context_shift;     /* --no-context-shift (chat): when the conversation no longer
                                  fits the context, exit instead of dropping the oldest turns */
    int ctx_checkpoints;       /* --ctx-checkpoints (chat): al_context_params.n_checkpoints */
    al_kv_type cache_type_k;   /* --cache-type-k: al_context_params.type_k */
    al_kv_type cache_type_v;   /* --cache-type-v */
    bool kv_unrotated;         /* --kv-unrotated: al_context_params.kv_unrotated */
    int mla_expand;            /* --mla-expand: al_context_params.mla_expand_min */
} cli_opts;

/* The KV cache options of o (--cache-type-k/-v, --kv-unrotated, --mla-expand) into cp. */
static inline void cli_kv_params(const cli_opts *o, al_context_params *cp) {
    cp->type_k = o->cache_type_k;
    cp->type_v = o->cache_type_v;
    cp->kv_unrotated = o->kv_unrotated;
    cp->mla_expand_min = o->mla_expand;
    cp->mtp = o->spec && !strcmp(o->spec, "mtp"); /* the block's cache, for its drafts */
}

/* Prints "anyllm: MESSAGE" on one line to stderr and returns 1 (an exit status). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
int cli_fail(const char *fmt, ...);
/* The same with the library's last error. */
int cli_fail_status(al_status st);

/* Parses a whole decimal integer in [lo, hi]; false (out untouched) otherwise. */
bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Applies -ngl (ngl >= 0: N > 0 is "vulkan", 0 "cpu"; refused beside --backend) and
 * then --precise (the CPU's precise mode; refused for another backend) to *backend,
 * saying once what -ngl became. 0, or an exit status with the message printed. */
int cli_resolve_backend(const char *command, const char **backend, int ngl, bool precise);

/* --no-repack (llama.cpp's name): the CPU backend reads the weights where the file maps
 * them rather than moving them into its x16 layout at load (cpu.x16 = 0, as
 * ANYLLM_X16=0; cli_settings_from_env applies it): loads in milliseconds, decodes
 * slower (README, CPU kernels). */
void cli_no_repack(void);

/* settings.c: the library's settings from the ANYLLM_* environment variables, the only
 * place the CLI reads them. Fills p's cpu and vulkan settings (over what is there:
 * start from al_model_default_params()); every al_model_params the CLI builds goes
 * through it. */
void cli_settings_from_env(al_model_params *p);
/* The process-wide ones, ANYLLM_VK_LOADER and ANYLLM_VK_VALIDATION, given to
 * al_set_vulkan_instance before anything uses Vulkan; 0, or an exit status with the
 * message printed. */
int cli_settings_instance(void);
/* A library message (a log line, al_last_error) as the CLI prints it: one about a
 * setting the user gave as a variable names the variable and its value, e.g.
 * "cpu.amx = 1: ..." becomes "ANYLLM_AMX=1: ...". Returns line itself or buf (size
 * bytes), which it fills. */
const char *cli_settings_message(const char *line, char *buf, size_t size);

/* Reads a whole file (- is stdin); NULL (with a message printed) on failure. Free with free(). */
char *cli_read_file(const char *path, size_t *len);

/* Fails (message printed, returns 1) if --ctx exceeds the model's training context. */
int cli_check_ctx(const cli_opts *o, const al_model *m);

/* Loads the model of -m with -t and --backend, with a progress line on a terminal
 * while a GPU takes the weights, if that takes over a second. */
al_status cli_model_load(const cli_opts *o, al_model **m);

/* Loads the model and a context of n_ctx positions (0 = the library's default), after
 * cli_check_ctx. */
int cli_load(const cli_opts *o, int n_ctx, al_model **m, al_context **c);

int cmd_info(const cli_opts *o);
int cmd_logits(const cli_opts *o);
int cmd_tokenize(const cli_opts *o);
int cmd_run(const cli_opts *o);
int cmd_chat(const cli_opts *o);
int cmd_perplexity(const cli_opts *o);
/* bench parses its own options (it takes several -m). argv[0] is "bench". */
int cmd_bench(int argc, char **argv);
/* `devices` lists the Vulkan devices; argv[0] is "devices". */
int cmd_devices(int argc, char **argv);
/* serve parses its own options too (src/server/). argv[0] is "serve". */
int cmd_serve(int argc, char **argv);
/* `profile -m FILE [-p N] [-d N] [-t N]`: the device profile (profile.h) and auto's
 * choice for a prompt of N tokens at depth N. argv[0] is "profile". */
int cmd_profile(int argc, char **argv);

#endif /* AL_CLI_H */
