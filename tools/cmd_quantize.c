/* cmd_quantize.c: `anyllm quantize` (F32/F16/BF16 GGUF -> a quantized GGUF, the way
 * llama.cpp's llama-quantize does it, byte for byte) and `anyllm gen-model` (a model of
 * random weights, for benchmarks only): the command lines, usage texts and progress
 * lines over the library's al_quantize and al_gen_model (anyllm.h), which check the
 * values and do the work.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anyllm.h"
#include "cli.h"
#include "cmd_quantize.h"

static double mib(uint64_t n) { return (double)n / (1024.0 * 1024.0); }

/* "Q8_0, Q6_K, ..." for messages. */
static const char *scheme_list(void) {
    static char list[256];
    const char *names[64];
    const int n = al_quantize_types(names, NULL, 64);
    size_t len = 0;
    list[0] = '\0';
    for (int i = 0; i < n && i < 64 && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    return list;
}

/* A library failure: the checks of the arguments (AL_ERR_ARG) under the command's name,
 * the others with their status. */
static int fail(const char *command, al_status st) {
    if (st == AL_ERR_ARG) return cli_fail("%s: %s", command, al_last_error());
    return cli_fail_status(st);
}

/* ---- quantize ----------------------------------------------------------------------- */

static void quantize_usage(void) {
    const char *names[64], *help[64];
    const int n = al_quantize_types(names, help, 64);
    printf("usage: anyllm quantize IN.gguf OUT.gguf TYPE [-t N] [--pure]\n"
           "Quantizes an F32/F16/BF16 GGUF model as llama.cpp's llama-quantize does (same\n"
           "bytes, no importance matrix). TYPE (case-insensitive; Q4_K and Q5_K mean Q4_K_M\n"
           "and Q5_K_M, as in llama.cpp):\n");
    for (int i = 0; i < n && i < 64; i++) printf("  %-9s %s\n", names[i], help[i]);
    printf("options:\n"
           "  -t N     threads (default: all cores)\n"
           "  --pure   every weight matrix in TYPE: no Q6_K output, no per-layer mix\n");
}

static void print_progress(void *user, const al_quantize_progress *p) {
    (void)user;
    char shape[96];
    int len = snprintf(shape, sizeof shape, "[%" PRId64, p->ne[0]);
    for (int d = 1; d < p->n_dims && d < 4; d++)
        len += snprintf(shape + len, sizeof shape - (size_t)len, ", %" PRId64, p->ne[d]);
    snprintf(shape + len, sizeof shape - (size_t)len, "]");
    fprintf(stderr, "[%4d/%4d] %-36s %-14s %5s -> %-5s %9.2f MiB -> %8.2f MiB%s\n", p->index,
            p->count, p->name, shape, p->from_type, p->to_type, mib(p->from_bytes),
            mib(p->to_bytes),
            p->fell_back ? "  (fallback: ne[0] is not a multiple of the block size)" : "");
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int n_pos = 0;
    al_quantize_params p = al_quantize_default_params();
    p.progress = print_progress;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage();
            return 0;
        } else if (!strcmp(a, "--pure")) {
            p.pure = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            int64_t v;
            if (i + 1 >= argc || !cli_parse_i64(argv[i + 1], 1, 256, &v))
                return cli_fail("quantize: %s needs a thread count in [1, 256]", a);
            p.n_threads = (int)v;
            i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_fail("quantize: unknown option %s (see anyllm quantize --help)", a);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            return cli_fail("quantize: unexpected argument '%s'", a);
        }
    }
    if (n_pos < 3) return cli_fail("usage: anyllm quantize IN.gguf OUT.gguf TYPE [-t N] [--pure]");
    p.type = pos[2];
    al_quantize_report r;
    const double t0 = cli_now_s();
    al_status st = al_quantize(pos[0], pos[1], &p, &r);
    if (st != AL_OK) return fail("quantize", st);
    printf("%s: %s%s, %d tensors (%d converted, %d fallbacks), %.2f MiB -> %.2f MiB, %.1f s on "
           "%d threads\n", pos[1], r.type, p.pure ? " (pure)" : "", r.n_tensors, r.n_quantized,
           r.n_fallback, mib(r.in_bytes), mib(r.out_bytes), cli_now_s() - t0, r.n_threads);
    return 0;
}

/* ---- gen-model ------------------------------------------------------------------------ */

