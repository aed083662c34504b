/* test_hybrid.c: the gated delta-net hybrids (qwen35, qwen35moe, qwen3next), on the
 * CPU and, where there is a device, on Vulkan.
 *
 * The models are written by `anyllm gen-model` (deterministic: their sha256 is checked
 * against the files the reference logits in tests/data were computed from, by llama.cpp
 * of llama-cpp-python 0.3.36's tree, CPU, one thread, no flash attention, one batch):
 *   anyllm gen-model M --arch qwen35 --dim 256 --layers 4 --heads 4 --kv-heads 2
 *     --head-dim 64 --ffn 512 --vocab 512 --type F32 | F16 | Q8_0
 * and qwen35moe and qwen3next with --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128
 * (the shared expert 256 wide), which gives three delta-net layers (conv 4, 8 key / 16
 * value heads of 32) and one gated attention layer with 16 of 64 dimensions rotating.
 * qwen3next is written in both its layouts (ssm_in, and --ssm-split), and qwen35moe
 * once more with an MTP block (--mtp 1), which must change nothing. For the Q8_0
 * files, NAME.exact.logits.f32 is the exact result for their weights: llama.cpp's logits
 * of the file with every tensor dequantized to F32 (gguf-py's dequantize).
 *
 * Checked: the logits of a 48-token batch against the reference (default numerics and
 * cpu:q8x2 for F16; default for Q8_0, whose reference rounds activations as the
 * default does); the same positions token by token, in two chunks, and as one of two
 * sequences of al_eval_multi, against the batch (the recurrent state carries across
 * calls and rows); reset and truncate start the state over, or truncate goes back to a
 * checkpoint (al_context_checkpoint), from which decoding gives the batch's logits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anyllm.h"
#include "test.h"
#include "tokens48.h"

enum { N_VOCAB = 512 };


#define SHAPE "--dim 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 --vocab 512"
#define MOE " --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128"
static const struct {
    const char *name, *arch, *flags, *type, *sha256;
    const char *ref;  /* tests/data/REF.logits.f32 */
    double max_nmse;  /* the reference bars of ref_check.h: F16 1e-4, quantized 1e-3 */
} models[] = {
    {"qwen35-F16", "qwen35", SHAPE " --ffn 512", "F16",
     "52becc29e0ad714828b1beee83bf45541f9e152f3de6cbb26cb96a833a2c7816", "qwen35-F16", 1e-4},
    {"qwen35-Q8_0", "qwen35", SHAPE " --ffn 512", "Q8_0",
     "154c9ee043b9bb464c40ddcd7e32ca4959915982d04b590247083d162cab4b86", "qwen35-Q8_0", 1e-3},
    {"qwen35moe-F16", "qwen35moe", SHAPE MOE, "F16",
     "6a06c6040ed10154cd59d345f40c865d01f79223abfc663a35dab8a5f63df39f", "qwen35moe-F16", 1e-4},
    {"qwen35moe-Q8_0", "qwen35moe", SHAPE MOE, "Q8_0",
     "d9cdeec9bf182a585713c95c7a8d5713ca062d7cce487b23fd63a44c563cdc38", "qwen35moe-Q8_0", 1e-3},
    /* qwen3next: q|k|v|z in one matrix (ssm_in, the older layout), and split */
    {"qwen3next-F16", "qwen3next", SHAPE MOE, "F16",
     "a9b6f03adbe14ee75acd6a2f67e066048b9a199a0fc2965720bcd54630cd207f", "qwen3next-F16", 1e-4},
    {"qwen3next-Q8_0", "qwen3next", SHAPE MOE, "Q8_0",
     "c65d192870086b10d713ee37852bd1a2118a6c0754aec839b3ba6c1ab0489035", "qwen3next-Q8_0", 1e-3},
    {"qwen3next-split-F16", "qwen3next", SHAPE MOE " --ssm-split", "F16",
     "3deb40e5b3e693f8534a42376b99d6032c625e4109516d46b390f46c27e8a6ba", "qwen3next-split-F16",
     1e-4},
    /* an MTP block after the trunk: loaded, not run, so the logits are qwen35moe-F16's */
    {"qwen35moe-mtp-F16", "qwen35moe", SHAPE MOE " --mtp 1", "F16",
     "6181a74095f9a64d31b1c73b475fb1ac9630912842f5daee2dcd6feed3982c1a", "qwen35moe-F16", 1e-4},
    /* F32: nothing rounds but the order of the sums (measured 3.3e-9 to 3.9e-9) */
    {"qwen35-F32", "qwen35", SHAPE " --ffn 512", "F32",
     "6cca30c84a7ef993a8d64b5b8426ab8d5cec56ae1e50dc04cb17b5ab37e3a01f", "qwen35-F32", 1e-6},
    {"qwen35moe-F32", "qwen35moe", SHAPE MOE, "F32",
     "30e99d8119a652c665b63cd584953687af4fa84d4a72b40ccb52e82db64ded04", "qwen35moe-F32", 1e-6},
    {"qwen3next-F32", "qwen3next", SHAPE MOE, "F32",
     "14eb47493bcea9c04e0d9cf71f69e51c3ac169fde6c46c940b25cfdcffa3a107", "qwen3next-F32", 1e-6},
};
enum { N_MODELS = sizeof models / sizeof *models };

