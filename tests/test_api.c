/* test_api.c: the public API (anyllm.h) given NULL handles, NULL out-parameters and
 * ids out of range: each call returns what the header's conventions say (AL_ERR_ARG
 * with a message, or zeros, -1, NULL) and crashes nothing. A crash ends the program
 * without its result line, which tests/run.sh counts as a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"

#define ARG_ERROR(call)                                                               \
    CHECK_MSG((call) == AL_ERR_ARG && al_last_error()[0] != '\0', "%s", #call)

static void test_null_handles(void) {
    al_model_info mi;
    memset(&mi, 0xff, sizeof mi);
    al_model_get_info(NULL, &mi);
    CHECK(mi.n_vocab == 0 && mi.arch == NULL && mi.backend == NULL && mi.n_bytes == 0);
    al_backend_stats bs;
    memset(&bs, 0xff, sizeof bs);
    al_model_get_backend_stats(NULL, &bs);
    CHECK(!bs.gpu && bs.n_dispatches == 0 && bs.weight_path == NULL);
    al_dispatch_time dt[2];
    CHECK(al_model_get_dispatch_times(NULL, dt, 2) == 0);
    CHECK(al_model_default_n_ctx(NULL) == 0);
    CHECK(al_model_vocab(NULL) == NULL);
    CHECK(al_model_chat_template(NULL) == NULL);

    al_gguf_info gi;
    memset(&gi, 0xff, sizeof gi);
    al_gguf_get_info(NULL, &gi);
    CHECK(gi.n_kv == 0 && gi.n_tensors == 0 && gi.version == 0);

    CHECK(al_context_n_past(NULL) == 0);
    CHECK(al_context_n_ctx(NULL) == 0);
    al_context_reset(NULL);
    ARG_ERROR(al_context_truncate(NULL, 0));
    al_context_info ci;
    memset(&ci, 0xff, sizeof ci);
    al_context_get_info(NULL, &ci);
    CHECK(ci.n_ctx == 0 && ci.n_past == 0 && ci.backend == NULL && !ci.kv_shared);

    const float logits[4] = {0, 1, 2, 3};
    CHECK(al_sampler_sample(NULL, logits) == -1);
    al_sampler_accept(NULL, 1);
    al_sampler_reset(NULL);

    const char *name = "unchanged";
    ARG_ERROR(al_chat_template_detect("<|im_start|>", NULL));
    ARG_ERROR(al_chat_render("chatml", NULL, NULL, 0, true, NULL));
    CHECK(al_chat_template_detect("<|im_start|>", &name) == AL_OK && strcmp(name, "chatml") == 0);
    CHECK(al_memory_read_sum(NULL, 64) == 0);
    const int n_backends = al_backend_list(NULL, 8); /* a count alone */
    const char *names[16] = {0};
    CHECK(n_backends >= 1 && al_backend_list(names, 16) == n_backends);
    CHECK(names[0] && strcmp(names[0], "cpu") == 0);
}

static void test_null_out(void) {
    ARG_ERROR(al_model_load("model.gguf", NULL, NULL));
    ARG_ERROR(al_sampler_create(NULL, 10, NULL));
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q4_0.gguf", test_shared_dir());
    al_model *m = NULL;
    if (al_model_load(path, NULL, &m) != AL_OK) {
        TEST_SKIP("%s: %s (the shared test data is missing)", path, al_last_error());
        return;
    }
    ARG_ERROR(al_context_create(m, NULL, NULL));
    al_model_get_info(m, NULL);
    al_model_get_backend_stats(m, NULL);
    CHECK(al_model_get_dispatch_times(m, NULL, 4) == 0);
    al_context *c = NULL;
    CHECK(al_context_create(m, NULL, &c) == AL_OK && c);
    if (c) {
        al_context_get_info(c, NULL);
        ARG_ERROR(al_context_truncate(c, -1));
        ARG_ERROR(al_context_handoff(c, NULL));
        ARG_ERROR(al_context_handoff(NULL, c));
        ARG_ERROR(al_eval(c, NULL, 2, NULL, false));
        CHECK(al_context_n_past(c) == 0);
        const int32_t tok[2] = {1, 2};
        CHECK(al_eval(c, tok, 2, NULL, false) == AL_OK && al_context_n_past(c) == 2);
    }
    al_context_destroy(c);
    al_model_destroy(m);
}

typedef struct log_seen {
    int n, n_warn;
    char last[256];
} log_seen;

static void log_catch(void *user, al_log_level level, const char *line) {
    log_seen *s = user;
    s->n++;
    s->n_warn += level == AL_LOG_WARN;
    snprintf(s->last, sizeof s->last, "%s", line);
}

