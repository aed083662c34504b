/* test_vkattn.c: the Vulkan backend's attention_rows (one token of each of several
 * sequences, each over its own caches, in one dispatch per VK_SEQ rows: attention.comp's
 * ROWS build, with the rope of q and k before it) against the reference CPU backend's
 * rope_qk_rows and attention called row by row, which is what backend_attention_rows
 * runs where a backend has no attention_rows.
 *
 * Each case gives every sequence its own pair of caches, filled with random history
 * (rows no position has reached are never read), and takes two steps: the second
 * reads the rows the first wrote, so a new key or value the shader scored but did not
 * store (or stored in the wrong row) shows. Per step: the outputs (NMSE <= 1e-6, the
 * tolerance of test_vulkan's f32 ops: the shader takes the new position last, the
 * reference in order) and every cache row (NMSE <= 1e-10 per row: the values are
 * copies, the keys rotated as the reference rotates them, rounding aside).
 *
 * The cases: grouped-query heads over eleven sequences (two dispatches, 8 + 3), from
 * an empty cache to more positions than a workgroup step (64), with caches of
 * different sizes; a sliding window over rings that have wrapped, neox rope; head size
 * 40 with sinks (gpt-oss); one sequence with a partial rope (32 of 64 dimensions) and
 * frequency factors; two sequences without rope. The op must decline, changing
 * nothing, where a row's position does not fit its cache. The validation layer is on
 * where it is installed and must stay silent.
 *
 * Typed KV caches (f16, q8_0, q4_0; Hadamard-rotated or not; keys and values of
 * different types): the attention op over prompt batches (two into a cache that holds
 * them, then a sliding window with sinks over a ring that wraps, head size 96) and
 * attention_rows over three sequences for 30 decode steps, against the CPU reference
 * on the same inputs. The caches' bytes must equal the reference's, every row (the
 * shader quantizes as quantize.c does, bit for bit), and the outputs, read through the
 * same bytes, agree to NMSE <= 1e-9 (only the order of the sums differs). The rows
 * carry outliers and a tie of magnitudes (+a, -a) that q4_0 breaks by order.
 *
 * Without a Vulkan build or device, the program prints why and skips.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "registry.h"
#include "test.h"
#include "util.h"

#ifdef AL_HAVE_VULKAN
#include "vulkan/vk.h" /* VK_SEQ_ROWS */
#include "vulkan/vk_backend.h"

#include "vk_pairs.h" /* g_cpu, g_vk, pair, random data */

enum { MAX_SEQ = 11 };

typedef struct attn_case {
    const char *name;
    int n_head, n_head_kv, head_dim, window;
    bool sinks;
    int n_rot; /* 0: no rope */
    bool neox, factors;
    int n_seq;
    int pos[MAX_SEQ], cap[MAX_SEQ]; /* each sequence's first position and cache rows */
} attn_case;

static const attn_case g_cases[] = {
    {"grouped-query, 11 sequences", 8, 2, 64, 0, false, 64, false, false, 11,
     {0, 1, 5, 63, 64, 65, 70, 2, 9, 30, 99}, {8, 4, 16, 80, 80, 96, 100, 4, 12, 40, 101}},
    {"window 16 over rings of 16 and 20 rows, neox", 4, 2, 32, 16, false, 32, true, false, 4,
     {3, 40, 17, 99}, {16, 16, 20, 20}},
    {"head size 40 with sinks", 4, 4, 40, 0, true, 40, true, false, 3, {0, 7, 66}, {4, 10, 70}},
    {"one sequence, rope of 32 of 64 with factors", 6, 3, 64, 0, false, 32, false, true, 1,
     {12}, {20}},
    {"two sequences without rope", 2, 1, 48, 0, false, 0, false, false, 2, {5, 0}, {8, 8}},
    /* past 4 teams of 64 (attention.comp), and over several of its steps */
    {"long context, head size 128", 8, 2, 128, 0, false, 128, true, false, 2, {300, 129},
     {310, 140}},
    /* the wide build: latent attention's row of 512 + 64 rope, 16 query heads on it */
    {"latent rows of 576, rope of 64", 16, 1, 576, 0, false, 64, false, false, 2, {0, 70},
     {8, 80}},
};
static const float g_factors[16] = {1.0f, 1.0f, 1.5f, 2.0f, 1.0f, 3.0f, 4.0f, 1.0f,
                                    8.0f, 1.0f, 2.5f, 1.0f, 16.0f, 1.0f, 1.0f, 32.0f};

