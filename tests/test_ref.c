/* test_ref.c: logits of every reference model in ../shared/models/ref and
 * ../shared/models/qwen3 against the logits an independent implementation computed for
 * the same tokens.
 *
 * For each NAME.ref.json: the 48 tokens are evaluated as one batch and the logits of
 * every position are compared with NAME.logits.f32 by NMSE (sum (a-b)^2 / sum b^2)
 * and by agreement of the argmax. F32 and F16 files must reach NMSE <= 1e-4 and 98%
 * agreement; quantized files (whose reference also rounds activations to 8 bits)
 * NMSE <= 1.5e-3 and 90% (ref_check.h says why). The same tokens are then fed through the KV cache in pieces
 * (a batch, then one token at a time) and with other thread counts; those paths must
 * agree with the single batch.
 *
 * `test_ref --compare A.f32 B.f32 [max_nmse]` compares two logit files (used by the
 * CLI test); `--compare-ref` and `--greedy` check a model against a reference that
 * stores only some positions (the real Gemma 3 270M, tests/gemma3.sh); see below.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "../tools/cli.h" /* cli_settings_from_env (tools/settings.c) */
#include "anyllm.h"
#include "ref_check.h"
#include "test.h"

/* The backend the reference cases run on: NULL (the CPU), or the one --dir names. */
static const char *g_backend;

/* The parameters of every model loaded here: the scripts run this program with the
 * CLI's ANYLLM_* variables (tests/ref_paths.sh: ANYLLM_ISA=ref and ANYLLM_ACT=q8x2;
 * tests/vulkan.sh: ANYLLM_VK_VALIDATION=1), which the CLI's reader maps. */
static al_model_params ref_params(void) {
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    return mp;
}

/* The library's notes on stderr, as the CLI prints them: tests/vulkan.sh reads the
 * validation count ("anyllm: vulkan validation: N messages"). */
static void log_to_stderr(void *user, al_log_level level, const char *line) {
    (void)user;
    (void)level;
    fprintf(stderr, "anyllm: %s\n", line);
}

/* Evaluates the case's tokens in pieces of the given sizes (0-terminated list; the
 * last piece size repeats) and returns all logits, or NULL on failure. */
static float *eval_pieces(const ref_case *rc, int n_threads, const int *pieces) {
    al_model_params mp = ref_params();
    mp.n_threads = n_threads;
    mp.backend = g_backend;
    al_model *m = NULL;
    al_context *c = NULL;
    float *out = malloc((size_t)rc->n_tokens * (size_t)rc->n_vocab * sizeof(float));
    al_status st = al_model_load(rc->name, &mp, &m);
    if (st == AL_OK) {
        al_context_params cp = al_context_default_params();
        cp.n_ctx = rc->n_tokens;
        st = al_context_create(m, &cp, &c);
    }
    int done = 0, k = 0;
    while (st == AL_OK && out && done < rc->n_tokens) {
        int n = pieces[k] ? pieces[k] : pieces[k - 1];
        if (pieces[k]) k++;
        if (n > rc->n_tokens - done) n = rc->n_tokens - done;
        st = al_eval(c, rc->tokens + done, n, out + (size_t)done * rc->n_vocab, true);
        done += n;
    }
    if (st != AL_OK) {
        fprintf(stderr, "  %s: %s\n", rc->name, al_last_error());
        free(out);
        out = NULL;
    }
    al_context_destroy(c);
    al_model_destroy(m);
    return out;
}

