/* kld.c: a reference run's top log-probabilities written, and another run compared with
 * them (the file and the bound are described in kld.h). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kld.h"

static const char MAGIC[8] = {'A', 'L', 'K', 'L', 'D', '0', '0', '1'};
enum { HEADER_BYTES = 8 + 4 * 4 + 8 + 8, RECORD_BYTES = 8 + KLD_TOP_K * 8 };

uint64_t kld_hash(const int32_t *ids, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (uint8_t)((uint32_t)ids[i] >> (8 * b));
            h *= 1099511628211ull;
        }
    return h;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}
static void put_f32(uint8_t *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(p, u);
}
static float get_f32(const uint8_t *p) {
    uint32_t u = get_u32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Checks a reference file's header and size against this run. */
static int check_header(kld_run *k, const uint8_t *h, int n_vocab, int n_ctx, int n_windows,
                        uint64_t tokens_hash) {
    const char *p = k->path;
    if (memcmp(h, MAGIC, 8))
        return cli_fail("perplexity: %s is not a KL-divergence base file "
                        "(written by --kl-divergence-base)",
                        p);
    uint32_t nv = get_u32(h + 8), nc = get_u32(h + 12), nw = get_u32(h + 16), tk = get_u32(h + 20);
    if (tk != KLD_TOP_K)
        return cli_fail("perplexity: %s keeps the top %u tokens per position, this build reads "
                        "%d",
                        p, tk, KLD_TOP_K);
    if (nv != (uint32_t)n_vocab)
        return cli_fail("perplexity: %s was written for a vocabulary of %u tokens, this model "
                        "has %d",
                        p, nv, n_vocab);
    if (nc != (uint32_t)n_ctx || nw != (uint32_t)n_windows)
        return cli_fail("perplexity: %s holds %u windows of %u tokens, this run scores %d of %d "
                        "(use the same -c and --chunks)",
                        p, nw, nc, n_windows, n_ctx);
    if (get_u64(h + 24) != tokens_hash)
        return cli_fail("perplexity: %s was written for other tokens (another text, or a "
                        "tokenizer that splits it differently)",
                        p);
    if (get_u64(h + 32) != k->n_pos)
        return cli_fail("perplexity: %s holds %llu positions, this run scores %llu", p,
                        (unsigned long long)get_u64(h + 32), (unsigned long long)k->n_pos);
    if (fseek(k->f, 0, SEEK_END) != 0) return cli_fail("perplexity: cannot read %s", p);
    long size = ftell(k->f);
    long want = HEADER_BYTES + (long)k->n_pos * RECORD_BYTES;
    if (size != want)
        return cli_fail("perplexity: %s has %ld bytes, a file of %llu positions has %ld (%s)", p,
                        size, (unsigned long long)k->n_pos, want,
                        size < want ? "truncated" : "trailing bytes");
    return fseek(k->f, HEADER_BYTES, SEEK_SET) ? cli_fail("perplexity: cannot read %s", p) : 0;
}

int kld_open(kld_run *k, const char *path, bool writing, int n_vocab, int n_ctx, int n_windows,
             uint64_t tokens_hash, uint64_t n_pos) {
    *k = (kld_run){.path = path, .writing = writing, .n_pos = n_pos};
    k->f = fopen(path, writing ? "wb" : "rb");
    if (!k->f) return cli_fail("perplexity: %s: %s", path, strerror(errno));
    uint8_t h[HEADER_BYTES];
    if (writing) {
        memcpy(h, MAGIC, 8);
        put_u32(h + 8, (uint32_t)n_vocab);
        put_u32(h + 12, (uint32_t)n_ctx);
        put_u32(h + 16, (uint32_t)n_windows);
        put_u32(h + 20, KLD_TOP_K);
        put_u64(h + 24, tokens_hash);
        put_u64(h + 32, n_pos);
        if (fwrite(h, 1, sizeof h, k->f) != sizeof h)
            return cli_fail("perplexity: cannot write %s: %s", path, strerror(errno));
        return 0;
    }
    if (fread(h, 1, sizeof h, k->f) != sizeof h)
        return cli_fail("perplexity: %s is too short for a KL-divergence base file", path);
    int rc = check_header(k, h, n_vocab, n_ctx, n_windows, tokens_hash);
    if (rc) return rc;
    if (!(k->kld = malloc((size_t)(n_pos ? n_pos : 1) * sizeof *k->kld)))
        return cli_fail("out of memory");
    return 0;
}

typedef struct top {
    int32_t id;
    float logit;
} top;

/* The k largest logits, largest first (insertion into a sorted array: k is small). */
static int top_k(const float *logits, int n_vocab, top *t, int k) {
    int n = 0;
    for (int i = 0; i < n_vocab; i++) {
        float x = logits[i];
        if (n == k && !(x > t[n - 1].logit)) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && t[j - 1].logit < x) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = (top){i, x};
    }
    return n;
}

/* log sum exp of the logits, in double. */
static double log_sum_exp(const float *logits, int n_vocab) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    return mx + log(sum);
}

