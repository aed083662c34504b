/* kld.h: how far one run's next-token distributions are from another's (perplexity's
 * --kl-divergence-base and --kl-divergence), so that a quant type, a KV-cache type or a
 * backend can be measured against a full-precision run in one command, as
 * llama-perplexity --kl-divergence does.
 *
 * The reference run writes, for every position it scores, its TOP_K most likely tokens
 * with their log-probabilities, the probability of all the others together, and the
 * negative log-likelihood of the token that came: a few hundred bytes per position
 * where the whole distribution of a 262k vocabulary would be half a megabyte. The
 * divergence is then computed over those TOP_K tokens and the rest as one outcome,
 * KL(P || Q) = sum_i p_i log(p_i / q_i): merging outcomes can only lower a divergence,
 * so the figure is a lower bound, within the tail's share of the true one (the top 64
 * tokens hold nearly all the mass of a trained model's prediction).
 *
 * The file (little-endian): "ALKLD001", then u32 n_vocab, n_ctx, n_windows, top_k,
 * u64 a hash of the windows' tokens, u64 positions; then per position: f32 nll of the
 * token that came, f32 the rest's probability, top_k x (u32 id, f32 log-probability),
 * most likely first. A comparison run must have the same vocabulary size, windows and
 * tokens, else it is refused naming what differs.
 */
#ifndef AL_KLD_H
#define AL_KLD_H

#include <stdint.h>
#include <stdio.h>

enum { KLD_TOP_K = 64 };

typedef struct kld_run {
    FILE *f; /* the reference file, written or read            */
    const char *path;
    bool writing;
    uint64_t n_pos, pos; /* positions in the file; the next one           */
    /* the comparison's sums */
    double *kld; /* [n_pos] each position's divergence              */
    double sum_nll_base, sum_nll;
    uint64_t same_top;
} kld_run;

/* Opens path for writing a reference of n_pos positions, or for comparing against one;
 * the shape and tokens hash must match a file read. 0, or an exit status (message
 * printed: one line naming the file and what is wrong). */
int kld_open(kld_run *k, const char *path, bool writing, int n_vocab, int n_ctx, int n_windows,
             uint64_t tokens_hash, uint64_t n_pos);

/* One scored position: logits [n_vocab] and the token that came. 0 or an exit status. */
int kld_position(kld_run *k, const float *logits, int n_vocab, int32_t target);

/* Closes the file; for a comparison, prints the report (mean KL divergence with its
 * standard error, median, 99th percentile, maximum, same top token %, both perplexities
 * and their ratio). 0 or an exit status. */
int kld_finish(kld_run *k);

/* Frees what is left after a failure. */
void kld_close(kld_run *k);

/* FNV-1a over the ids, for kld_open. */
uint64_t kld_hash(const int32_t *ids, size_t n);

#endif