static void check_case(const ref_case *rc) {
    static const int one_batch[] = {64, 0};
    static const int split[] = {40, 1, 0};     /* prompt, then token by token */
    static const int ragged[] = {7, 13, 3, 0}; /* awkward chunk sizes */
    double max_nmse, min_top1;
    ref_limits(rc->name, &max_nmse, &min_top1);

    float *batch = eval_pieces(rc, 2, one_batch);
    CHECK_MSG(batch != NULL, "%s did not evaluate", rc->name);
    if (!batch) return;
    cmp_result r = compare(batch, rc->ref, rc->n_tokens, rc->n_vocab);
    printf("     %-28s NMSE %.3e  top-1 %5.1f%% (%5.1f%% with near-ties)  limits %.1e, %.0f%%\n",
           strrchr(rc->name, '/') + 1, r.nmse, 100 * r.top1, 100 * r.top1_res, max_nmse,
           100 * min_top1);
    CHECK_MSG(r.nmse <= max_nmse, "%s: NMSE %.3e > %.0e", rc->name, r.nmse, max_nmse);
    CHECK_MSG(r.top1_res >= min_top1, "%s: top-1 %.3f < %.2f", rc->name, r.top1_res, min_top1);
    /* near-ties may excuse at most one position in 24 */
    CHECK_MSG(r.top1 >= min_top1 - 1.0 / 24, "%s: top-1 %.3f", rc->name, r.top1);

    const int *variants[] = {split, ragged};
    for (int v = 0; v < 2; v++) {
        for (int nt = 1; nt <= 3; nt += 2) {
            float *other = eval_pieces(rc, nt, variants[v]);
            CHECK_MSG(other != NULL, "%s: piecewise evaluation failed", rc->name);
            if (!other) continue;
            cmp_result s = compare(other, batch, rc->n_tokens, rc->n_vocab);
            CHECK_MSG(s.nmse <= 1e-10 && s.top1 == 1.0,
                      "%s: pieces variant %d with %d threads differs from one batch: NMSE %.3e",
                      rc->name, v, nt, s.nmse);
            free(other);
        }
    }
    free(batch);
}

/* Greedy decoding one token at a time after the prompt; returns how many of the
 * reference's greedy tokens were reproduced before the first difference. */
static int greedy_prefix(const ref_case *rc) {
    al_model *m = NULL;
    al_context *c = NULL;
    float *logits = malloc((size_t)rc->n_vocab * sizeof(float));
    int n_same = -1;
    al_model_params mp = ref_params();
    mp.backend = g_backend;
    if (!logits || al_model_load(rc->name, &mp, &m) != AL_OK) goto done;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = rc->n_tokens + rc->n_greedy;
    if (al_context_create(m, &cp, &c) != AL_OK ||
        al_eval(c, rc->tokens, rc->n_tokens, logits, false) != AL_OK)
        goto done;
    for (n_same = 0; n_same < rc->n_greedy; n_same++) {
        int32_t next = argmax(logits, rc->n_vocab);
        if (next != rc->greedy[n_same] || al_eval(c, &next, 1, logits, false) != AL_OK) break;
    }
done:
    free(logits);
    al_context_destroy(c);
    al_model_destroy(m);
    return n_same;
}

/* Checks every NAME.ref.json of dir; returns how many cases ran, -1 if dir is absent. */
static int check_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n_cases = 0;
    struct dirent *e;
    char names[64][256];
    int n_names = 0;
    while ((e = readdir(d)) && n_names < 64)
        if (strstr(e->d_name, ".ref.json")) snprintf(names[n_names++], 256, "%s", e->d_name);
    closedir(d);
    for (int i = 0; i < n_names; i++) {
        ref_case rc = {0};
        CHECK_MSG(load_case(dir, names[i], &rc), "cannot read %s", names[i]);
        if (!rc.ref) continue;
        check_case(&rc);
        int n_same = greedy_prefix(&rc);
        printf("     %-28s greedy decode: %d of %d reference tokens reproduced\n",
               strrchr(rc.name, '/') + 1, n_same, rc.n_greedy);
        /* F32 has no reference noise: its free-running greedy sequence must match */
        if (strstr(rc.name, "-f32.gguf")) CHECK(n_same == rc.n_greedy);
        else CHECK(n_same >= 1);
        free(rc.ref);
        n_cases++;
    }
    printf("     %d reference models of %s checked\n", n_cases, dir);
    return n_cases;
}

/* The cases of $SHARED/models/SUB: at least min of them, or a skip saying why. */
static void check_shared_dir(const char *sub, int min, const char *why_absent) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", test_shared_dir(), sub);
    int n = check_dir(dir);
    if (n < 0) TEST_SKIP("%s not found (%s)", dir, why_absent);
    else CHECK(n >= min);
}

static void test_ref_models(void) {
    check_shared_dir("ref", 10, "the shared test data is missing");
}

/* Qwen3 (per-head Q/K norm, head_dim 96 with n_embd 256, tied output): F32, Q8_0 and
 * Q4_K_M, with the same limits as the others. */
static void test_qwen3_models(void) {
    check_shared_dir("qwen3", 3, "older shared test data");
}

/* Mixture of experts: qwen3moe (F32, Q8_0, Q4_K_M) and gpt-oss (F32, MXFP4_MOE: attention
 * sinks, a 16-position sliding window on even layers, biases), with the same limits
 * and the same pieces (token by token, ragged chunks) as the others. */