/* Copies of one row of the CPU tensor and the Vulkan tensor: equal bits? */
static bool rows_equal(const pair *p, int64_t row) {
    size_t n = (size_t)p->cols;
    float *a = malloc(n * sizeof *a);
    al_tensor v = al_tensor_rows(&p->vk, row, 1), c = al_tensor_rows(&p->cpu, row, 1);
    g_vk->ops->tensor_read(g_vk, &v, a, n * sizeof(float));
    bool same = !memcmp(a, (const char *)c.data + c.offset, n * sizeof(float));
    free(a);
    return same;
}

typedef struct seqs {
    pair kc[MAX_SEQ], vc[MAX_SEQ];
    al_tensor *kcpu[MAX_SEQ], *vcpu[MAX_SEQ], *kvk[MAX_SEQ], *vvk[MAX_SEQ];
} seqs;

/* One step of every sequence at pos[i]; false where the Vulkan op declined. */
static bool step(const attn_case *ac, seqs *s, const int32_t *pos, const pair *sinks) {
    int n = ac->n_seq, qd = ac->n_head * ac->head_dim, kvd = ac->n_head_kv * ac->head_dim;
    float *qv = random_floats((size_t)(n * qd), 2.0f), *kv = random_floats((size_t)(n * kvd), 2.0f);
    float *vv = random_floats((size_t)(n * kvd), 1.0f);
    pair q, k, v, out;
    act_pair(qd, n, qv, &q);
    act_pair(kvd, n, kv, &k);
    act_pair(kvd, n, vv, &v);
    act_pair(qd, n, NULL, &out);
    al_attn_shape shape = {.n_head = ac->n_head, .n_head_kv = ac->n_head_kv,
                           .head_dim = ac->head_dim, .window = ac->window,
                           .sinks = sinks ? &sinks->cpu : NULL};
    al_rope rope = {.n_rot = ac->n_rot, .neox = ac->neox, .freq_base = 10000.0f,
                    .freq_scale = 1.0f, .freq_factors = ac->factors ? g_factors : NULL};
    const al_rope *rp = ac->n_rot ? &rope : NULL;
    vk_backend_stats s0, s1;
    CHECK(vk_backend_get_stats(g_vk, &s0));
    backend_attention_rows(g_cpu, &q.cpu, &k.cpu, &v.cpu, s->kcpu, s->vcpu, pos, rp, &shape,
                           &out.cpu);
    shape.sinks = sinks ? &sinks->vk : NULL;
    bool took = g_vk->ops->attention_rows(g_vk, &q.vk, &k.vk, &v.vk, s->kvk, s->vvk, pos, rp,
                                          &shape, &out.vk);
    if (took) {
        CHECK(vk_backend_get_stats(g_vk, &s1));
        uint64_t want = (uint64_t)(n + VK_SEQ_ROWS - 1) / VK_SEQ_ROWS;
        double e = compare(&out);
        /* row by row: a new key or value stored in the wrong row, or not at all, is an
         * error of order 1 in its row */
        double ec = 0;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < ac->cap[i]; r++) {
                double ek = compare_rows(&s->kc[i], r, 1), ev = compare_rows(&s->vc[i], r, 1);
                ec = ek > ec ? ek : ec;
                ec = ev > ec ? ev : ec;
            }
        CHECK_MSG(e <= 1e-6 && ec <= 1e-10, "%s: NMSE %g against the reference, cache rows "
                  "up to %g", ac->name, e, ec);
        CHECK_MSG(s1.n_dispatches - s0.n_dispatches == want, "%s: %llu dispatches, not %llu",
                  ac->name, (unsigned long long)(s1.n_dispatches - s0.n_dispatches),
                  (unsigned long long)want);
        printf("  %s, positions %d..: NMSE %.2e, %llu dispatches\n", ac->name, pos[0], e,
               (unsigned long long)(s1.n_dispatches - s0.n_dispatches));
    }
    free_pair(&q);
    free_pair(&k);
    free_pair(&v);
    free_pair(&out);
    free(qv);
    free(kv);
    free(vv);
    return took;
}