/* The library speaks through al_set_log only: with --backend auto and no GPU it takes
 * (no device, or only a software one), the fall-back to the CPU arrives as a warning
 * line there; with the callback removed, the same load calls nothing. */
static void test_log(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q4_0.gguf", test_shared_dir());
    log_seen seen = {0};
    al_set_log(log_catch, &seen);
    al_model_params mp = al_model_default_params();
    mp.backend = "auto";
    al_model *m = NULL;
    const al_status st = al_model_load(path, &mp, &m);
    al_set_log(NULL, NULL);
    if (st != AL_OK) {
        TEST_SKIP("%s: %s (the shared test data is missing)", path, al_last_error());
        return;
    }
    al_model_info mi;
    al_model_get_info(m, &mi);
    char backend[128];
    snprintf(backend, sizeof backend, "%s", mi.backend);
    al_model_destroy(m);
    if (strncmp(backend, "cpu", 3) != 0) {
        TEST_SKIP("--backend auto took a GPU here (%s): no fall-back to log", backend);
        return;
    }
    CHECK_MSG(seen.n_warn >= 1 && strstr(seen.last, "using the CPU") && !strchr(seen.last, '\n'),
              "%d lines, %d warnings, last '%s'", seen.n, seen.n_warn, seen.last);
    const int before = seen.n;
    CHECK(al_model_load(path, &mp, &m) == AL_OK);
    al_model_destroy(m);
    CHECK_MSG(seen.n == before, "%d lines after the callback was removed", seen.n - before);
}

static void count_progress(void *user, const al_quantize_progress *p) {
    int *n = user;
    (*n)++;
    CHECK_MSG(p->index == *n && p->name && p->from_type && p->to_type && p->ne[0] > 0,
              "progress %d: index %d", *n, p->index);
}

/* The files section: al_gen_model and al_quantize refuse NULL arguments and values that
 * do not fit with AL_ERR_ARG and a message naming them; a tiny generated model loads,
 * and so does its F32 version quantized to Q8_0, the architecture kept. */
static void test_gen_quantize(void) {
    const char *names[64] = {0};
    const int n_types = al_quantize_types(names, NULL, 64);
    CHECK(n_types > 0 && n_types <= 64 && al_quantize_types(NULL, NULL, 0) == n_types);
    bool q8 = false;
    for (int i = 0; i < n_types && i < 64; i++) q8 |= names[i] && strcmp(names[i], "Q8_0") == 0;
    CHECK(q8);
    char archs[256];
    CHECK(strstr(al_gen_arch_names(archs, sizeof archs), "qwen3") != NULL);
    CHECK(strcmp(al_gen_arch_names(NULL, 8), "") == 0);

    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char f32[1024], q8_0[1024];
    snprintf(f32, sizeof f32, "%s/test_api_%d_f32.gguf", dir, (int)getpid());
    snprintf(q8_0, sizeof q8_0, "%s/test_api_%d_q8_0.gguf", dir, (int)getpid());
    al_gen_params gp = al_gen_default_params();
    ARG_ERROR(al_gen_model(NULL, &gp, NULL));
    ARG_ERROR(al_gen_model(f32, NULL, NULL));
    gp.arch = "qwen3";
    gp.type = "F32";
    gp.dim = 64;
    gp.layers = 2;
    gp.heads = 6;
    gp.kv_heads = 4;
    gp.head_dim = 16;
    gp.ffn = 128;
    gp.vocab = 300;
    gp.n_threads = 2;
    ARG_ERROR(al_gen_model(f32, &gp, NULL));
    CHECK_MSG(strstr(al_last_error(), "heads 6") && strstr(al_last_error(), "kv_heads 4"), "%s",
              al_last_error());
    gp.heads = 4;
    gp.kv_heads = 2;
    gp.type = "Q3_X";
    ARG_ERROR(al_gen_model(f32, &gp, NULL));
    CHECK_MSG(strstr(al_last_error(), "Q3_X") != NULL, "%s", al_last_error());
    gp.type = "f32";
    al_gen_report gr;
    al_status st = al_gen_model(f32, &gp, &gr);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    if (st != AL_OK) return;
    CHECK(gr.n_tensors > 0 && gr.n_params > 0 && gr.n_bytes == 4 * gr.n_params &&
          strcmp(gr.type, "F32") == 0 && gr.n_threads == 2);
    al_model *m = NULL;
    al_model_info mi;
    CHECK_MSG(al_model_load(f32, NULL, &m) == AL_OK, "%s", al_last_error());
    al_model_get_info(m, &mi);
    CHECK(mi.arch && strcmp(mi.arch, "qwen3") == 0 && mi.n_embd == 64 && mi.n_vocab == 300);
    al_model_destroy(m);

    al_quantize_params qp = al_quantize_default_params();
    ARG_ERROR(al_quantize(f32, q8_0, NULL, NULL));
    ARG_ERROR(al_quantize(f32, q8_0, &qp, NULL)); /* no type */
    qp.type = "Q3_X";
    ARG_ERROR(al_quantize(f32, q8_0, &qp, NULL));
    CHECK_MSG(strstr(al_last_error(), "Q3_X") != NULL, "%s", al_last_error());
    qp.type = "q8_0";
    int n_progress = 0;
    qp.progress = count_progress;
    qp.progress_user = &n_progress;
    al_quantize_report qr;
    st = al_quantize(f32, q8_0, &qp, &qr);
    CHECK_MSG(st == AL_OK, "%s", al_last_error());
    CHECK(qr.n_tensors == gr.n_tensors && n_progress == qr.n_tensors && qr.n_quantized > 0 &&
          strcmp(qr.type, "Q8_0") == 0 && qr.out_bytes < qr.in_bytes);
    m = NULL;
    CHECK_MSG(st == AL_OK && al_model_load(q8_0, NULL, &m) == AL_OK, "%s", al_last_error());
    al_model_get_info(m, &mi);
    CHECK(mi.arch && strcmp(mi.arch, "qwen3") == 0 && mi.n_layer == 2);
    al_model_destroy(m);
    remove(f32);
    remove(q8_0);
}