static void test_moe_models(void) {
    check_shared_dir("moe", 5, "older shared test data");
}

/* --dir DIR BACKEND: every case of one folder on one backend (tests/vulkan.sh). */
static const char *g_dir;
static void test_dir(void) {
    int n = check_dir(g_dir);
    if (n < 0) TEST_SKIP("%s not found", g_dir);
    else CHECK(n >= 1);
}

/* Bad arguments to al_eval are refused without changing the context. */
static void test_eval_errors(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-llama-Q8_0.gguf", test_shared_dir());
    const al_model_params mp = ref_params();
    al_model *m = NULL;
    al_context *c = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) {
        TEST_SKIP("%s: %s", path, al_last_error());
        return;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 8;
    CHECK(al_context_create(m, &cp, &c) == AL_OK);
    int32_t bad[] = {1, 5000};
    CHECK(al_eval(c, bad, 2, NULL, false) == AL_ERR_ARG);
    CHECK(strstr(al_last_error(), "5000") != NULL);
    int32_t neg[] = {-1};
    CHECK(al_eval(c, neg, 1, NULL, false) == AL_ERR_ARG);
    CHECK(al_context_n_past(c) == 0);
    int32_t many[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(al_eval(c, many, 9, NULL, false) == AL_ERR_ARG);
    CHECK(al_eval(c, many, 8, NULL, false) == AL_OK);
    CHECK(al_context_n_past(c) == 8);
    CHECK(al_eval(c, many, 1, NULL, false) == AL_ERR_ARG);
    al_context_reset(c);
    CHECK(al_eval(c, many, 1, NULL, false) == AL_OK);
    /* the CPU runs on the host: no submissions to count (al_backend_stats) */
    al_backend_stats bs = {.gpu = true, .n_dispatches = 1};
    al_model_get_backend_stats(m, &bs);
    CHECK(!bs.gpu && bs.n_submits == 0 && bs.n_dispatches == 0 && bs.wait_s == 0 &&
          !bs.weight_path);
    al_context_destroy(c);
    al_model_destroy(m);
    al_context_destroy(NULL);
    al_model_destroy(NULL);
}

/* Continuous batching: a decode step of three sequences at different positions, as
 * one batch, gives each the logits it gets alone. */
static void test_eval_multi(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/ref/ref-qwen2-f16.gguf", test_shared_dir());
    const al_model_params mp = ref_params();
    al_model *m = NULL;
    if (al_model_load(path, &mp, &m) != AL_OK) {
        TEST_SKIP("%s: %s", path, al_last_error());
        return;
    }
    al_model_info mi;
    al_model_get_info(m, &mi);
    enum { N_SEQ = 3, STEPS = 4 };
    static const int32_t prompts[N_SEQ][6] = {{1, 5, 9, 200, 31, 7}, {1, 900}, {1, 42, 43, 44}};
    static const int n_prompt[N_SEQ] = {6, 2, 4};
    al_context *batched[N_SEQ] = {0}, *alone[N_SEQ] = {0};
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 16;
    float *lb = malloc((size_t)N_SEQ * mi.n_vocab * sizeof(float));
    float *la = malloc((size_t)mi.n_vocab * sizeof(float));
    for (int i = 0; i < N_SEQ; i++) {
        CHECK(al_context_create(m, &cp, &batched[i]) == AL_OK);
        CHECK(al_context_create(m, &cp, &alone[i]) == AL_OK);
        CHECK(al_eval(batched[i], prompts[i], n_prompt[i], NULL, false) == AL_OK);
        CHECK(al_eval(alone[i], prompts[i], n_prompt[i], NULL, false) == AL_OK);
    }
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        int32_t next[N_SEQ] = {(int32_t)(10 + step), (int32_t)(500 + step), (int32_t)(77 * step + 3)};
        CHECK(al_eval_multi(batched, next, N_SEQ, lb) == AL_OK);
        for (int i = 0; i < N_SEQ; i++) {
            CHECK(al_eval(alone[i], &next[i], 1, la, false) == AL_OK);
            cmp_result r = compare(lb + (size_t)i * mi.n_vocab, la, 1, mi.n_vocab);
            if (r.nmse > worst) worst = r.nmse;
            CHECK(al_context_n_past(batched[i]) == al_context_n_past(alone[i]));
        }
    }
    printf("     3 sequences x %d batched steps: worst NMSE vs alone %.2e\n", STEPS, worst);
    CHECK(worst <= 1e-10);
    /* refusals: a context twice, a full context, another model's context */
    al_context *twice[2] = {batched[0], batched[0]};
    int32_t two[2] = {1, 2};
    CHECK(al_eval_multi(twice, two, 2, NULL) == AL_ERR_ARG);
    CHECK(strstr(al_last_error(), "twice") != NULL);
    al_context_params tiny = al_context_default_params();
    tiny.n_ctx = 1;
    al_context *full = NULL;
    CHECK(al_context_create(m, &tiny, &full) == AL_OK);
    CHECK(al_eval(full, two, 1, NULL, false) == AL_OK);
    al_context *with_full[2] = {batched[1], full};
    int n_before = al_context_n_past(batched[1]);
    CHECK(al_eval_multi(with_full, two, 2, NULL) == AL_ERR_ARG);
    CHECK(al_context_n_past(batched[1]) == n_before);
    al_context_destroy(full);
    for (int i = 0; i < N_SEQ; i++) {
        al_context_destroy(batched[i]);
        al_context_destroy(alone[i]);
    }
    free(lb);
    free(la);
    al_model_destroy(m);
}

