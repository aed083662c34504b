/* split.h: the prompt on one backend, the generated tokens on another (run, chat).
 *
 * --prefill-backend and --decode-backend name the backends of the two phases; without
 * them, --backend auto picks each from the device profile that `anyllm bench
 * --save-profile` stored (profile.h), and any other --backend runs both. Where the two
 * differ, the model file is loaded once per backend (the weights stay in the file
 * mapping, or a unified-memory GPU imports them: nothing is copied) and the decode
 * context is made on the KV memory of the prefill context (kv_shared_with), so the
 * hand-off after the prompt (generate(), gen_params.decode) moves no data where both
 * backends see the same memory, and copies the cache once where they do not.
 */
#ifndef AL_SPLIT_H
#define AL_SPLIT_H

#include "cli.h"

typedef struct cli_split {
    char prefill[32], decode[32]; /* backend names, as --backend takes them */
    al_model *m;           /* on the prefill backend; its vocabulary tokenizes */
    al_model *m_decode;    /* on the decode backend; NULL when one backend does both */
    al_context *c;         /* the prompt's context */
    al_context *c_decode;  /* the generated tokens' context; NULL when one does both */
} cli_split;

/* The backends of the two phases, for a prompt of n_prompt tokens after n_depth held
 * (what auto looks up in the profile). Prints auto's choice, or that there is no
 * profile, on stderr. 0 or an exit status (message printed). */
int cli_split_plan(const cli_opts *o, int n_prompt, int n_depth, cli_split *s);

/* cli_split_plan for a prompt text at depth 0 (run): tokenized with the file's
 * vocabulary when auto needs its length. */
int cli_split_plan_text(const cli_opts *o, const char *text, size_t len, cli_split *s);

/* Loads the model on the planned backend(s). 0 or an exit status. */
int cli_split_load(const cli_opts *o, cli_split *s);

/* Makes the context(s) with cp (cp->n_ctx 0: the library's default): the one on the
 * CPU first, where one side is, so that the GPU imports the CPU's ordinary memory
 * rather than the CPU reading a GPU's mapping. 0 or an exit status. */
int cli_split_contexts(cli_split *s, const al_context_params *cp);

/* All of the above for a prompt of n_prompt tokens at depth 0, after cli_check_ctx
 * (chat, as cli_load): 0, or an exit status with nothing left to free. */
int cli_split_open(const cli_opts *o, int n_prompt, int n_ctx, cli_split *s);

/* Frees the contexts, the one using the other's memory first, and the models. */
void cli_split_destroy(cli_split *s);

#endif /* AL_SPLIT_H */