/* The backends' settings are parameters (al_model_params.cpu and .vulkan): a bad one
 * fails the load with AL_ERR_ARG and a message naming the field and the value, whichever
 * backend runs; a good one that is not the default shows in al_model_info.backend. */
static void test_settings(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q4_0.gguf", test_shared_dir());
    al_model_params mp = al_model_default_params();
    CHECK(mp.cpu.isa == NULL && mp.cpu.act == NULL && mp.cpu.amx == -1 && mp.cpu.x16 == -1 &&
          mp.cpu.x16_prefetch == -1 && mp.cpu.moe_fuse == -1 && mp.cpu.fuse == -1);
    CHECK(mp.vulkan.tune == NULL && mp.vulkan.timeout_ms < 0 && !mp.vulkan.no_subgroup &&
          mp.vulkan.max_weight_bytes == 0 && mp.vulkan.weights == NULL);
    al_model *m = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) {
        TEST_SKIP("%s: %s (the shared test data is missing)", path, al_last_error());
        return;
    }
    al_model_destroy(m);
    m = NULL;
    /* each bad value in turn: the field it is in, and the value as the message has it */
    static const struct {
        const char *field, *value;
    } bad[] = {{"cpu.isa", "nonsense"}, {"cpu.act", "q4"}, {"cpu.amx", "2"},
               {"cpu.fuse", "-2"}, {"vulkan.tune", "nokey=1"}, {"vulkan.weights", "disk"}};
    for (int i = 0; i < (int)(sizeof bad / sizeof *bad); i++) {
        al_model_params p = al_model_default_params();
        switch (i) {
        case 0: p.cpu.isa = bad[i].value; break;
        case 1: p.cpu.act = bad[i].value; break;
        case 2: p.cpu.amx = 2; break;
        case 3: p.cpu.fuse = -2; break;
        case 4: p.vulkan.tune = bad[i].value; break;
        default: p.vulkan.weights = bad[i].value; break;
        }
        const al_status st = al_model_load(path, &p, &m);
        const char *msg = al_last_error();
#ifndef AL_HAVE_VULKAN
        if (!strncmp(bad[i].field, "vulkan.", 7)) { /* no Vulkan backend to read them */
            al_model_destroy(m);
            m = NULL;
            continue;
        }
#endif
        CHECK_MSG(st == AL_ERR_ARG && m == NULL && strstr(msg, bad[i].field) &&
                      strstr(msg, bad[i].value),
                  "%s = %s: status %d, '%s'", bad[i].field, bad[i].value, (int)st, msg);
    }
    mp.cpu.isa = "scalar";
    mp.cpu.act = "precise";
    CHECK(al_model_load(path, &mp, &m) == AL_OK);
    al_model_info mi;
    al_model_get_info(m, &mi);
    CHECK_MSG(!strcmp(mi.backend, "cpu scalar q8x2"), "backend '%s'", mi.backend);
    al_model_destroy(m);
}

int main(void) {
    TEST_RUN(test_null_handles);
    TEST_RUN(test_null_out);
    TEST_RUN(test_log);
    TEST_RUN(test_gen_quantize);
    TEST_RUN(test_settings);
    return test_finish();
}
