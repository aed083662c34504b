/* split.c: the prompt on one backend, the generated tokens on another (split.h). */
#include "split.h"

#include <stdio.h>
#include <string.h>

#include "profile.h"

/* "vulkan" is device 0: one spelling per backend, so that --prefill-backend vulkan
 * --decode-backend vulkan:0 is no split. */
static void set_name(char *dst, size_t size, const char *name) {
    snprintf(dst, size, "%s", !strcmp(name, "vulkan") ? "vulkan:0" : name);
}

/* auto looks the phases up in the profile unless both are named. */
static bool auto_wanted(const cli_opts *o) {
    return o->backend && !strcmp(o->backend, "auto") && !(o->prefill_backend && o->decode_backend);
}

int cli_split_plan(const cli_opts *o, int n_prompt, int n_depth, cli_split *s) {
    *s = (cli_split){0};
    const char *base = o->backend ? o->backend : "cpu";
    set_name(s->prefill, sizeof s->prefill, o->prefill_backend ? o->prefill_backend : base);
    set_name(s->decode, sizeof s->decode, o->decode_backend ? o->decode_backend : base);
    if (!auto_wanted(o)) return 0;
    /* auto: the profile's fastest backend for each phase not named explicitly */
    profile_choice pc;
    if (profile_choose(o->model, n_prompt, n_depth, o->n_threads, &pc) != 0) {
        fprintf(stderr, "auto: %s; the first GPU that works, else the CPU, runs both phases\n",
                pc.why);
        return 0;
    }
    if (!o->prefill_backend) set_name(s->prefill, sizeof s->prefill, pc.prefill);
    if (!o->decode_backend) set_name(s->decode, sizeof s->decode, pc.decode);
    fprintf(stderr, "auto: prefill on %s (%s), decode on %s (%s), from profile %s\n",
            s->prefill, o->prefill_backend ? "--prefill-backend" : pc.prefill_why, s->decode,
            o->decode_backend ? "--decode-backend" : pc.decode_why, pc.path);
    return 0;
}

int cli_split_plan_text(const cli_opts *o, const char *text, size_t len, cli_split *s) {
    int n = 0;
    al_vocab *v = NULL;
    if (auto_wanted(o) && al_vocab_load(o->model, &v) == AL_OK) {
        al_tokenize_params tp = {.add_special = true, .parse_special = o->special};
        int32_t *ids = NULL;
        if (al_tokenize(v, text, len, &tp, &ids, &n) != AL_OK) n = 0; /* run says why, later */
        al_free_tokens(ids);
        al_vocab_destroy(v);
    }
    return cli_split_plan(o, n, 0, s);
}

int cli_split_load(const cli_opts *o, cli_split *s) {
    cli_opts po = *o;
    po.backend = s->prefill;
    al_status st = cli_model_load(&po, &s->m);
    if (st == AL_OK && strcmp(s->prefill, s->decode)) {
        po.backend = s->decode;
        st = cli_model_load(&po, &s->m_decode);
    }
    return st == AL_OK ? 0 : cli_fail_status(st);
}

int cli_split_contexts(cli_split *s, const al_context_params *cp) {
    al_status st = s->m_decode ? al_context_create_pair(s->m, s->m_decode, cp, &s->c, &s->c_decode)
                               : al_context_create(s->m, cp, &s->c);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

int cli_split_open(const cli_opts *o, int n_prompt, int n_ctx, cli_split *s) {
    int rc = cli_split_plan(o, n_prompt, 0, s);
    if (!rc) rc = cli_split_load(o, s);
    if (!rc) rc = cli_check_ctx(o, s->m);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_checkpoints = o->ctx_checkpoints;
    cli_kv_params(o, &cp);
    if (!rc) rc = cli_split_contexts(s, &cp);
    if (rc) cli_split_destroy(s);
    return rc;
}

void cli_split_destroy(cli_split *s) {
    al_context_destroy_pair(s->c, s->c_decode);
    al_model_destroy(s->m_decode);
    al_model_destroy(s->m);
    *s = (cli_split){0};
}
