/* test_exact.c: the logits of every quantized test model against the exact result for
 * its weights, beside llama.cpp's error against the same.
 *
 * The exact result is the reference ops' (cpu isa "ref": the weights dequantized to
 * f32, f32 activations), which agree with llama.cpp run on the file dequantized to F32
 * within NMSE 3e-7. Comparing a fast path with llama.cpp's own logits, as test_ref does,
 * measures the sum of two errors; this measures each one alone.
 *
 * tests/data/exact.tsv holds, per model of ../shared, llama.cpp's NMSE against the exact
 * result over the tokens of its .ref.json, and the limit of the default path as a
 * multiple of it (the file says why each limit is what it is). The paths checked:
 *   - the default CPU path (best ISA, 8-bit activations) and the AVX2 kernels where
 *     the CPU has something better: at most limit x llama.cpp's NMSE;
 *   - --precise (two activation passes): NMSE <= 1e-7;
 *   - `test_exact --backend vulkan` (tests/vulkan.sh): NMSE <= 1e-6.
 * `test_exact --model FILE REF.json LLAMA_NMSE LIMIT` checks one model outside
 * ../shared the same way (tests/gemma3.sh: the real Gemma 3 270M).
 */
#include <jansson.h>
#include <string.h>

#include "../tools/cli.h" /* cli_settings_instance (tools/settings.c) */
#include "anyllm.h"
#include "ref_check.h"
#include "test.h"

#define PRECISE_MAX 1e-7
#define VULKAN_MAX 1e-6

typedef struct exact_line {
    char path[1024];
    double llama_nmse, limit;
} exact_line;

/* A path through the engine: a backend and the CPU settings. */
typedef struct path {
    const char *name, *backend, *isa, *act;
} path;

static const char *g_backend; /* --backend: that backend alone */

/* The logits of every token of rc evaluated as one batch on path p, or NULL. */
static float *eval_path(const ref_case *rc, const path *p) {
    al_model_params mp = al_model_default_params();
    mp.n_threads = 2;
    mp.backend = p->backend;
    mp.cpu.isa = p->isa;
    mp.cpu.act = p->act;
    al_model *m = NULL;
    al_context *c = NULL;
    float *out = malloc((size_t)rc->n_tokens * (size_t)rc->n_vocab * sizeof(float));
    al_status st = out ? al_model_load(rc->name, &mp, &m) : AL_ERR_NOMEM;
    if (st == AL_OK) {
        al_context_params cp = al_context_default_params();
        cp.n_ctx = rc->n_tokens;
        st = al_context_create(m, &cp, &c);
    }
    if (st == AL_OK) st = al_eval(c, rc->tokens, rc->n_tokens, out, true);
    if (st != AL_OK) {
        fprintf(stderr, "  %s on %s: %s\n", rc->name, p->name, al_last_error());
        free(out);
        out = NULL;
    }
    al_context_destroy(c);
    al_model_destroy(m);
    return out;
}

/* The most a path's NMSE against the exact result may be for the line e. */
static double path_limit(const path *p, const exact_line *e) {
    if (p->backend && strncmp(p->backend, "vulkan", 6) == 0) return VULKAN_MAX;
    if (p->act && strcmp(p->act, "precise") == 0) return PRECISE_MAX;
    return e->limit * e->llama_nmse;
}

/* Checks every path on one model; rc->ref is unused (the exact result replaces it). */
static void check_model(const ref_case *rc, const exact_line *e, const path *paths, int n_paths) {
    const path ref = {"ref", "cpu", "ref", NULL};
    float *exact = eval_path(rc, &ref);
    CHECK_MSG(exact != NULL, "%s: the reference ops did not evaluate", rc->name);
    if (!exact) return;
    const char *base = strrchr(rc->name, '/') ? strrchr(rc->name, '/') + 1 : rc->name;
    printf("     %-26s llama.cpp %.3e\n", base, e->llama_nmse);
    for (int i = 0; i < n_paths; i++) {
        float *out = eval_path(rc, &paths[i]);
        CHECK_MSG(out != NULL, "%s: %s did not evaluate", rc->name, paths[i].name);
        if (!out) continue;
        const cmp_result r = compare(out, exact, rc->n_tokens, rc->n_vocab);
        const double max = path_limit(&paths[i], e);
        printf("       %-10s NMSE %.3e (%.2fx llama.cpp's)  top-1 %5.1f%%  limit %.3e\n",
               paths[i].name, r.nmse, r.nmse / e->llama_nmse, 100 * r.top1, max);
        CHECK_MSG(r.nmse <= max, "%s on %s: NMSE %.3e against the exact result > %.3e", base,
                  paths[i].name, r.nmse, max);
        free(out);
    }
    free(exact);
}