static void one_case(const attn_case *ac) {
    int kvd = ac->n_head_kv * ac->head_dim;
    const vk_backend *vb = (const vk_backend *)g_vk;
    if ((uint32_t)ac->head_dim > vb->sh->pl.tune.attn_max_hd &&
        vk_attn_shared(vb->sh->pl.tune.attn_rows_wg, VK_ATTN_WIDE_HD) > vb->sh->d.caps.shared_bytes) {
        printf("  %s: the wide build's workgroups exceed the device's shared memory: the op "
               "declines (the plain attention takes it)\n", ac->name);
        return;
    }
    seqs s;
    for (int i = 0; i < ac->n_seq; i++) {
        float *h = random_floats((size_t)(ac->cap[i] * kvd), 2.0f);
        act_pair(kvd, ac->cap[i], h, &s.kc[i]);
        free(h);
        h = random_floats((size_t)(ac->cap[i] * kvd), 1.0f);
        act_pair(kvd, ac->cap[i], h, &s.vc[i]);
        free(h);
        s.kcpu[i] = &s.kc[i].cpu, s.vcpu[i] = &s.vc[i].cpu;
        s.kvk[i] = &s.kc[i].vk, s.vvk[i] = &s.vc[i].vk;
    }
    pair sinks;
    if (ac->sinks) {
        float *sv = random_floats((size_t)ac->n_head, 3.0f);
        sv[0] = -20.0f; /* a head that all but ignores its sink */
        act_pair(ac->n_head, 1, sv, &sinks);
        free(sv);
    }
    int32_t pos[MAX_SEQ];
    for (int st = 0; st < 2; st++) {
        for (int i = 0; i < ac->n_seq; i++) pos[i] = ac->pos[i] + st;
        CHECK_MSG(step(ac, &s, pos, ac->sinks ? &sinks : NULL), "%s: attention_rows declined",
                  ac->name);
    }
    if (ac->sinks) free_pair(&sinks);
    for (int i = 0; i < ac->n_seq; i++) {
        free_pair(&s.kc[i]);
        free_pair(&s.vc[i]);
    }
}

static void test_attention_rows(void) {
    for (size_t i = 0; i < sizeof g_cases / sizeof *g_cases; i++) one_case(&g_cases[i]);
}

/* A position past a cache without a window: the op declines and writes nothing. */
static void test_declines(void) {
    int kvd = 2 * 16, qd = 2 * 16;
    float *h = random_floats((size_t)(4 * kvd), 1.0f);
    pair kc, vc, q, k, v, out;
    act_pair(kvd, 4, h, &kc);
    act_pair(kvd, 4, h, &vc);
    act_pair(qd, 1, h, &q);
    act_pair(kvd, 1, h + kvd, &k);
    act_pair(kvd, 1, h + kvd, &v);
    act_pair(qd, 1, NULL, &out);
    al_attn_shape shape = {.n_head = 2, .n_head_kv = 2, .head_dim = 16};
    al_tensor *kp = &kc.vk, *vp = &vc.vk;
    int32_t pos = 4; /* the cache holds positions 0..3 */
    vk_backend_stats s0, s1;
    CHECK(vk_backend_get_stats(g_vk, &s0));
    CHECK(!g_vk->ops->attention_rows(g_vk, &q.vk, &k.vk, &v.vk, &kp, &vp, &pos, NULL, &shape,
                                     &out.vk));
    CHECK(vk_backend_get_stats(g_vk, &s1));
    CHECK(s1.n_dispatches == s0.n_dispatches);
    bool same = true;
    for (int r = 0; r < 4; r++) same &= rows_equal(&kc, r) && rows_equal(&vc, r);
    CHECK_MSG(same, "a declined attention_rows changed the caches");
    free_pair(&kc);
    free_pair(&vc);
    free_pair(&q);
    free_pair(&k);
    free_pair(&v);
    free_pair(&out);
    free(h);
}

/* ---- typed KV caches (al_backend_ops.kv_types) ------------------------------------------ */

/* A cache of cap rows of type as context.c makes one: bytes (one row of floats),
 * described as rows of its type; f32 as rows of floats. Zero-filled on both sides. */