static char dir[64];
static char paths[N_MODELS][128];
static bool have[N_MODELS];

/* Writes model i with gen-model and checks its sha256; false (with a message) if
 * either fails. */
static bool make_model(int i) {
    char flags[384];
    snprintf(paths[i], sizeof paths[i], "%s/%s.gguf", dir, models[i].name);
    snprintf(flags, sizeof flags, "--arch %s %s --type %s", models[i].arch, models[i].flags,
             models[i].type);
    return test_gen_model(paths[i], flags, models[i].sha256);
}

/* tests/data/NAME.KIND.f32: the logits of the 48 tokens. */
static float *read_data(const char *name, const char *kind) {
    char path[256];
    snprintf(path, sizeof path, "tests/data/%s.%s.f32", name, kind);
    FILE *f = fopen(path, "rb");
    float *buf = malloc((size_t)N_TOK * N_VOCAB * sizeof(float));
    size_t got = f && buf ? fread(buf, sizeof(float), (size_t)N_TOK * N_VOCAB, f) : 0;
    if (f) fclose(f);
    if (got != (size_t)N_TOK * N_VOCAB) {
        fprintf(stderr, "  %s: missing or short\n", path);
        free(buf);
        return NULL;
    }
    return buf;
}

static float *read_ref(int i) { return read_data(models[i].ref, "logits"); }

