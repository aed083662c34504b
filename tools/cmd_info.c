/* cmd_info.c: `anyllm info` and `anyllm logits`.
 *
 * `info` reads the GGUF header directly (al_gguf), so it also describes files the
 * engine cannot run, such as vocabulary-only files; when the file is runnable it adds
 * the hyper-parameters and the memory a context needs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- info ------------------------------------------------------------------------------ */

static void print_size(const char *label, uint64_t n_bytes) {
    printf("%-22s %" PRIu64 " bytes (%.2f MiB)\n", label, n_bytes, (double)n_bytes / 1048576.0);
}

/* The header: metadata and tensors (al_gguf); returns the count of tensors, or -1 with
 * the status in *st. */
static int64_t print_header(const char *path, al_status *st) {
    al_gguf *g;
    if ((*st = al_gguf_open(path, &g)) != AL_OK) return -1;
    al_gguf_info gi;
    al_gguf_get_info(g, &gi);
    char key[256], value[96];
    printf("file                   %s\n", path);
    printf("gguf version           %u\n", gi.version);
    print_size("file size", gi.file_size);
    printf("alignment              %" PRIu64 "\n\n", gi.alignment);
    printf("metadata (%" PRIu64 " keys):\n", gi.n_kv);
    for (uint64_t i = 0; i < gi.n_kv; i++) {
        const char *type;
        bool cut;
        al_gguf_kv(g, i, key, sizeof key, &type, value, sizeof value, &cut);
        const bool str = !strcmp(type, "string");
        printf("  %-44s %-7s %s%s%s%s\n", key, type, str ? "\"" : "", value, str ? "\"" : "",
               cut ? "..." : "");
    }
    uint64_t n_params = 0, n_bytes = 0;
    printf("\ntensors (%" PRIu64 "):\n", gi.n_tensors);
    for (uint64_t i = 0; i < gi.n_tensors; i++) {
        al_gguf_tensor t;
        al_gguf_tensor_info(g, i, key, sizeof key, &t);
        char shape[128];
        int len = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < t.n_dims; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? ", " : "",
                            t.ne[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %-36s %-6s %-24s %12" PRIu64 " bytes\n", key, t.type, shape, t.n_bytes);
        n_params += t.n_elem;
        n_bytes += t.n_bytes;
    }
    printf("\nparameters             %" PRIu64 " (%.3f M)\n", n_params, (double)n_params / 1e6);
    print_size("tensor data", n_bytes);
    al_gguf_close(g);
    return (int64_t)gi.n_tensors;
}

int cmd_info(const cli_opts *o) {
    al_status st;
    const int64_t n_tensors = print_header(o->model, &st);
    if (n_tensors < 0) return cli_fail_status(st);
    if (n_tensors == 0) {
        printf("(vocabulary-only file: no weights to run)\n");
        return 0;
    }
    al_model *m;
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    mp.n_threads = 1;
    mp.backend = o->backend;
    mp.mla_absorbed = o->mla_expand < 0;
    double t0 = cli_now_s();
    st = al_model_load(o->model, &mp, &m);
    if (st != AL_OK) {
        printf("runnable               no: %s\n", al_last_error());
        return 0;
    }
    double load_s = cli_now_s() - t0;
    al_model_info mi;
    al_model_get_info(m, &mi);
    printf("backend                %s, loaded in %.3f s\n", mi.backend, load_s);
    al_backend_stats bs;
    al_model_get_backend_stats(m, &bs);
    if (bs.weight_path)
        printf("vulkan weights         %s: %" PRIu64 " bytes used in place, %" PRIu64 " bytes "
               "copied, %.3f s\n", bs.weight_path, bs.bytes_imported, bs.bytes_copied, bs.load_s);
    int n_ctx = al_model_default_n_ctx(m);
    printf("architecture           %s: %d layers, n_embd %d, %d heads (%d kv, dim %d), ffn %d, "
           "vocab %d, trained ctx %d\n", mi.arch, mi.n_layer, mi.n_embd, mi.n_head, mi.n_head_kv,
           mi.head_dim, mi.n_ff, mi.n_vocab, mi.n_ctx_train);
    printf("features               %s\n", mi.features);
    /* what `chat` and `serve` will use unless told otherwise */
    const char *tmpl = al_model_chat_template(m), *chat = NULL;
    if (al_chat_template_choose(tmpl, mi.arch, &chat) == AL_OK)
        printf("chat template          %s%s%s%s\n", chat, tmpl && *tmpl ? "" : " (built in for ",
               tmpl && *tmpl ? "" : mi.arch, tmpl && *tmpl ? "" : "; the file has none)");
    else
        printf("chat template          none: %s\n", al_last_error());
    char label[64];
    const al_kv_type tk = o->cache_type_k, tv = o->cache_type_v;
    const uint64_t kv = al_model_kv_bytes(m, n_ctx, tk, tv);
    snprintf(label, sizeof label, "kv cache (ctx %d)", n_ctx); /* the default context */
    print_size(label, kv);
    /* per position: what a longer context costs; a sliding layer's ring stops growing */
    const uint64_t per_pos = al_model_kv_bytes(m, 2, tk, tv) - al_model_kv_bytes(m, 1, tk, tv);
    const char *rot = (tk == AL_KV_Q8_0 || tk == AL_KV_Q4_0 || tv == AL_KV_Q8_0 ||
                       tv == AL_KV_Q4_0) && !o->kv_unrotated ? ", heads rotated" : "";
    if (mi.kv_latent_dim) /* one row per layer holds every head's keys and values */
        printf("kv per position        %llu bytes (latent rows of %d, %s%s: the expanded keys "
               "and values, %d per layer, would take %.1fx)\n", (unsigned long long)per_pos,
               mi.kv_latent_dim, al_kv_type_name(tk), rot, mi.kv_expanded_dim,
               (double)mi.kv_expanded_dim / mi.kv_latent_dim);
    if (mi.kv_latent_dim) { /* the form of prompts' attention, and what it costs */
        char when[96];
        if (!mi.mla_expand_bytes || tk != AL_KV_F32)
            snprintf(when, sizeof when, "absorbed only (%s)",
                     o->mla_expand < 0     ? "--mla-expand -1"
                     : tk != AL_KV_F32     ? "the expanded form takes an f32 cache"
                                           : "values wider than keys");
        else
            snprintf(when, sizeof when, "expanded for batches of %d tokens or more",
                     o->mla_expand ? o->mla_expand : AL_MLA_EXPAND_MIN);
        printf("prompt attention       %s; the expanded form's f32 k_b and v_b take %.1f MiB\n",
               when, mi.mla_expand_bytes / 1048576.0);
    }
    else
        printf("kv per position        %llu bytes (keys %s, values %s%s)\n",
               (unsigned long long)per_pos, al_kv_type_name(tk), al_kv_type_name(tv), rot);
    /* a recurrent model's state checkpoints (chat and serve keep the default number) */
    const uint64_t ckpt = mi.n_recurrent ? (uint64_t)AL_DEFAULT_CHECKPOINTS * mi.state_bytes : 0;
    if (ckpt) {
        snprintf(label, sizeof label, "state checkpoints (%d)", AL_DEFAULT_CHECKPOINTS);
        print_size(label, ckpt);
    }
    print_size("memory needed", mi.n_bytes + kv + ckpt);
    /* what bounds decoding: a mixture of experts reads only the experts a token picks */
    print_size("read per token", mi.n_bytes_per_token);
    al_model_destroy(m);
    return 0;
}

/* ---- logits ---------------------------------------------------------------------------- */

static int parse_tokens(const char *s, int32_t **out, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return cli_fail("out of memory"), 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return cli_fail("--tokens: '%s' is not a comma-separated list of token ids", s), 0;
        }
        if (n == cap) {
            int32_t *bigger = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!bigger) {
                free(ids);
                return cli_fail("out of memory"), 0;
            }
            ids = bigger;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        free(ids);
        return cli_fail("--tokens: the list is empty"), 0;
    }
    *out = ids;
    *n_out = n;
    return 1;
}

