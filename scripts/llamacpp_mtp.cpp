// llamacpp_mtp.cpp: llama.cpp's next-token-prediction (MTP) logits, the reference of
// tests/test_mtp.c; built against a llama.cpp tree (llama-cpp-python 0.3.36's), not
// part of anyllm's build:
//
//   c++ -O1 -std=c++17 -I$L/include -I$L/ggml/include -I$L/src scripts/llamacpp_mtp.cpp \
//       -L$L/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o llamacpp_mtp
//   llamacpp_mtp MODEL.gguf N OUT.f32
//
// The first N of test_mtp.c's 48 tokens go through the model; the MTP context then reads
// them as common/speculative.cpp has it: positions 0 .. N-2 in one batch without outputs
// (token i paired with the model's hidden state at i - 1, zeros at 0), position N-1 alone
// (the first draft step: its logits), then the greedy token at N with the block's own
// hidden state (the second step). OUT gets both steps' logits, [2][n_vocab] floats.
// CPU, two threads, the weights as the file has them (no extra buffer types).
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const int tokens48[48] = {
    1,   168, 488, 80,  205, 336, 27,  40,  423, 277, 51,  190, 301, 32,  468, 262,
    112, 22,  47,  225, 217, 38,  126, 49,  285, 220, 33,  426, 292, 66,  488, 117,
    325, 324, 301, 488, 34,  298, 302, 206, 28,  502, 116, 26,  288, 442, 71,  151};

// Adds token at pos with hidden state h (may be NULL: none) to batch b.
static void add(llama_batch_ext *b, int token, int pos, const float *h, int n_embd, bool out) {
    const int idx = llama_batch_ext_add_token(b, 0, token);
    const llama_pos p = pos;
    llama_batch_ext_set_pos(b, idx, &p);
    if (h) llama_batch_ext_set_embd_token(b, idx, llama_embd{h, 1, (size_t)n_embd});
    if (out) llama_batch_ext_set_output_logits(b, idx, true);
}

int main(int argc, char **argv) {
    const int n = argc == 4 ? std::atoi(argv[2]) : 0;
    if (n < 1 || n > 48) {
        std::fprintf(stderr, "usage: %s MODEL.gguf N(1..48) OUT.f32\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.load_mtp = true;
    mp.use_extra_bufts = false;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n_embd = llama_model_n_embd_out(model);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    llama_context *tgt = llama_init_from_model(model, cp);
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.n_rs_seq = 0;
    llama_context *dft = llama_init_from_model(model, cp);
    if (!tgt || !dft) return 1;
    llama_set_embeddings_nextn(tgt, true, false);
    llama_set_embeddings_nextn(dft, true, true);

    llama_batch_ext *b = llama_batch_ext_init(tgt);
    for (int i = 0; i < n; i++) add(b, tokens48[i], i, nullptr, n_embd, true);
    if (llama_process(tgt, LLAMA_PROCESS_TYPE_DECODE, b)) return 1;
    std::vector<float> h((size_t)n * n_embd), zero(n_embd, 0.0f);
    for (int i = 0; i < n; i++)
        std::memcpy(&h[(size_t)i * n_embd], llama_get_embeddings_nextn_ith(tgt, i),
                    (size_t)n_embd * sizeof(float));
    auto hidden = [&](int i) { return i < 0 ? zero.data() : &h[(size_t)i * n_embd]; };

    llama_batch_ext *bd = llama_batch_ext_init(dft);
    for (int i = 0; i < n - 1; i++) add(bd, tokens48[i], i, hidden(i - 1), n_embd, false);
    if (n > 1 && llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, bd)) return 1;
    std::vector<float> out((size_t)2 * n_vocab), h2(n_embd);
    llama_batch_ext_clear(bd);
    add(bd, tokens48[n - 1], n - 1, hidden(n - 2), n_embd, true);
    if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, bd)) return 1;
    std::memcpy(out.data(), llama_get_logits_ith(dft, 0), (size_t)n_vocab * sizeof(float));
    std::memcpy(h2.data(), llama_get_embeddings_nextn_ith(dft, 0), (size_t)n_embd * sizeof(float));
    int best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (out[i] > out[best]) best = i;
    llama_batch_ext_clear(bd);
    add(bd, best, n, h2.data(), n_embd, true);
    if (llama_process(dft, LLAMA_PROCESS_TYPE_DECODE, bd)) return 1;
    std::memcpy(out.data() + n_vocab, llama_get_logits_ith(dft, 0), (size_t)n_vocab * sizeof(float));
    FILE *f = std::fopen(argv[3], "wb");
    if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) return 1;
    std::fclose(f);
    std::fprintf(stderr, "%s: N %d, first draft %d\n", argv[1], n, best);
    return 0;
}