static void test_load_errors(void) {
    al_model *m = (al_model *)1;
    CHECK(al_model_load("/nonexistent/x.gguf", NULL, &m) == AL_ERR_IO && m == NULL);
    CHECK(strstr(al_last_error(), "/nonexistent/x.gguf") != NULL);
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", test_shared_dir());
    m = (al_model *)1;
    al_status st = al_model_load(path, NULL, &m);
    CHECK(st != AL_OK && m == NULL); /* vocabulary only: no weights */
    printf("     vocab-only load refused: %s\n", al_last_error());
}

static int compare_files(const char *a, const char *b, double max_nmse) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    if (!fa || !fb) {
        fprintf(stderr, "cannot open %s or %s\n", a, b);
        return 1;
    }
    fseek(fa, 0, SEEK_END);
    fseek(fb, 0, SEEK_END);
    long na = ftell(fa), nb = ftell(fb);
    fclose(fa);
    fclose(fb);
    if (na != nb || na <= 0 || na % 4) {
        fprintf(stderr, "sizes differ: %ld vs %ld bytes\n", na, nb);
        return 1;
    }
    float *va = read_f32_file(a, (size_t)na / 4), *vb = read_f32_file(b, (size_t)nb / 4);
    if (!va || !vb) return 1;
    cmp_result r = compare(va, vb, 1, (int)(na / 4));
    printf("NMSE %.3e\n", r.nmse);
    free(va);
    free(vb);
    return r.nmse <= max_nmse ? 0 : 1;
}

/* ---- checks for the shell tests (tests/gemma3.sh, tests/vulkan.sh) ------------------- */

/* A reference as the shell tests use it: the tokens, n_vocab, the positions whose logits
 * are stored (every position when the file lists none) and the reference's argmax at
 * every position (top1; empty when the file has none). */
typedef struct ref_json {
    int32_t *tokens, *positions, *top1, *greedy;
    int n_tokens, n_positions, n_top1, n_greedy, n_vocab;
    char logits_path[2048];
} ref_json;

static int32_t *int_array(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int i = 0; v && i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

static void ref_json_free(ref_json *r) {
    free(r->tokens);
    free(r->positions);
    free(r->top1);
    free(r->greedy);
}

static int ref_json_load(const char *path, ref_json *r) {
    *r = (ref_json){0};
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 0;
    }
    const char *lf = json_string_value(json_object_get(root, "logits_file"));
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    snprintf(r->logits_path, sizeof r->logits_path, "%.*s/%s", dir_len, slash ? path : ".",
             lf ? lf : "");
    r->n_vocab = (int)json_integer_value(json_object_get(root, "n_vocab"));
    r->tokens = int_array(json_object_get(root, "tokens"), &r->n_tokens);
    r->top1 = int_array(json_object_get(root, "top1"), &r->n_top1);
    r->greedy = int_array(json_object_get(root, "greedy_after_prompt"), &r->n_greedy);
    json_t *pos = json_object_get(root, "logits_positions");
    if (pos) {
        r->positions = int_array(pos, &r->n_positions);
    } else { /* every position */
        r->n_positions = r->n_tokens;
        r->positions = malloc((size_t)(r->n_tokens ? r->n_tokens : 1) * sizeof *r->positions);
        for (int i = 0; r->positions && i < r->n_tokens; i++) r->positions[i] = i;
    }
    json_decref(root);
    int ok = lf && r->n_vocab > 0 && r->n_tokens > 0 && r->tokens && r->top1 && r->greedy &&
             r->positions && (r->n_top1 == 0 || r->n_top1 == r->n_tokens);
    for (int i = 0; ok && i < r->n_positions; i++)
        ok = r->positions[i] >= 0 && r->positions[i] < r->n_tokens;
    if (!ok) {
        fprintf(stderr, "%s: not a reference (tokens, n_vocab, logits_file, positions)\n", path);
        ref_json_free(r);
    }
    return ok;
}