/* The CPU paths this machine runs: the default, the AVX2 kernels where the default
 * is AVX-512, and --precise. */
static int cpu_paths(path *paths) {
    char what[256] = "";
    int n = 0;
    paths[n++] = (path){"default", "cpu", NULL, NULL};
    if (al_backend_describe("cpu", what, sizeof what) == AL_OK && strstr(what, "avx512"))
        paths[n++] = (path){"avx2", "cpu", "avx2", NULL};
    paths[n++] = (path){"precise", "cpu", NULL, "precise"};
    return n;
}

static int load_line(const char *line, exact_line *e) {
    return line[0] != '#' &&
           sscanf(line, "%1023s %lf %lf", e->path, &e->llama_nmse, &e->limit) == 3;
}

/* The .ref.json beside a model: NAME.gguf -> NAME.ref.json in the same folder. */
static int case_of(const char *model_path, ref_case *rc) {
    char dir[1024], json[1024];
    const char *slash = strrchr(model_path, '/');
    if (!slash) return 0;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - model_path), model_path);
    snprintf(json, sizeof json, "%.*s.ref.json", (int)(strlen(slash + 1) - 5), slash + 1);
    return load_case(dir, json, rc);
}

static void test_shared_models(void) {
    char data[1024], line[2048];
    snprintf(data, sizeof data, "%s/exact.tsv",
             getenv("TEST_DATA") ? getenv("TEST_DATA") : "tests/data");
    FILE *f = fopen(data, "r");
    CHECK_MSG(f != NULL, "cannot open %s", data);
    if (!f) return;
    path paths[4];
    int n_paths = 0;
    if (g_backend) {
        paths[n_paths++] = (path){g_backend, g_backend, NULL, NULL};
    } else {
        n_paths = cpu_paths(paths);
    }
    int n_models = 0, n_absent = 0;
    while (fgets(line, sizeof line, f)) {
        exact_line e;
        if (!load_line(line, &e)) continue;
        char model[2048];
        snprintf(model, sizeof model, "%s/models/%s", test_shared_dir(), e.path);
        FILE *mf = fopen(model, "rb");
        if (!mf) { /* older shared data: the test says so below */
            n_absent++;
            continue;
        }
        fclose(mf);
        ref_case rc = {0};
        CHECK_MSG(case_of(model, &rc), "%s: no reference beside it", model);
        if (!rc.ref) continue;
        check_model(&rc, &e, paths, n_paths);
        free(rc.ref);
        n_models++;
    }
    fclose(f);
    if (n_models == 0 && n_absent > 0)
        TEST_SKIP("none of the %d models of %s is in %s/models", n_absent, data, test_shared_dir());
    else
        CHECK_MSG(n_models >= 12 && n_absent == 0, "%d models of %s checked, %d absent", n_models,
                  data, n_absent);
}

/* `--model FILE REF.json LLAMA_NMSE LIMIT`: one model, its tokens from REF.json (the
 * format of tests/gemma3.sh's reference: tokens, n_vocab). */
static const char *g_model, *g_json;
static exact_line g_line;

static void test_one_model(void) {
    ref_case rc = {0};
    json_error_t jerr;
    json_t *root = json_load_file(g_json, 0, &jerr);
    json_t *toks = root ? json_object_get(root, "tokens") : NULL;
    rc.n_tokens = (int)json_array_size(toks);
    rc.n_vocab = (int)json_integer_value(json_object_get(root, "n_vocab"));
    const bool ok = root && rc.n_tokens > 0 && rc.n_tokens <= 64 && rc.n_vocab > 0;
    CHECK_MSG(ok, "%s: no tokens or n_vocab", g_json);
    for (int i = 0; ok && i < rc.n_tokens; i++)
        rc.tokens[i] = (int32_t)json_integer_value(json_array_get(toks, (size_t)i));
    json_decref(root);
    if (!ok) return;
    snprintf(rc.name, sizeof rc.name, "%s", g_model);
    path paths[4];
    check_model(&rc, &g_line, paths, cpu_paths(paths));
}

int main(int argc, char **argv) {
    if (cli_settings_instance()) return 1;
    if (argc == 6 && !strcmp(argv[1], "--model")) {
        g_model = argv[2], g_json = argv[3];
        g_line = (exact_line){.llama_nmse = atof(argv[4]), .limit = atof(argv[5])};
        TEST_RUN(test_one_model);
        return test_finish();
    }
    if (argc == 3 && !strcmp(argv[1], "--backend")) g_backend = argv[2];
    TEST_RUN(test_shared_models);
    return test_finish();
}
