/* sample.c: token sampling (the al_sampler_* API of anyllm.h).
 *
 * The candidates are (id, logit) pairs. Penalties adjust the logits of recently seen
 * tokens; top-k, top-p and min-p then cut the candidate list, sorted by logit, and the
 * survivors are weighted by softmax(logit / temperature) and drawn from with a
 * splitmix64 generator, so one seed and one input always give one output.
 * Working memory is allocated once, with the sampler.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#define TEXT_INTERNAL
#include "text/grammar.h"
#include "util.h"

typedef struct candidate {
    int32_t id;
    float logit;
} candidate;

struct al_sampler {
    al_sampler_params p;
    int n_vocab;
    candidate *cand;   /* [n_vocab] */
    int32_t *history;  /* ring of the last penalty_last_n accepted tokens */
    int n_history;     /* tokens in the ring (<= penalty_last_n) */
    int history_pos;   /* next slot to write */
    int *count;        /* [n_vocab] occurrences in the ring */
    uint64_t rng;
    al_grammar *grammar; /* the caller's, or NULL */
    uint8_t *allowed;    /* [n_vocab], allocated when a grammar is first set */
};

al_sampler_params al_sampler_default_params(void) {
    return (al_sampler_params){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .frequency_penalty = 0.0f, .presence_penalty = 0.0f,
        .penalty_last_n = 64, .seed = 0x5eed,
    };
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *state) {
    return (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

static al_status check_params(const al_sampler_params *p) {
    if (isnan(p->temperature) || p->temperature > 100) /* negative means greedy */
        return al_error(AL_ERR_ARG, "temperature %g is out of range (-inf, 100]",
                        (double)p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return al_error(AL_ERR_ARG, "top_p %g is out of range (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return al_error(AL_ERR_ARG, "min_p %g is out of range [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0 && p->repeat_penalty <= 10))
        return al_error(AL_ERR_ARG, "repeat_penalty %g is out of range (0, 10]",
                        (double)p->repeat_penalty);
    if (!(fabsf(p->frequency_penalty) <= 10) || !(fabsf(p->presence_penalty) <= 10))
        return al_error(AL_ERR_ARG, "frequency/presence penalty out of range [-10, 10]");
    if (p->penalty_last_n < 0 || p->penalty_last_n > (1 << 20))
        return al_error(AL_ERR_ARG, "penalty_last_n %d is out of range [0, 2^20]",
                        p->penalty_last_n);
    return AL_OK;
}

al_status al_sampler_create(const al_sampler_params *params, int n_vocab, al_sampler **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_sampler_create: out is NULL");
    *out = NULL;
    al_sampler_params p = params ? *params : al_sampler_default_params();
    al_status st = check_params(&p);
    if (st != AL_OK) return st;
    if (n_vocab <= 0) return al_error(AL_ERR_ARG, "sampler: n_vocab %d must be positive", n_vocab);
    al_sampler *s = al_calloc(1, sizeof *s);
    if (!s) return al_error(AL_ERR_NOMEM, "out of memory creating a sampler");
    s->p = p;
    s->n_vocab = n_vocab;
    s->cand = al_malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = al_calloc((size_t)n_vocab, sizeof *s->count);
    s->history = al_malloc((size_t)(p.penalty_last_n + 1) * sizeof *s->history);
    if (!s->cand || !s->count || !s->history) {
        al_sampler_destroy(s);
        return al_error(AL_ERR_NOMEM, "out of memory creating a sampler");
    }
    al_sampler_reset(s);
    *out = s;
    return AL_OK;
}

void al_sampler_destroy(al_sampler *s) {
    if (!s) return;
    al_free(s->cand);
    al_free(s->count);
    al_free(s->history);
    al_free(s->allowed);
    al_free(s);
}

void al_sampler_reset(al_sampler *s) {
    if (!s) return;
    s->n_history = s->history_pos = 0;
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->rng = s->p.seed;
}

void al_sampler_accept(al_sampler *s, int32_t token) {
    if (!s) return;
    int n = s->p.penalty_last_n;
    if (n == 0 || token < 0 || token >= s->n_vocab) return;
    if (s->n_history == n) s->count[s->history[s->history_pos]]--; /* evict the oldest */
    else s->n_history++;
    s->history[s->history_pos] = token;
    s->count[token]++;
    s->history_pos = (s->history_pos + 1) % n;
}

/* Each distinct recent token is penalized once: its count is negated while it is
 * done, then restored. */
static void apply_penalties(al_sampler *s, candidate *c) {
    const al_sampler_params *p = &s->p;
    if (p->repeat_penalty == 1 && p->frequency_penalty == 0 && p->presence_penalty == 0) return;
    for (int i = 0; i < s->n_history; i++) {
        int32_t id = s->history[i];
        int n = s->count[id];
        if (n <= 0) continue; /* penalized already */
        float l = c[id].logit;
        l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        c[id].logit = l - (float)n * p->frequency_penalty - p->presence_penalty;
        s->count[id] = -n;
    }
    for (int i = 0; i < s->n_history; i++) /* restore the counts */
        if (s->count[s->history[i]] < 0) s->count[s->history[i]] = -s->count[s->history[i]];
}

static int by_logit_desc(const void *a, const void *b) {
    float la = ((const candidate *)a)->logit, lb = ((const candidate *)b)->logit;
    if (la != lb) return la > lb ? -1 : 1;
    return ((const candidate *)a)->id - ((const candidate *)b)->id; /* stable by id */
}

/* Moves the k best candidates (by_logit_desc order) to the front of c[0..n), sorted,
 * in O(n log k): a min-heap of the k best so far sits in c[0..k). This spares a full
 * sort of a 50k-token vocabulary on every step when top-k is set. */
static void select_top_k(candidate *c, int n, int k) {
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
    /* reversed, the sorted prefix is a valid min-heap: worst at the root */
    for (int i = 0, j = k - 1; i < j; i++, j--) {
        candidate t = c[i];
        c[i] = c[j];
        c[j] = t;
    }
    for (int i = k; i < n; i++) {
        if (by_logit_desc(&c[i], &c[0]) >= 0) continue; /* not better than the worst kept */
        candidate x = c[i];
        c[i] = c[0];
        int p = 0; /* sift x down from the root */
        for (;;) {
            int ch = 2 * p + 1;
            if (ch >= k) break;
            if (ch + 1 < k && by_logit_desc(&c[ch + 1], &c[ch]) > 0) ch++;
            if (by_logit_desc(&c[ch], &x) <= 0) break;
            c[p] = c[ch];
            p = ch;
        }
        c[p] = x;
    }
    qsort(c, (size_t)k, sizeof *c, by_logit_desc);
}

/* The best of c[0..n): argmax, the lowest id on ties. */
static int32_t greedy(const candidate *c, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (c[i].logit > c[best].logit || (c[i].logit == c[best].logit && c[i].id < c[best].id))
            best = i;
    return c[best].id;
}

static bool is_greedy(const al_sampler_params *p) { return p->temperature <= 0 || p->top_k == 1; }

/* top-k, top-p and min-p over c[0..n) (penalized already): sorts the candidates best
 * first and returns how many are kept. */
static int cut(al_sampler *s, candidate *c, int n) {
    const al_sampler_params *p = &s->p;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    } else {
        qsort(c, (size_t)n, sizeof *c, by_logit_desc);
    }
    /* softmax at temperature 1 for the probability-mass cuts, as the common engines do */
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - c[0].logit);
    if (p->top_p < 1) {
        double mass = 0;
        for (int i = 0; i < n; i++) {
            mass += exp((double)c[i].logit - c[0].logit) / sum;
            if (mass >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0) { /* p_i / p_best = exp(l_i - l_best) */
        int keep = 1;
        while (keep < n && exp((double)c[keep].logit - c[0].logit) >= p->min_p) keep++;
        n = keep;
    }
    return n;
}

/* A draw from softmax(logit / temperature) over the cut candidates c[0..n). */
static int32_t draw(al_sampler *s, const candidate *c, int n) {
    double total = 0, t = s->p.temperature;
    for (int i = 0; i < n; i++) total += exp(((double)c[i].logit - c[0].logit) / t);
    double r = rng_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)c[i].logit - c[0].logit) / t);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

static void fill(al_sampler *s, const float *logits) {
    for (int i = 0; i < s->n_vocab; i++) s->cand[i] = (candidate){.id = i, .logit = logits[i]};
    apply_penalties(s, s->cand);
}

enum { GRAMMAR_TOP = 64, GRAMMAR_REDRAWS = 32 };

/* With a grammar, a token is checked before it is returned (al_grammar_allows walks its
 * bytes: well under a microsecond). Greedy takes the best allowed token among the
 * GRAMMAR_TOP best; a draw is repeated from the same cut candidates until it hits an
 * allowed token, which is a draw from the allowed candidates' renormalized
 * distribution. Only when neither finds one is the grammar's mask computed (a walk of
 * the vocabulary, milliseconds inside a JSON string), and the choice made among the
 * allowed tokens alone, the cuts applying to them. */
int32_t al_sampler_sample(al_sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    fill(s, logits);
    candidate *c = s->cand;
    al_grammar *g = s->grammar;
    if (is_greedy(&s->p)) {
        int32_t id = greedy(c, s->n_vocab);
        if (!g || al_grammar_allows(g, id)) return id;
        int k = s->n_vocab < GRAMMAR_TOP ? s->n_vocab : GRAMMAR_TOP;
        select_top_k(c, s->n_vocab, k);
        for (int i = 0; i < k; i++)
            if (al_grammar_allows(g, c[i].id)) return c[i].id;
    } else {
        int n = cut(s, c, s->n_vocab);
        for (int tries = 0; tries < (g ? GRAMMAR_REDRAWS : 1); tries++) {
            int32_t id = draw(s, c, n);
            if (!g || al_grammar_allows(g, id)) return id;
        }
    }
    /* the mask covers the vocabulary's tokens; logits past them (padding) stay refused */
    int32_t nv = g_grammar_n_tokens(g);
    size_t sz = (size_t)(nv > s->n_vocab ? nv : s->n_vocab);
    if (!s->allowed && !(s->allowed = al_calloc(sz, 1))) return -1;
    if (al_grammar_mask(g, s->allowed) != AL_OK) return -1;
    fill(s, logits);
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (s->allowed[i]) c[n++] = c[i];
    if (n == 0) return -1;
    return is_greedy(&s->p) ? greedy(c, n) : draw(s, c, cut(s, c, n));
}

void al_sampler_set_grammar(al_sampler *s, al_grammar *g) {
    if (s) s->grammar = g;
}