static int write_position(kld_run *k, const float *logits, int n_vocab, double lse,
                          int32_t target) {
    top t[KLD_TOP_K];
    int n = top_k(logits, n_vocab, t, KLD_TOP_K);
    uint8_t r[RECORD_BYTES] = {0};
    double mass = 0;
    for (int i = 0; i < KLD_TOP_K; i++) {
        double lp = i < n ? (double)t[i].logit - lse : -INFINITY;
        if (i < n) mass += exp(lp);
        put_u32(r + 8 + 8 * i, i < n ? (uint32_t)t[i].id : 0);
        put_f32(r + 12 + 8 * i, (float)lp);
    }
    put_f32(r, (float)(lse - logits[target]));
    put_f32(r + 4, (float)(mass < 1 ? 1 - mass : 0));
    if (fwrite(r, 1, sizeof r, k->f) != sizeof r)
        return cli_fail("perplexity: cannot write %s: %s", k->path, strerror(errno));
    return 0;
}

static int compare_position(kld_run *k, const float *logits, int n_vocab, double lse,
                            int32_t target) {
    uint8_t r[RECORD_BYTES];
    if (fread(r, 1, sizeof r, k->f) != sizeof r)
        return cli_fail("perplexity: cannot read %s at position %llu", k->path,
                        (unsigned long long)k->pos);
    double p_rest = get_f32(r + 4), q_mass = 0, kl = 0;
    int32_t best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    for (int i = 0; i < KLD_TOP_K; i++) {
        uint32_t id = get_u32(r + 8 + 8 * i);
        double lp = get_f32(r + 12 + 8 * i);
        if (isinf(lp) && lp < 0) continue; /* fewer tokens than the top k */
        if (id >= (uint32_t)n_vocab || !(lp <= 0))
            return cli_fail("perplexity: %s is damaged at position %llu (token %u, log-probability "
                            "%g)",
                            k->path, (unsigned long long)k->pos, id, lp);
        double lq = (double)logits[id] - lse;
        q_mass += exp(lq);
        kl += exp(lp) * (lp - lq);
        if (i == 0 && (int32_t)id == best) k->same_top++;
    }
    if (!(p_rest >= 0 && p_rest <= 1))
        return cli_fail("perplexity: %s is damaged at position %llu (the rest's probability %g)",
                        k->path, (unsigned long long)k->pos, p_rest);
    double q_rest = 1 - q_mass;
    if (p_rest > 0) kl += p_rest * (log(p_rest) - log(q_rest > 1e-30 ? q_rest : 1e-30));
    k->kld[k->pos] = kl;
    k->sum_nll_base += get_f32(r);
    k->sum_nll += lse - logits[target];
    return 0;
}

int kld_position(kld_run *k, const float *logits, int n_vocab, int32_t target) {
    if (k->pos >= k->n_pos)
        return cli_fail("perplexity: more positions than the %llu announced",
                        (unsigned long long)k->n_pos);
    double lse = log_sum_exp(logits, n_vocab);
    int rc = k->writing ? write_position(k, logits, n_vocab, lse, target)
                        : compare_position(k, logits, n_vocab, lse, target);
    if (!rc) k->pos++;
    return rc;
}

/* x, with a rounding error's -0.000000 printed as 0 */
static double tidy(double x) {
    return fabs(x) < 5e-7 ? 0.0 : x;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int kld_finish(kld_run *k) {
    int rc = 0;
    if (k->writing) {
        if (fclose(k->f) != 0)
            rc = cli_fail("perplexity: cannot write %s: %s", k->path, strerror(errno));
        k->f = NULL;
        if (!rc)
            printf("kl-divergence base: %llu positions (top %d tokens each) written to %s\n",
                   (unsigned long long)k->pos, KLD_TOP_K, k->path);
        return rc;
    }
    uint64_t n = k->pos;
    double sum = 0, sum2 = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += k->kld[i], sum2 += k->kld[i] * k->kld[i];
    double mean = n ? sum / n : 0, var = n > 1 ? (sum2 - n * mean * mean) / (n - 1) : 0;
    qsort(k->kld, n, sizeof *k->kld, by_value);
    double ppl_base = exp(k->sum_nll_base / (n ? n : 1)), ppl = exp(k->sum_nll / (n ? n : 1));
    printf("kl-divergence over %llu positions (against %s):\n", (unsigned long long)n, k->path);
    printf("  mean KLD     %.6f +/- %.6f\n", tidy(mean),
           n ? sqrt(var > 0 ? var : 0) / sqrt((double)n) : 0);
    printf("  median KLD   %.6f\n", n ? tidy(k->kld[n / 2]) : 0);
    printf("  99%% KLD      %.6f\n", n ? tidy(k->kld[(size_t)((n - 1) * 0.99)]) : 0);
    printf("  max KLD      %.6f\n", n ? tidy(k->kld[n - 1]) : 0);
    printf("  same top     %.2f%%\n", n ? 100.0 * k->same_top / n : 0);
    printf("  perplexity   %.4f (base %.4f), ratio %.5f\n", ppl, ppl_base, ppl / ppl_base);
    kld_close(k);
    return rc;
}

void kld_close(kld_run *k) {
    if (k->f) fclose(k->f);
    free(k->kld);
    k->f = NULL;
    k->kld = NULL;
}