int cmd_logits(const cli_opts *o) {
    if (!o->tokens || !o->out) return cli_fail("logits: --tokens and --out are required");
    int32_t *ids;
    int n;
    if (!parse_tokens(o->tokens, &ids, &n)) return 1;
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    mp.n_threads = o->n_threads;
    mp.backend = o->backend;
    mp.mla_absorbed = o->mla_expand < 0;
    al_model *m = NULL;
    al_context *c = NULL;
    float *logits = NULL;
    int rc = 1;
    al_status st = al_model_load(o->model, &mp, &m);
    if (st != AL_OK) goto done;
    al_model_info mi;
    al_model_get_info(m, &mi);
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n;
    cli_kv_params(o, &cp);
    if ((st = al_context_create(m, &cp, &c)) != AL_OK) goto done;
    logits = malloc((size_t)n * (size_t)mi.n_vocab * sizeof(float));
    if (!logits) {
        cli_fail("out of memory for logits");
        goto cleanup;
    }
    if ((st = al_eval(c, ids, n, logits, true)) != AL_OK) goto done;
    FILE *f = fopen(o->out, "wb");
    if (!f) {
        cli_fail("cannot open %s for writing", o->out);
        goto cleanup;
    }
    size_t n_vals = (size_t)n * (size_t)mi.n_vocab;
    int ok = fwrite(logits, sizeof(float), n_vals, f) == n_vals;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        cli_fail("error writing %s", o->out);
        goto cleanup;
    }
    rc = 0;
    goto cleanup;
done:
    rc = cli_fail_status(st);
cleanup:
    free(logits);
    free(ids);
    al_context_destroy(c);
    al_model_destroy(m);
    return rc;
}