static void cache_pair(uint32_t type, uint8_t layout, int64_t kvd, int64_t cap, pair *p) {
    if (type == AL_TYPE_F32) {
        act_pair(kvd, cap, NULL, p);
        return;
    }
    const uint64_t rb = quant_row_bytes(type, kvd);
    const int64_t cols = (int64_t)((rb * (uint64_t)cap + 3) / 4);
    CHECK(g_cpu->ops->tensor_alloc(g_cpu, cols, 1, &p->cpu) == AL_OK);
    CHECK(g_vk->ops->tensor_alloc(g_vk, cols, 1, &p->vk) == AL_OK);
    memset(p->cpu.data, 0, rb * (uint64_t)cap);
    al_tensor *t[2] = {&p->cpu, &p->vk};
    for (int i = 0; i < 2; i++) {
        t[i]->type = type, t[i]->layout = layout;
        t[i]->ne[0] = kvd, t[i]->ne[1] = cap, t[i]->row_bytes = rb;
    }
    p->cols = kvd, p->rows = cap;
}

/* Rows of the Vulkan cache whose bytes differ from the CPU reference's. */
static int cache_rows_differ(const pair *p) {
    const uint64_t rb = p->vk.row_bytes, n = rb * (uint64_t)p->rows;
    uint8_t *a = malloc(n);
    g_vk->ops->tensor_read(g_vk, &p->vk, a, n);
    int bad = 0;
    for (int64_t r = 0; r < p->rows; r++)
        bad += memcmp(a + r * rb, (const uint8_t *)p->cpu.data + p->cpu.offset + r * rb, rb) != 0;
    free(a);
    return bad;
}

typedef struct kv_case {
    const char *name;
    uint32_t k_type, v_type;
    bool rotated;
} kv_case;

static const kv_case g_kv_cases[] = {
    {"f16", AL_TYPE_F16, AL_TYPE_F16, false},
    {"q8_0", AL_TYPE_Q8_0, AL_TYPE_Q8_0, false},
    {"q8_0 rotated", AL_TYPE_Q8_0, AL_TYPE_Q8_0, true},
    {"q4_0", AL_TYPE_Q4_0, AL_TYPE_Q4_0, false},
    {"q4_0 rotated", AL_TYPE_Q4_0, AL_TYPE_Q4_0, true},
    {"keys q8_0 rotated, values f16", AL_TYPE_Q8_0, AL_TYPE_F16, true},
    {"keys f32, values q4_0 rotated", AL_TYPE_F32, AL_TYPE_Q4_0, true},
};

/* The layout of a cache of type in case kc. */
static uint8_t kv_layout(const kv_case *kc, uint32_t type) {
    return kc->rotated && (type == AL_TYPE_Q8_0 || type == AL_TYPE_Q4_0) ? AL_LAYOUT_HADAMARD
                                                                          : AL_LAYOUT_ROWS;
}

/* Random rows of n floats of kvd, with an outlier in some heads' blocks (what the
 * rotation is for) and an exact tie of magnitudes (+a and -a) in one q4_0 block. */
static float *kv_rows(int n, int kvd, float scale) {
    float *x = random_floats((size_t)n * (size_t)kvd, scale);
    for (int i = 0; i < n * kvd; i += 37) x[i] *= 12.0f;
    x[69] = 30.0f, x[73] = -30.0f; /* block 2 of row 0: the first wins */
    return x;
}

/* One batch of n_tok positions from n_past through the attention op on both backends
 * over caches kp and vp: the outputs agree (the same bytes read, only the order of
 * the sums differs), and so do the caches' bytes, every row. */
static void kv_batch(const kv_case *kc, const al_attn_shape *shape0, int n_past, int n_tok,
                     pair *kp, pair *vp, const pair *sinks) {
    const int qd = shape0->n_head * shape0->head_dim, kvd = shape0->n_head_kv * shape0->head_dim;
    float *qv = random_floats((size_t)(n_tok * qd), 2.0f), *kv = kv_rows(n_tok, kvd, 2.0f);
    float *vv = kv_rows(n_tok, kvd, 1.0f);
    pair q, k, v, out;
    act_pair(qd, n_tok, qv, &q);
    act_pair(kvd, n_tok, kv, &k);
    act_pair(kvd, n_tok, vv, &v);
    act_pair(qd, n_tok, NULL, &out);
    al_attn_shape s = *shape0;
    s.n_past = n_past, s.n_tokens = n_tok;
    s.sinks = sinks ? &sinks->cpu : NULL;
    g_cpu->ops->attention(g_cpu, &q.cpu, &k.cpu, &v.cpu, &kp->cpu, &vp->cpu, &s, &out.cpu);
    s.sinks = sinks ? &sinks->vk : NULL;
    g_vk->ops->attention(g_vk, &q.vk, &k.vk, &v.vk, &kp->vk, &vp->vk, &s, &out.vk);
    CHECK_MSG(g_vk->ops->sync(g_vk) == AL_OK, "%s: %s", kc->name, al_last_error());
    double e = compare(&out);
    int dk = cache_rows_differ(kp), dv = cache_rows_differ(vp);
    CHECK_MSG(e <= 1e-9 && dk == 0 && dv == 0, "%s, window %d, positions %d..%d: NMSE %g, "
              "cache rows differing: keys %d, values %d", kc->name, s.window, n_past,
              n_past + n_tok - 1, e, dk, dv);
    printf("  %s, window %d, positions %d..%d: NMSE %.2e\n", kc->name, s.window, n_past,
           n_past + n_tok - 1, e);
    free_pair(&q), free_pair(&k), free_pair(&v), free_pair(&out);
    free(qv), free(kv), free(vv);
}