/* `test_ref --compare-ref OUT.f32 NAME.ref.json MAX_NMSE MIN_TOP1`: OUT holds the logits
 * of every position of the reference's tokens ([n_tokens][n_vocab], as `anyllm logits`
 * writes them). The rows at the reference's stored positions are compared with its
 * logits file by NMSE, and the argmax of every row with the reference's top1 list (when
 * it has none, with the argmax of the stored rows). Prints the figures on one line;
 * exits 0 when NMSE <= MAX_NMSE and the agreement >= MIN_TOP1 (a fraction). */
static int compare_ref(const char *out_path, const char *json_path, double max_nmse,
                       double min_top1) {
    ref_json r;
    if (!ref_json_load(json_path, &r)) return 1;
    size_t n_row = (size_t)r.n_vocab;
    float *out = read_f32_file(out_path, (size_t)r.n_tokens * n_row);
    float *ref = read_f32_file(r.logits_path, (size_t)r.n_positions * n_row);
    float *rows = calloc((size_t)r.n_positions * n_row, sizeof *rows);
    if (!out || !ref || !rows) {
        fprintf(stderr, "%s or %s is missing or not %d x %d / %d x %d floats\n", out_path,
                r.logits_path, r.n_tokens, r.n_vocab, r.n_positions, r.n_vocab);
        free(out);
        free(ref);
        free(rows);
        ref_json_free(&r);
        return 1;
    }
    for (int i = 0; i < r.n_positions; i++)
        memcpy(rows + (size_t)i * n_row, out + (size_t)r.positions[i] * n_row,
               n_row * sizeof *rows);
    cmp_result c = compare(rows, ref, r.n_positions, r.n_vocab);
    int agree = 0, n_top1 = r.n_top1 ? r.n_tokens : r.n_positions;
    for (int i = 0; i < n_top1; i++) {
        const float *row = r.n_top1 ? out + (size_t)i * n_row : rows + (size_t)i * n_row;
        int want = r.n_top1 ? r.top1[i] : argmax(ref + (size_t)i * n_row, r.n_vocab);
        agree += argmax(row, r.n_vocab) == want;
    }
    double top1 = (double)agree / n_top1;
    printf("NMSE %.3e over %d positions, top-1 %d/%d (%.1f%%)\n", c.nmse, r.n_positions, agree,
           n_top1, 100 * top1);
    free(out);
    free(ref);
    free(rows);
    ref_json_free(&r);
    return c.nmse <= max_nmse && top1 >= min_top1 ? 0 : 1;
}

/* Teacher forcing: the prompt and the reference's first n - 1 greedy tokens as one
 * batch. Prints at how many of the n steps our argmax is the reference's token, and
 * for each miss the margin by which ours won: a free-running sequence parts at the
 * first near-tie and says nothing after it. Returns the misses whose margin exceeds
 * max_tie, plus one if there is more than one miss; -1 if it could not run. */
static int teacher_forced(al_context *c, const ref_json *r, int n, double max_tie) {
    int n_all = r->n_tokens + n - 1, n_miss = 0, n_wide = -1;
    int32_t *ids = malloc((size_t)n_all * sizeof *ids);
    float *logits = malloc((size_t)n_all * (size_t)r->n_vocab * sizeof *logits);
    al_context_reset(c);
    if (n < 1 || n > r->n_greedy || !ids || !logits) goto done;
    memcpy(ids, r->tokens, (size_t)r->n_tokens * sizeof *ids);
    memcpy(ids + r->n_tokens, r->greedy, (size_t)(n - 1) * sizeof *ids);
    if (al_eval(c, ids, n_all, logits, true) != AL_OK) {
        fprintf(stderr, "teacher forcing: %s\n", al_last_error());
        goto done;
    }
    n_wide = 0;
    printf("teacher-forced:");
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)(r->n_tokens - 1 + i) * r->n_vocab;
        int ours = argmax(row, r->n_vocab);
        if (ours == r->greedy[i]) continue;
        double margin = (double)row[ours] - row[r->greedy[i]];
        printf(" [step %d: ours %d, the reference's %d scores %.3f less]", i, ours,
               r->greedy[i], margin);
        n_miss++;
        n_wide += margin > max_tie;
    }
    printf(" %d of %d steps agree\n", n - n_miss, n);
    n_wide += n_miss > 1;