static int argmax(const float *x) {
    int best = 0;
    for (int i = 1; i < N_VOCAB; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* NMSE and argmax agreement of a against the reference. */
static void compare(const float *a, const float *ref, double max_nmse, const char *what) {
    const double e = test_nmse(a, ref, (int64_t)N_TOK * N_VOCAB);
    int agree = 0;
    for (int t = 0; t < N_TOK; t++)
        agree += argmax(a + (size_t)t * N_VOCAB) == argmax(ref + (size_t)t * N_VOCAB);
    printf("  %s: NMSE %.3g, argmax %d/%d\n", what, e, agree, N_TOK);
    CHECK_MSG(e <= max_nmse, "%s: NMSE %g above %g", what, e, max_nmse);
    CHECK_MSG(agree >= N_TOK * 9 / 10, "%s: argmax agrees at %d of %d", what, agree, N_TOK);
}

/* Model i on backend; isa: the CPU's instruction set (cpu.isa; NULL: the best). */
static al_model *load_isa(int i, const char *backend, const char *isa) {
    al_model_params mp = al_model_default_params();
    mp.n_threads = 2;
    mp.backend = backend;
    mp.cpu.isa = isa;
    al_model *m = NULL;
    CHECK_MSG(al_model_load(paths[i], &mp, &m) == AL_OK, "%s", al_last_error());
    return m;
}

static al_model *load(int i, const char *backend) {
    return load_isa(i, backend, NULL);
}

static al_context *context(const al_model *m) {
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 128;
    al_context *c = NULL;
    CHECK_MSG(al_context_create(m, &cp, &c) == AL_OK, "%s", al_last_error());
    return c;
}

static void reference_case(int i, const char *backend) {
    if (!have[i]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    float *ref = read_ref(i);
    al_model *m = load(i, backend);
    al_context *c = m ? context(m) : NULL;
    float *out = malloc((size_t)N_TOK * N_VOCAB * sizeof(float));
    if (ref && c && out) {
        CHECK(al_eval(c, tokens, N_TOK, out, true) == AL_OK);
        char what[64];
        snprintf(what, sizeof what, "%s on %s", models[i].name, backend);
        compare(out, ref, models[i].max_nmse, what);
    } else {
        CHECK(ref && c && out);
    }
    free(out);
    free(ref);
    al_context_destroy(c);
    al_model_destroy(m);
}

static void test_qwen35_f16(void) { reference_case(0, "cpu"); }
static void test_qwen35_f16_precise(void) { reference_case(0, "cpu:q8x2"); }
static void test_qwen35_q8_0(void) { reference_case(1, "cpu"); }
static void test_qwen35moe_f16(void) { reference_case(2, "cpu"); }
static void test_qwen35moe_f16_precise(void) { reference_case(2, "cpu:q8x2"); }
static void test_qwen35moe_q8_0(void) { reference_case(3, "cpu"); }
static void test_qwen3next_f16(void) { reference_case(4, "cpu"); }
static void test_qwen3next_f16_precise(void) { reference_case(4, "cpu:q8x2"); }
static void test_qwen3next_q8_0(void) { reference_case(5, "cpu"); }
static void test_qwen3next_split(void) { reference_case(6, "cpu"); }
static void test_f32_models(void) {
    for (int i = 8; i <= 10; i++) reference_case(i, "cpu");
}

static bool eval_logits(int i, const char *backend, const char *isa, float *out);

/* A file with an MTP block gives, bit for bit, the logits of the same file without it
 * (gen-model writes the block after the trunk, whose weights do not change). */
static void test_mtp_block_ignored(void) {
    if (!have[2] || !have[7]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    reference_case(7, "cpu");
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *a = malloc(nl * sizeof(float)), *b = malloc(nl * sizeof(float));
    al_model *m = load(7, "cpu");
    al_model_info info;
    if (m) {
        al_model_get_info(m, &info);
        CHECK_MSG(info.n_layer == 4, "n_layer %d: the MTP block counted as a layer", info.n_layer);
    }
    al_model_destroy(m);
    if (a && b && eval_logits(2, "cpu", NULL, a) && eval_logits(7, "cpu", NULL, b))
        CHECK_MSG(!memcmp(a, b, nl * sizeof(float)), "the MTP file's logits differ");
    free(a);
    free(b);
}

/* The batch's logits against token by token, two chunks, and al_eval_multi; reset and
 * truncate. The state's update is the same arithmetic however the positions come. */
static void decode_case(int mi) {
    if (!have[mi]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    al_model *m = load(mi, "cpu");
    al_context *c = m ? context(m) : NULL, *c2 = m ? context(m) : NULL;
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *one = malloc(nl * sizeof(float));
    float *two = malloc(2 * N_VOCAB * sizeof(float));
    if (!c || !c2 || !batch || !one || !two) {
        CHECK(c && c2 && batch && one && two);
        goto done;
    }
    CHECK(al_eval(c, tokens, N_TOK, batch, true) == AL_OK);
    /* one at a time in c, and the same tokens in c2 as the second row of eval_multi
     * once c2 has the first 20 by a chunk */
    al_context_reset(c);
    for (int t = 0; t < N_TOK; t++)
        CHECK(al_eval(c, &tokens[t], 1, one + (size_t)t * N_VOCAB, false) == AL_OK);
    const double e_one = test_nmse(one, batch, (int64_t)nl);
    printf("  token by token vs batch: NMSE %.3g\n", e_one);
    CHECK_MSG(e_one < 1e-9, "NMSE %g", e_one);

    CHECK(al_eval(c2, tokens, 20, one, true) == AL_OK);
    al_context_reset(c);
    CHECK(al_eval(c, tokens, 20, one, false) == AL_OK);
    al_context *both[2] = {c, c2};
    const int32_t next[2] = {tokens[20], tokens[20]};
    CHECK(al_eval_multi(both, next, 2, two) == AL_OK);
    const float *want = batch + (size_t)20 * N_VOCAB;
    const double e0 = test_nmse(two, want, N_VOCAB), e1 = test_nmse(two + N_VOCAB, want, N_VOCAB);
    printf("  eval_multi rows vs batch: NMSE %.3g, %.3g\n", e0, e1);
    CHECK(e0 < 1e-9 && e1 < 1e-9);

    /* chunks of 21 and 27: the state carries over the call */
    CHECK(al_eval(c2, tokens + 21, N_TOK - 21, one, true) == AL_OK);
    const double e_chunk = test_nmse(one, batch + (size_t)21 * N_VOCAB,
                                     (int64_t)(N_TOK - 21) * N_VOCAB);
    printf("  a second chunk vs batch: NMSE %.3g\n", e_chunk);
    CHECK(e_chunk < 1e-9);

    /* a recurrent state cannot go back: truncating starts over, and the next
     * evaluation from position 0 gives the batch's logits again */
    CHECK(al_context_truncate(c2, 10) == AL_OK);
    CHECK(al_context_n_past(c2) == 0);
    CHECK(al_context_truncate(c2, 0) == AL_OK);
    CHECK(al_eval(c2, tokens, N_TOK, one, true) == AL_OK);
    CHECK(test_nmse(one, batch, (int64_t)nl) < 1e-12);
done:
    free(batch);
    free(one);
    free(two);
    al_context_destroy(c);
    al_context_destroy(c2);
    al_model_destroy(m);
}

/* Checkpoints: a truncate goes back to the latest one at or before the position kept,
 * and decoding from it gives the batch's logits; later ones go, the oldest goes when
 * there are too many, and reset drops them all. */
static void checkpoint_case(int mi, const char *backend) {
    if (!have[mi]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    al_model *m = load(mi, backend);
    al_context *c = m ? context(m) : NULL;
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *rest = malloc(nl * sizeof(float));
    if (!c || !batch || !rest) {
        CHECK(c && batch && rest);
        goto done;
    }
    int latest = -1;
    CHECK(al_eval(c, tokens, N_TOK, batch, true) == AL_OK);
    al_context_reset(c);
    CHECK(al_context_checkpoint(c) == AL_OK); /* position 0: nothing to save */
    CHECK(al_context_n_checkpoints(c, NULL) == 0);
    CHECK(al_eval(c, tokens, 20, NULL, false) == AL_OK && al_context_checkpoint(c) == AL_OK);
    CHECK(al_eval(c, tokens + 20, 10, NULL, false) == AL_OK && al_context_checkpoint(c) == AL_OK);
    CHECK(al_context_checkpoint(c) == AL_OK); /* the same position again: kept once */
    CHECK(al_context_n_checkpoints(c, &latest) == 2 && latest == 30);
    CHECK(al_eval(c, tokens + 30, N_TOK - 30, NULL, false) == AL_OK);
    const int cut[2] = {33, 25}, back[2] = {30, 20};
    for (int k = 0; k < 2; k++) {
        CHECK(al_context_truncate(c, cut[k]) == AL_OK);
        CHECK_MSG(al_context_n_past(c) == back[k], "truncate %d kept %d, expected %d", cut[k],
                  al_context_n_past(c), back[k]);
        const int p = al_context_n_past(c);
        CHECK(al_eval(c, tokens + p, N_TOK - p, rest, true) == AL_OK);
        const double e = test_nmse(rest, batch + (size_t)p * N_VOCAB, (int64_t)(N_TOK - p) * N_VOCAB);
        printf("  %s on %s: from the checkpoint at %d vs batch NMSE %.3g\n", models[mi].name,
               backend, p, e);
        CHECK_MSG(e < 1e-9, "NMSE %g", e);
    }
    CHECK(al_context_n_checkpoints(c, &latest) == 1 && latest == 20);
    CHECK(al_context_truncate(c, 10) == AL_OK && al_context_n_past(c) == 0);
    CHECK(al_context_n_checkpoints(c, NULL) == 0);
    /* five checkpoints in a context that keeps four: the first goes */
    for (int k = 1; k <= 5; k++) {
        CHECK(al_eval(c, tokens + al_context_n_past(c), 4, NULL, false) == AL_OK);
        CHECK(al_context_checkpoint(c) == AL_OK);
    }
    CHECK(al_context_n_checkpoints(c, &latest) == 4 && latest == 20);
    CHECK(al_context_truncate(c, 5) == AL_OK && al_context_n_past(c) == 0);
    CHECK(al_eval(c, tokens, 8, NULL, false) == AL_OK && al_context_checkpoint(c) == AL_OK);
    al_context_reset(c);
    CHECK(al_context_n_checkpoints(c, NULL) == 0);
done:
    free(batch);
    free(rest);
    al_context_destroy(c);
    al_model_destroy(m);
}

static void test_checkpoints(void) { checkpoint_case(2, "cpu"); }

/* A sequence handed from one context to another (al_context_handoff) mid-prompt: the
 * states and checkpoints go along, so the rest of the batch gives its logits, with
 * the KV memory shared (kv_shared_with) and with a copy; a truncate on dst goes back to
 * a checkpoint made on src. prefill/decode: the backends of the two sides. */
static void handoff_case(int mi, const char *prefill, const char *decode, double bar) {
    if (!have[mi]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    al_model *mp = load(mi, prefill), *md = load(mi, decode);
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *rest = malloc(nl * sizeof(float));
    al_context *ref = md ? context(md) : NULL;
    if (!mp || !md || !ref || !batch || !rest ||
        al_eval(ref, tokens, N_TOK, batch, true) != AL_OK) {
        CHECK_MSG(false, "setup: %s", al_last_error());
        goto done;
    }
    for (int shared = 0; shared < 2; shared++) {
        al_context_params cp = al_context_default_params();
        cp.n_ctx = 128;
        al_context *src = NULL, *dst = NULL;
        if (al_context_create(mp, &cp, &src) != AL_OK) {
            CHECK_MSG(false, "%s", al_last_error());
            continue;
        }
        cp.kv_shared_with = shared ? src : NULL;
        al_status st = al_context_create(md, &cp, &dst);
        if (st != AL_OK) { /* two backends that cannot see one memory */
            printf("  %s -> %s, shared: %s\n", prefill, decode, al_last_error());
            CHECK(shared);
            al_context_destroy(src);
            continue;
        }
        CHECK(al_eval(src, tokens, 20, NULL, false) == AL_OK && al_context_checkpoint(src) == AL_OK);
        CHECK(al_eval(src, tokens + 20, 5, NULL, false) == AL_OK);
        CHECK(al_context_handoff(dst, src) == AL_OK && al_context_n_past(dst) == 25);
        CHECK(al_context_n_checkpoints(dst, NULL) == 1 && al_context_n_checkpoints(src, NULL) == 0);
        CHECK(al_eval(dst, tokens + 25, N_TOK - 25, rest, true) == AL_OK);
        double e = test_nmse(rest, batch + (size_t)25 * N_VOCAB, (int64_t)(N_TOK - 25) * N_VOCAB);
        CHECK(al_context_truncate(dst, 22) == AL_OK && al_context_n_past(dst) == 20);
        CHECK(al_eval(dst, tokens + 20, N_TOK - 20, rest, true) == AL_OK);
        const double e2 = test_nmse(rest, batch + (size_t)20 * N_VOCAB,
                                    (int64_t)(N_TOK - 20) * N_VOCAB);
        printf("  %s %s -> %s (%s): after the hand-off NMSE %.3g, from src's checkpoint %.3g\n",
               models[mi].name, prefill, decode, shared ? "shared KV" : "copied", e, e2);
        CHECK_MSG(e <= bar && e2 <= bar, "NMSE %g, %g above %g", e, e2, bar);
        al_context_destroy(dst);
        al_context_destroy(src);
    }
done:
    free(batch);
    free(rest);
    al_context_destroy(ref);
    al_model_destroy(mp);
    al_model_destroy(md);
}

static void test_handoff(void) { handoff_case(4, "cpu", "cpu", 1e-12); }

/* n_checkpoints = -1: none are made, and a truncate starts over. */
static void test_no_checkpoints(void) {
    al_model *m = have[0] ? load(0, "cpu") : NULL;
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 128;
    cp.n_checkpoints = -1;
    al_context *c = NULL;
    if (m && al_context_create(m, &cp, &c) == AL_OK) {
        CHECK(al_eval(c, tokens, 10, NULL, false) == AL_OK && al_context_checkpoint(c) == AL_OK);
        CHECK(al_context_n_checkpoints(c, NULL) == 0);
        CHECK(al_eval(c, tokens + 10, 5, NULL, false) == AL_OK);
        CHECK(al_context_truncate(c, 12) == AL_OK && al_context_n_past(c) == 0);
    } else {
        CHECK_MSG(false, "%s", have[0] ? al_last_error() : "the model could not be made");
    }
    al_context_destroy(c);
    al_model_destroy(m);
}

/* Q8_0 model i against the exact result for its weights (tests/data/NAME.exact.logits:
 * llama.cpp on the file dequantized to F32, which anyllm's CPU matches to 4e-9): the
 * GPU and --precise (cpu:q8x2) to 1e-6, the default no further than llama.cpp's own
 * logits (which round activations to 8 bits, as the default does) are, within 5%. */
static void exact_case(int i) {
    if (!have[i]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *exact = read_data(models[i].name, "exact.logits"), *ref = read_ref(i);
    float *out = malloc(nl * sizeof(float));
    if (!exact || !ref || !out) {
        CHECK(exact && ref && out);
        goto done;
    }
    const double e_llama = test_nmse(ref, exact, (int64_t)nl);
    printf("  %s: llama.cpp's NMSE from the exact result %.3g\n", models[i].name, e_llama);
    const char *backends[3] = {"cpu", "cpu:q8x2", al_gpu_count() > 0 ? "vulkan" : NULL};
    for (int b = 0; b < 3 && backends[b]; b++) {
        if (!eval_logits(i, backends[b], NULL, out)) continue;
        const double e = test_nmse(out, exact, (int64_t)nl);
        const double bar = b == 0 ? 1.05 * e_llama : 1e-6;
        printf("  %s on %s: NMSE from the exact result %.3g (bar %.3g)\n", models[i].name,
               backends[b], e, bar);
        CHECK_MSG(e <= bar, "%s on %s: NMSE %g above %g", models[i].name, backends[b], e, bar);
    }
done:
    free(exact);
    free(ref);
    free(out);
}

static void test_exact_qwen35(void) { exact_case(1); }
static void test_exact_qwen35moe(void) { exact_case(3); }
static void test_exact_qwen3next(void) { exact_case(5); }

static void test_qwen35_decode(void) { decode_case(0); }
static void test_qwen35moe_decode(void) { decode_case(2); }
static void test_qwen3next_decode(void) { decode_case(4); }

/* The states count in the memory a context needs: more than the one attention layer's
 * keys and values. */
static void test_kv_bytes_include_states(void) {
    if (!have[0]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    al_model *m = load(0, "cpu");
    if (!m) return;
    /* one attention layer: 2 x 2 heads x 64 x 4 bytes a position; three recurrent
     * layers: 3 x 4 bytes x (3 x 1024 conv + 16 x 32 x 32) */
    const uint64_t kv = 2ull * 2 * 64 * 4 * 100, states = 3ull * 4 * (3 * 1024 + 16 * 32 * 32);
    CHECK_MSG(al_model_kv_bytes(m, 100, AL_KV_F32, AL_KV_F32) == kv + states, "%llu vs %llu",
              (unsigned long long)al_model_kv_bytes(m, 100, AL_KV_F32, AL_KV_F32), (unsigned long long)(kv + states));
    /* the checkpoints are host memory too: a count no machine holds is refused at once,
     * naming them, where the same context with the default count is made */
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 100;
    cp.n_checkpoints = 1 << 30; /* x the state's 205 KiB: 200 TiB */
    al_context *c = NULL;
    const al_status st = al_context_create(m, &cp, &c);
    CHECK_MSG(st == AL_ERR_NOMEM && !c && strstr(al_last_error(), "checkpoints"), "%s: %s",
              al_status_str(st), al_last_error());
    al_context_destroy(c);
    cp.n_checkpoints = 0;
    c = NULL;
    CHECK_MSG(al_context_create(m, &cp, &c) == AL_OK && c, "%s", al_last_error());
    al_context_destroy(c);
    al_model_destroy(m);
}

/* ---- the same models on the Vulkan backend (recurrent.c: ssm_conv, delta_net;
 * sigmoid_mul): the reference logits, the CPU's reference ops, and decoding against
 * the batch. Skipped, saying why, where no Vulkan device is present.
 * The GPU's activations are f32, as the CPU's reference ops' (ANYLLM_ISA=ref) are,
 * where llama.cpp rounds them to 8 bits for Q8_0 weights: its Q8_0 logits are then
 * further away (NMSE 1.0e-3 for qwen35, 3.8e-3 for qwen35moe, whose router turns
 * near-ties the other way; the reference ops' too) than F16's, and are held to 1e-2;
 * the reference ops' logits hold every case to 1e-9, and the exact result (exact_case)
 * the Q8_0 ones to 1e-6. */
static bool have_gpu(void) {
    if (al_gpu_count() > 0) return true;
    TEST_SKIP("no Vulkan device (%s)", *al_last_error() ? al_last_error() : "none found");
    return false;
}

/* The logits of the 48 tokens of model i on backend (isa: cpu.isa for a CPU), into
 * out; false where the model, context or evaluation fails (checked). */
static bool eval_logits(int i, const char *backend, const char *isa, float *out) {
    al_model *m = load_isa(i, backend, isa);
    al_context *c = m ? context(m) : NULL;
    const bool ok = c && al_eval(c, tokens, N_TOK, out, true) == AL_OK;
    CHECK(ok);
    al_context_destroy(c);
    al_model_destroy(m);
    return ok;
}

/* Model i on the GPU against llama.cpp's logits (max_nmse; 0: reference_case has
 * compared them) and the reference ops'. */
static void vulkan_case(int i, double max_nmse) {
    if (!have_gpu()) return;
    if (!have[i]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *ref = read_ref(i), *gpu = malloc(nl * sizeof(float)), *ops = malloc(nl * sizeof(float));
    char what[80];
    snprintf(what, sizeof what, "%s on vulkan", models[i].name);
    if (ref && gpu && ops && eval_logits(i, "vulkan", NULL, gpu) &&
        eval_logits(i, "cpu", "ref", ops)) {
        if (max_nmse > 0) compare(gpu, ref, max_nmse, what);
        const double e = test_nmse(gpu, ops, (int64_t)nl);
        printf("  %s against the CPU's reference ops: NMSE %.3g\n", what, e);
        CHECK_MSG(e <= 1e-9, "%s: NMSE %g against the reference ops", what, e);
    } else {
        CHECK(ref && gpu && ops);
    }
    free(ref);
    free(gpu);
    free(ops);
}

static void test_qwen35_f16_vulkan(void) {
    if (!have_gpu()) return;
    reference_case(0, "vulkan"); /* as the CPU's cases; then the reference ops' */
    vulkan_case(0, 0);
}
static void test_qwen35_q8_0_vulkan(void) { vulkan_case(1, 1e-2); }
static void test_qwen35moe_f16_vulkan(void) {
    if (!have_gpu()) return;
    reference_case(2, "vulkan");
    vulkan_case(2, 0);
}
static void test_qwen35moe_q8_0_vulkan(void) { vulkan_case(3, 1e-2); }
static void test_qwen3next_f16_vulkan(void) {
    if (!have_gpu()) return;
    reference_case(4, "vulkan");
    vulkan_case(4, 0);
    vulkan_case(6, 1e-4);
}
static void test_qwen3next_q8_0_vulkan(void) { vulkan_case(5, 1e-2); }
static void test_f32_vulkan(void) {
    for (int i = 8; i <= 10 && have_gpu(); i++) reference_case(i, "vulkan");
}

/* al_eval_multi on the GPU: a context 20 tokens in and a fresh one take their next
 * token in one call (two states, two positions), against the batch's rows 20 and 0. */
static void vulkan_multi_rows(const al_model *m, const float *batch) {
    al_context *c1 = context(m), *c2 = context(m);
    float *two = malloc(2 * N_VOCAB * sizeof(float));
    if (c1 && c2 && two && al_eval(c1, tokens, 20, two, false) == AL_OK) {
        al_context *both[2] = {c1, c2};
        const int32_t next[2] = {tokens[20], tokens[0]};
        CHECK(al_eval_multi(both, next, 2, two) == AL_OK);
        const double e0 = test_nmse(two, batch + (size_t)20 * N_VOCAB, N_VOCAB);
        const double e1 = test_nmse(two + N_VOCAB, batch, N_VOCAB);
        printf("  eval_multi rows vs batch: NMSE %.3g, %.3g\n", e0, e1);
        CHECK_MSG(e0 < 1e-9 && e1 < 1e-9, "NMSE %g, %g", e0, e1);
    } else {
        CHECK(false);
    }
    free(two);
    al_context_destroy(c1);
    al_context_destroy(c2);
}

/* Token by token, then a chunk of 20 and one of 28, against the batch, on the GPU: the
 * states carry across calls as on the CPU. Not bit for bit: a batch's matmuls and a
 * token's (matvec) sum in other orders. */
static void vulkan_decode_case(int mi) {
    if (!have_gpu()) return;
    if (!have[mi]) {
        CHECK_MSG(false, "the model could not be made (above)");
        return;
    }
    al_model *m = load(mi, "vulkan");
    al_context *c = m ? context(m) : NULL;
    const size_t nl = (size_t)N_TOK * N_VOCAB;
    float *batch = malloc(nl * sizeof(float)), *one = malloc(nl * sizeof(float));
    if (c && batch && one) {
        CHECK(al_eval(c, tokens, N_TOK, batch, true) == AL_OK);
        al_context_reset(c);
        for (int t = 0; t < N_TOK; t++)
            CHECK(al_eval(c, &tokens[t], 1, one + (size_t)t * N_VOCAB, false) == AL_OK);
        const double e_one = test_nmse(one, batch, (int64_t)nl);
        al_context_reset(c);
        CHECK(al_eval(c, tokens, 20, one, true) == AL_OK);
        CHECK(al_eval(c, tokens + 20, N_TOK - 20, one + (size_t)20 * N_VOCAB, true) == AL_OK);
        const double e_chunk = test_nmse(one, batch, (int64_t)nl);
        printf("  %s on vulkan: token by token vs batch NMSE %.3g, chunks of 20 and 28 %.3g\n",
               models[mi].name, e_one, e_chunk);
        CHECK_MSG(e_one < 1e-9 && e_chunk < 1e-9, "NMSE %g, %g", e_one, e_chunk);
        vulkan_multi_rows(m, batch);
    } else {
        CHECK(c && batch && one);
    }
    free(batch);
    free(one);
    al_context_destroy(c);
    al_model_destroy(m);
}

static void test_qwen35_decode_vulkan(void) { vulkan_decode_case(0); }
static void test_qwen35moe_decode_vulkan(void) { vulkan_decode_case(3); }
static void test_qwen3next_decode_vulkan(void) { vulkan_decode_case(4); }
static void test_checkpoints_vulkan(void) {
    if (have_gpu()) checkpoint_case(4, "vulkan");
}
/* prompts on the GPU, tokens on the CPU: against the CPU's batch, as far as the two
 * backends' F16 arithmetic lies apart */
static void test_handoff_vulkan(void) {
    if (have_gpu()) handoff_case(4, "vulkan", "cpu", 1e-6);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anyllm-hybrid-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    for (int i = 0; i < N_MODELS; i++) have[i] = make_model(i);
    TEST_RUN(test_qwen35_f16);
    TEST_RUN(test_qwen35_f16_precise);
    TEST_RUN(test_qwen35_q8_0);
    TEST_RUN(test_qwen35moe_f16);
    TEST_RUN(test_qwen35moe_f16_precise);
    TEST_RUN(test_qwen35moe_q8_0);
    TEST_RUN(test_qwen35_decode);
    TEST_RUN(test_qwen35moe_decode);
    TEST_RUN(test_qwen3next_f16);
    TEST_RUN(test_qwen3next_f16_precise);
    TEST_RUN(test_qwen3next_q8_0);
    TEST_RUN(test_qwen3next_split);
    TEST_RUN(test_f32_models);
    TEST_RUN(test_qwen3next_decode);
    TEST_RUN(test_mtp_block_ignored);
    TEST_RUN(test_checkpoints);
    TEST_RUN(test_exact_qwen35);
    TEST_RUN(test_exact_qwen35moe);
    TEST_RUN(test_exact_qwen3next);
    TEST_RUN(test_no_checkpoints);
    TEST_RUN(test_handoff);
    TEST_RUN(test_kv_bytes_include_states);
    TEST_RUN(test_qwen35_f16_vulkan);
    TEST_RUN(test_qwen35_q8_0_vulkan);
    TEST_RUN(test_qwen35moe_f16_vulkan);
    TEST_RUN(test_qwen35moe_q8_0_vulkan);
    TEST_RUN(test_qwen35_decode_vulkan);
    TEST_RUN(test_qwen35moe_decode_vulkan);
    TEST_RUN(test_qwen3next_f16_vulkan);
    TEST_RUN(test_qwen3next_q8_0_vulkan);
    TEST_RUN(test_f32_vulkan);
    TEST_RUN(test_qwen3next_decode_vulkan);
    TEST_RUN(test_checkpoints_vulkan);
    TEST_RUN(test_handoff_vulkan);
    for (int i = 0; i < N_MODELS; i++) remove(paths[i]);
    rmdir(dir);
    return test_finish();
}