/* Prompts: two batches into a cache that holds them all, then a sliding window with
 * sinks over a ring that wraps. */
static void test_typed_prompt(void) {
    for (size_t i = 0; i < sizeof g_kv_cases / sizeof *g_kv_cases; i++) {
        const kv_case *kc = &g_kv_cases[i];
        al_attn_shape s = {.n_head = 8, .n_head_kv = 2, .head_dim = 64};
        pair kp, vp;
        cache_pair(kc->k_type, kv_layout(kc, kc->k_type), 2 * 64, 48, &kp);
        cache_pair(kc->v_type, kv_layout(kc, kc->v_type), 2 * 64, 48, &vp);
        kv_batch(kc, &s, 0, 24, &kp, &vp, NULL);
        kv_batch(kc, &s, 24, 20, &kp, &vp, NULL);
        free_pair(&kp), free_pair(&vp);
        /* head size 96: Hadamard blocks of 32 */
        al_attn_shape w = {.n_head = 4, .n_head_kv = 4, .head_dim = 96, .window = 16};
        float *sv = random_floats(4, 3.0f);
        pair sinks;
        act_pair(4, 1, sv, &sinks);
        cache_pair(kc->k_type, kv_layout(kc, kc->k_type), 4 * 96, 20, &kp);
        cache_pair(kc->v_type, kv_layout(kc, kc->v_type), 4 * 96, 20, &vp);
        for (int p0 = 0; p0 < 40; p0 += 5) kv_batch(kc, &w, p0, 5, &kp, &vp, &sinks);
        free_pair(&kp), free_pair(&vp), free_pair(&sinks);
        free(sv);
    }
}

/* Decoding: attention_rows over three sequences' typed caches (rope, then the rows
 * written, then one KV dispatch) against backend_attention_rows on the CPU, for steps
 * that fill the caches and then wrap a windowed ring. */