static void gen_usage(void) {
    char archs[256];
    printf("usage: anyllm gen-model OUT.gguf --arch A --dim D --layers L --heads H\n"
           "         --kv-heads K --ffn F --vocab V --type TYPE [--tied] [--rope-base B]\n"
           "         [--head-dim N] [--swa N] [--ctx N] [--seed S] [-t N] [--pure]\n"
           "         [--experts E --experts-used K --ffn-exp F] [--yarn FACTOR]\n"
           "         [--ssm-conv K --ssm-state S --ssm-heads V --ssm-groups G --full-attn-interval N]\n"
           "         [--mtp N] [--ssm-split] [--q-lora N] [--kv-lora N]\n"
           "         [--head-dim-swa N --swa-period N --shared-kv N --ple N]\n"
           "A is one of %s; --head-dim defaults to D / H (qwen3, gemma3\n"
           "and gpt-oss may differ), --swa is the sliding window (default 512); a mixture\n"
           "of experts (qwen3moe, gpt-oss) needs E experts, K used per token, of width F.\n"
           "--mtp N adds N next-token-prediction blocks to a hybrid (qwen35...); --ssm-split\n"
           "gives qwen3next the split q|k|v and z projections instead of the older ssm_in.\n"
           "deepseek2: --head-dim is a query head before absorption (a third rotates),\n"
           "--kv-lora the cached latent width, --q-lora a low-rank query (and V3's router).\n"
           "gemma4: the sliding layers' heads, one global layer in --swa-period, the last\n"
           "--shared-kv layers on earlier layers' caches, per-layer inputs of width --ple.\n"
           "Writes a model of RANDOM WEIGHTS, FOR BENCHMARKS ONLY: the shapes and hyper-\n"
           "parameters are real, the output is noise. Weights ~ N(0, 0.02)-like, norms 1,\n"
           "a minimal SentencePiece-style vocabulary of V >= 259 tokens. Deterministic for\n"
           "a seed (default 1). TYPE as for `anyllm quantize`: %s.\n"
           "example (a 1.1 B llama):\n"
           "  anyllm gen-model bench-1b.gguf --arch llama --dim 2048 --layers 16 --heads 32 \\\n"
           "    --kv-heads 8 --ffn 8192 --vocab 32000 --type Q4_0\n",
           al_gen_arch_names(archs, sizeof archs), scheme_list());
}

/* One option and its value, into p. The library checks the ranges and how the values
 * fit together; here a number only has to be one, and above 0 (0 is its "default"). */
static int gen_parse_one(al_gen_params *p, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const struct { const char *name; int *v; } nums[] = {
        {"--dim", &p->dim},           {"--layers", &p->layers},     {"--heads", &p->heads},
        {"--kv-heads", &p->kv_heads}, {"--head-dim", &p->head_dim}, {"--swa", &p->swa},
        {"--ffn", &p->ffn},           {"--vocab", &p->vocab},       {"--ctx", &p->ctx},
        {"-t", &p->n_threads},        {"--experts", &p->experts},
        {"--experts-used", &p->experts_used}, {"--ffn-exp", &p->ffn_exp},
        {"--yarn", &p->yarn},         {"--ssm-conv", &p->ssm_conv},
        {"--ssm-state", &p->ssm_state}, {"--ssm-heads", &p->ssm_heads},
        {"--ssm-groups", &p->ssm_groups}, {"--full-attn-interval", &p->full_attn_interval},
        {"--mtp", &p->mtp},           {"--q-lora", &p->q_lora},     {"--kv-lora", &p->kv_lora},
        {"--head-dim-swa", &p->head_dim_swa}, {"--swa-period", &p->swa_period},
        {"--shared-kv", &p->shared_kv}, {"--ple", &p->ple},
    };
    if (!strcmp(a, "--tied")) return p->tied = true, 0;
    if (!strcmp(a, "--pure")) return p->pure = true, 0;
    if (!strcmp(a, "--ssm-split")) return p->ssm_split = true, 0;
    if (*i + 1 >= argc) return cli_fail("gen-model: option %s needs a value", a);
    const char *val = argv[++*i];
    int64_t v;
    for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
        if (strcmp(a, nums[k].name)) continue;
        if (!cli_parse_i64(val, 1, INT_MAX, &v))
            return cli_fail("gen-model: %s %s: expected a positive integer", a, val);
        *nums[k].v = (int)v;
        return 0;
    }
    if (!strcmp(a, "--seed")) {
        if (!cli_parse_i64(val, 0, INT64_MAX, &v))
            return cli_fail("gen-model: --seed %s: expected an integer in [0, %" PRId64 "]", val,
                            INT64_MAX);
        p->seed = (uint64_t)v;
    } else if (!strcmp(a, "--arch")) {
        p->arch = val;
    } else if (!strcmp(a, "--type")) {
        p->type = val;
    } else if (!strcmp(a, "--rope-base")) {
        char *end;
        p->rope_base = strtod(val, &end);
        if (end == val || *end || !(p->rope_base > 0 && p->rope_base < 1e12))
            return cli_fail("gen-model: --rope-base %s: expected a positive number", val);
    } else {
        return cli_fail("gen-model: unknown option %s (see anyllm gen-model --help)", a);
    }
    return 0;
}

/* A line per block written, to stderr: a large model takes minutes. */
static void gen_progress(void *user, int done, int count) {
    const double *t0 = user;
    fprintf(stderr, "gen-model: layer %d/%d written, %.1f s\n", done, count, cli_now_s() - *t0);
}

int cmd_gen_model(int argc, char **argv) {
    const char *out = NULL;
    al_gen_params p = al_gen_default_params();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return gen_usage(), 0;
        if (argv[i][0] != '-') {
            if (out) return cli_fail("gen-model: unexpected argument '%s'", argv[i]);
            out = argv[i];
            continue;
        }
        int rc = gen_parse_one(&p, argc, argv, &i);
        if (rc) return rc;
    }
    if (!out) return cli_fail("gen-model: OUT.gguf is required (see anyllm gen-model --help)");
    double t0 = cli_now_s();
    p.progress = gen_progress;
    p.progress_user = &t0;
    al_gen_report r;
    al_status st = al_gen_model(out, &p, &r);
    if (st != AL_OK) return fail("gen-model", st);
    printf("%s: random benchmark model, %s, %.3f B parameters, %s, %.2f MiB of tensors "
           "(%d fallbacks), %.1f s on %d threads\n", out, p.arch, (double)r.n_params / 1e9,
           r.type, mib(r.n_bytes), r.n_fallback, cli_now_s() - t0, r.n_threads);
    return 0;
}