done:
    free(ids);
    free(logits);
    return n_wide;
}

/* `test_ref --greedy MODEL.gguf NAME.ref.json N BACKEND MAX_TIE`: evaluates the
 * reference's tokens as one batch, then decodes N tokens greedily one at a time on
 * BACKEND (cpu, vulkan, ...). Prints "greedy: ID ..." and how many of them lead the
 * reference's greedy tokens, then the teacher-forced agreement. Exits 0 when all N
 * lead, or when, teacher-forced, our argmax misses the reference's token at one step
 * only, by a near-tie (our token ahead by at most MAX_TIE; 0 makes the check strict). */
static int greedy_ids(const char *model, const char *json_path, int n, const char *backend,
                      double max_tie) {
    ref_json r;
    if (n < 1 || !ref_json_load(json_path, &r)) return 1;
    if (n > r.n_greedy) {
        fprintf(stderr, "%s has %d greedy tokens, fewer than %d\n", json_path, r.n_greedy, n);
        ref_json_free(&r);
        return 1;
    }
    al_model_params mp = ref_params();
    mp.backend = backend;
    al_model *m = NULL;
    al_context *c = NULL;
    float *logits = malloc((size_t)r.n_vocab * sizeof *logits);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    int n_done = 0, n_same = 0, n_wide = -1;
    al_status st = logits && ids ? al_model_load(model, &mp, &m) : AL_ERR_NOMEM;
    if (st == AL_OK) {
        al_context_params cp = al_context_default_params();
        cp.n_ctx = r.n_tokens + n;
        st = al_context_create(m, &cp, &c);
    }
    if (st == AL_OK) st = al_eval(c, r.tokens, r.n_tokens, logits, false);
    while (st == AL_OK && n_done < n) {
        ids[n_done] = argmax(logits, r.n_vocab);
        if (n_same == n_done && n_done < r.n_greedy && ids[n_done] == r.greedy[n_done]) n_same++;
        st = al_eval(c, &ids[n_done++], 1, logits, false);
    }
    if (st != AL_OK) fprintf(stderr, "%s: %s\n", model, al_last_error());
    printf("greedy:");
    for (int i = 0; i < n_done; i++) printf(" %d", ids[i]);
    printf("\n%d of %d lead the reference's greedy tokens\n", n_same, n);
    if (st == AL_OK) n_wide = teacher_forced(c, &r, n, max_tie);
    free(logits);
    free(ids);
    ref_json_free(&r);
    al_context_destroy(c);
    al_model_destroy(m);
    return st == AL_OK && (n_same == n || n_wide == 0) ? 0 : 1;
}

int main(int argc, char **argv) {
    al_set_log(log_to_stderr, NULL);
    if (cli_settings_instance()) return 1;
    if (argc >= 4 && !strcmp(argv[1], "--compare"))
        return compare_files(argv[2], argv[3], argc >= 5 ? atof(argv[4]) : 1e-4);
    if (argc == 6 && !strcmp(argv[1], "--compare-ref"))
        return compare_ref(argv[2], argv[3], atof(argv[4]), atof(argv[5]));
    if (argc == 4 && !strcmp(argv[1], "--dir")) { /* the checks of one folder on a backend */
        g_dir = argv[2];
        g_backend = argv[3];
        TEST_RUN(test_dir);
        return test_finish();
    }
    if (argc == 7 && !strcmp(argv[1], "--greedy"))
        return greedy_ids(argv[2], argv[3], atoi(argv[4]), argv[5], atof(argv[6]));
    TEST_RUN(test_load_errors);
    TEST_RUN(test_eval_errors);
    TEST_RUN(test_eval_multi);
    TEST_RUN(test_ref_models);
    TEST_RUN(test_qwen3_models);
    TEST_RUN(test_moe_models);
    return test_finish();
}