static void test_typed_rows(void) {
    enum { NS = 3 };
    const int cap[NS] = {12, 20, 16}, hd = 64, nkv = 2, nh = 4, kvd = nkv * hd, qd = nh * hd;
    for (size_t c = 0; c < sizeof g_kv_cases / sizeof *g_kv_cases; c++) {
        const kv_case *kc = &g_kv_cases[c];
        pair kp[NS], vp[NS];
        al_tensor *kcpu[NS], *vcpu[NS], *kvk[NS], *vvk[NS];
        for (int i = 0; i < NS; i++) {
            cache_pair(kc->k_type, kv_layout(kc, kc->k_type), kvd, cap[i], &kp[i]);
            cache_pair(kc->v_type, kv_layout(kc, kc->v_type), kvd, cap[i], &vp[i]);
            kcpu[i] = &kp[i].cpu, vcpu[i] = &vp[i].cpu, kvk[i] = &kp[i].vk, vvk[i] = &vp[i].vk;
        }
        al_attn_shape s = {.n_head = nh, .n_head_kv = nkv, .head_dim = hd, .window = 12};
        al_rope rope = {.n_rot = hd, .neox = true, .freq_base = 10000.0f, .freq_scale = 1.0f};
        double worst = 0;
        for (int step = 0; step < 30; step++) {
            int32_t pos[NS] = {step, step + 3, step};
            float *qv = random_floats((size_t)(NS * qd), 2.0f), *kv = kv_rows(NS, kvd, 2.0f);
            float *vv = kv_rows(NS, kvd, 1.0f);
            pair q, k, v, out;
            act_pair(qd, NS, qv, &q), act_pair(kvd, NS, kv, &k), act_pair(kvd, NS, vv, &v);
            act_pair(qd, NS, NULL, &out);
            backend_attention_rows(g_cpu, &q.cpu, &k.cpu, &v.cpu, kcpu, vcpu, pos, &rope, &s,
                                   &out.cpu);
            CHECK_MSG(g_vk->ops->attention_rows(g_vk, &q.vk, &k.vk, &v.vk, kvk, vvk, pos, &rope,
                                                &s, &out.vk), "%s: attention_rows declined",
                      kc->name);
            double e = compare(&out);
            int differ = 0;
            for (int i = 0; i < NS; i++)
                differ += cache_rows_differ(&kp[i]) + cache_rows_differ(&vp[i]);
            CHECK_MSG(e <= 1e-9 && differ == 0, "%s, step %d: NMSE %g, %d cache rows differ",
                      kc->name, step, e, differ);
            worst = e > worst ? e : worst;
            free_pair(&q), free_pair(&k), free_pair(&v), free_pair(&out);
            free(qv), free(kv), free(vv);
        }
        printf("  %s: 30 decode steps of 3 sequences, NMSE up to %.2e\n", kc->name, worst);
        for (int i = 0; i < NS; i++) free_pair(&kp[i]), free_pair(&vp[i]);
    }
}

static void check_validation(void) {
    vk_backend_stats s;
    CHECK(vk_backend_get_stats(g_vk, &s));
    CHECK_MSG(s.n_validation == 0, "%d validation messages", s.n_validation);
}

/* The Vulkan settings create_vk's backends take: main changes them between runs. */
static al_vulkan_settings g_vs = {.timeout_ms = -1};

static bool create_vk(void) {
    al_status st = vk_backend_create(0, &g_vs, &g_vk);
    if (st == AL_OK) st = g_vk->ops->reserve(g_vk, 4096, 256);
    if (st != AL_OK) printf("vulkan: %s\n", al_last_error());
    return st == AL_OK;
}

int main(void) {
    al_model_params cpu = al_model_default_params();
    cpu.cpu.isa = "ref";
    if (backend_create("cpu", 2, &cpu, &g_cpu) != AL_OK || g_cpu->ops->reserve(g_cpu, 4096, 256)) {
        printf("cpu backend: %s\n", al_last_error());
        return 1;
    }
    al_set_vulkan_instance(NULL, true);
    if (!create_vk()) {
        al_set_vulkan_instance(NULL, false); /* the layer may be missing: run without it */
        if (!create_vk()) {
            printf("skip: no usable Vulkan device\n");
            g_cpu->ops->destroy(g_cpu);
            printf("0 passed, 0 failed, 1 skipped\n");
            return 0;
        }
    }
    printf("-- %s\n", g_vk->desc);
    TEST_RUN(test_attention_rows);
    TEST_RUN(test_declines);
    TEST_RUN(test_typed_prompt);
    TEST_RUN(test_typed_rows);
    TEST_RUN(check_validation);
    g_vk->ops->destroy(g_vk);
    g_vs.no_subgroup = true; /* the build without subgroup arithmetic */
    if (create_vk()) {
        printf("-- without subgroup arithmetic: %s\n", g_vk->desc);
        TEST_RUN(test_attention_rows);
        TEST_RUN(test_typed_prompt);
        TEST_RUN(check_validation);
        g_vk->ops->destroy(g_vk);
    }
    g_vs.no_subgroup = false;
    g_vs.tune = "attn_rows_wg=1024"; /* 16 teams, merged at the end */
    if (create_vk()) {
        printf("-- 16 teams of 64 (attn_rows_wg=1024): %s\n", g_vk->desc);
        TEST_RUN(test_attention_rows);
        TEST_RUN(check_validation);
        g_vk->ops->destroy(g_vk);
    }
    g_vs.tune = NULL;
    for (int i = 0; i < g_n_keep; i++) al_aligned_free(g_keep[i]);
    g_cpu->ops->destroy(g_cpu);
    return test_finish();
}

#else /* !AL_HAVE_VULKAN */
int main(void) { return test_skip_program(TEST_NO_VULKAN); }
#endif
