/* cmd_text.c: the commands that take text: tokenize, run, perplexity (chat is in
 * cmd_chat.c; the generation loop in gen.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "kld.h"
#include "progress.h"
#include "split.h"

/* ---- tokenize ------------------------------------------------------------------------ */

int cmd_tokenize(const cli_opts *o) {
    size_t len;
    char *text = cli_read_prompt(o, &len);
    if (!text) return 1;
    al_vocab *v;
    al_status st = al_vocab_load(o->model, &v);
    if (st != AL_OK) {
        free(text);
        return cli_fail_status(st);
    }
    int32_t *ids = NULL;
    int n = 0;
    int rc = cli_tokenize(v, text, len, o->bos, o->special, &ids, &n);
    for (int i = 0; !rc && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (!rc) printf("\n");
    al_free_tokens(ids);
    al_vocab_destroy(v);
    free(text);
    return rc;
}

/* run's hint when a chat model ends its turn before saying anything: a bare prompt is
 * no turn of a conversation, so an instruct model often answers it with an end. */
static void explain_empty(const al_model *m) {
    const char *tmpl = al_model_chat_template(m);
    fprintf(stderr, "run: the model ended its turn at once (it sampled an end-of-turn token "
                    "first)%s; %s--ignore-eos continues the text anyway\n",
            tmpl && *tmpl ? ", as chat models do with a bare prompt" : "",
            tmpl && *tmpl ? "ask it with `anyllm chat`, or " : "");
}

int cmd_run(const cli_opts *o) {
    size_t len;
    char *text = cli_read_prompt(o, &len);
    if (!text) return 1;
    cli_split sp = {0}; /* the model and context per phase (split.h) */
    al_sampler *smp = NULL;
    spec_state spec = {0}, *specp = NULL; /* --spec, --model-draft */
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    if ((rc = cli_split_plan_text(o, text, len, &sp)) || (rc = cli_split_load(o, &sp)))
        goto done;
    rc = 1;
    al_model *m = sp.m;
    const al_vocab *v = cli_need_vocab(m);
    if (!v || cli_check_ctx(o, m) || cli_tokenize(v, text, len, true, o->special, &ids, &n))
        goto done;
    if (n == 0) {
        rc = cli_fail("run: the prompt is empty");
        goto done;
    }
    al_context_params cp = al_context_default_params();
    /* without -c: just what this run needs, unless -n -1 asks for all there is */
    if (o->n_ctx) cp.n_ctx = o->n_ctx;
    else if (o->n_predict >= 0) cp.n_ctx = n + o->n_predict;
    cli_kv_params(o, &cp);
    al_status st;
    if ((rc = cli_split_contexts(&sp, &cp))) goto done;
    if ((st = al_sampler_create(&o->sampling, cli_n_vocab(m), &smp)) != AL_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    al_context *c = sp.c;
    if (n > al_context_n_ctx(c)) {
        rc = cli_fail("run: the prompt has %d tokens, more than the context of %d", n,
                      al_context_n_ctx(c));
        goto done;
    }
    if ((rc = gen_spec_setup(o, m, sp.c_decode ? sp.c_decode : c, &spec, &specp))) goto done;
    fwrite(text, 1, len, stdout);
    fflush(stdout); /* before anything on stderr, when both go to one pipe */
    gen_stats gs = {0};
    gen_sink sink = {.shown = -1};
    gen_params gp = {.n_max = o->n_predict, .ignore_eos = o->ignore_eos, .decode = sp.c_decode,
                     .spec = specp};
    rc = generate(c, v, cli_n_vocab(m), smp, ids, n, &gp, &sink, &gs);
    printf("\n");
    fflush(stdout);
    if (!rc) gen_print_stats(&gs);
    if (!rc) gen_print_spec(gp.spec);
    if (!rc && !o->seed_set && o->sampling.temperature > 0)
        fprintf(stderr, "seed %llu (-s %llu gives this text again)\n",
                (unsigned long long)o->sampling.seed, (unsigned long long)o->sampling.seed);
    if (!rc && gs.n_gen == 0 && gs.end == GEN_EOG) explain_empty(m);
done:
    gen_spec_free(specp);
    al_free_tokens(ids);
    al_sampler_destroy(smp);
    cli_split_destroy(&sp);
    free(text);
    return rc;
}

/* ---- perplexity --------------------------------------------------------------------------- */

/* Negative log-likelihood of target under softmax(logits). */
static double nll(const float *logits, int n_vocab, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

enum { PPL_BATCH = 64 }; /* positions whose logits are held at once */

/* Scores one window of n_ctx tokens: the predictions of the second half, each with
 * at least n_ctx/2 tokens of context (the scheme llama.cpp's perplexity uses, so the
 * figures compare). */
static int ppl_window(al_context *c, const int32_t *w, int n_ctx, int n_vocab, float *logits,
                      double *sum_nll, int *n_scored, kld_run *kld, progress *pr, long done) {
    int first = n_ctx / 2;
    al_context_reset(c);
    for (int b = 0; b < n_ctx; b += PPL_BATCH) {
        int nb = n_ctx - b < PPL_BATCH ? n_ctx - b : PPL_BATCH;
        al_status st = al_eval(c, w + b, nb, logits, true);
        if (st != AL_OK) return cli_fail_status(st);
        for (int j = b; j < b + nb; j++) {
            if (j < first || j + 1 >= n_ctx) continue;
            const float *row = logits + (size_t)(j - b) * n_vocab;
            *sum_nll += nll(row, n_vocab, w[j + 1]);
            (*n_scored)++;
            int rc = kld ? kld_position(kld, row, n_vocab, w[j + 1]) : 0;
            if (rc) return rc;
        }
        progress_update(pr, done + b + nb);
    }
    return 0;
}

int cmd_perplexity(const cli_opts *o) {
    size_t len;
    char *text = cli_read_prompt(o, &len);
    if (!text) return 1;
    int n_ctx = o->n_ctx ? o->n_ctx : 512;
    if (n_ctx < 3) { /* a window scores positions n_ctx/2 .. n_ctx-2 */
        free(text);
        return cli_fail("perplexity: -c %d is too small: a window scores the predictions of "
                        "its second half, so it needs at least 3 tokens", n_ctx);
    }
    al_model *m = NULL;
    al_context *c = NULL;
    int32_t *ids = NULL, *bos = NULL;
    float *logits = NULL;
    int n = 0, n_bos = 0;
    kld_run kld = {0}, *kp = NULL; /* --kl-divergence(-base) */
    int rc = cli_load(o, n_ctx, &m, &c);
    const al_vocab *v = rc ? NULL : cli_need_vocab(m);
    /* the text starts with BOS where the file asks for one, and so does each window
     * after it (as llama.cpp's perplexity, whose windows then hold the same tokens) */
    if (!v || (rc = cli_tokenize(v, text, len, true, false, &ids, &n)) ||
        (rc = cli_tokenize(v, "", 0, true, false, &bos, &n_bos)))
        goto done;
    int n_chunks = n / n_ctx;
    if (o->n_chunks && o->n_chunks < n_chunks) n_chunks = o->n_chunks;
    if (n_chunks == 0) {
        rc = cli_fail("perplexity: the text has %d tokens, less than one window of %d", n, n_ctx);
        goto done;
    }
    int n_vocab = cli_n_vocab(m);
    logits = malloc((size_t)PPL_BATCH * (size_t)n_vocab * sizeof(float));
    if (!logits) {
        rc = cli_fail("out of memory");
        goto done;
    }
    for (int k = 0; k < n_chunks && n_bos > 0; k++) ids[(size_t)k * n_ctx] = bos[0];
    kp = o->kld_base || o->kld ? &kld : NULL;
    if (o->kld_base && o->kld) {
        rc = cli_fail("perplexity: --kl-divergence-base writes a reference and --kl-divergence "
                      "reads one: give one of them");
        goto done;
    }
    uint64_t n_pos = (uint64_t)n_chunks * (uint64_t)(n_ctx - 1 - n_ctx / 2);
    if (kp && (rc = kld_open(kp, o->kld_base ? o->kld_base : o->kld, o->kld_base != NULL,
                             n_vocab, n_ctx, n_chunks, kld_hash(ids, (size_t)n_chunks * n_ctx),
                             n_pos)))
        goto done;
    fprintf(stderr, "perplexity: %d tokens, %d windows of %d\n", n, n_chunks, n_ctx);
    double sum = 0, t0 = cli_now_s();
    int scored = 0;
    progress pr;
    progress_start(&pr, "perplexity", "tokens", (long)n_chunks * n_ctx);
    for (int k = 0; k < n_chunks && !rc; k++) {
        int32_t *w = ids + (size_t)k * n_ctx;
        rc = ppl_window(c, w, n_ctx, n_vocab, logits, &sum, &scored, kp, &pr, (long)k * n_ctx);
        progress_end(&pr);
        fprintf(stderr, "[%d] %.4f\n", k + 1, exp(sum / scored));
    }
    if (!rc)
        printf("perplexity: %.4f over %d scored tokens (%d windows of %d tokens, %.1f s)\n",
               exp(sum / scored), scored, n_chunks, n_ctx, cli_now_s() - t0);
    if (!rc && kp) rc = kld_finish(kp);
done:
    if (kp) kld_close(kp);
    free(logits);
    al_free_tokens(ids);
    al_free_tokens(bos);
    al_context_destroy(c);
    al_model_destroy(m);
    free(text);
    return rc;
}
