// llamacpp_logits.cpp: llama.cpp's logits for a list of token ids, evaluated as one
// batch, written as float32 [n_tokens][n_vocab]. Built and run by
// scripts/exact-llamacpp.sh against a llama.cpp tree; not part of anyllm's build.
//
//   llamacpp_logits MODEL.gguf OUT.f32 ID,ID,... [f32]
//
// With "f32" the KV cache holds f32 keys and values rather than llama.cpp's default f16
// (tests/test_glm4moe.c's references: every layer attends, and f16 keys alone move F32
// logits by an NMSE of ~1e-7).
// tests/test_gemma4.c's references come from a build whose ggml-cpu has its GELU lookup
// table off (the `#define GGML_GELU_FP16` of ggml/src/ggml-cpu/vec.h removed): the table
// rounds GELU's input and output to f16, 2e-7 to 6e-7 of NMSE on those files.
// The settings are the ones tests/data/exact.tsv names: CPU only, one thread, the
// weights as the file has them (no repacking into extra buffer types), flash attention
// off.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "f32")) {
        std::fprintf(stderr, "usage: %s MODEL.gguf OUT.f32 ID,ID,... [f32]\n", argv[0]);
        return 2;
    }
    std::vector<llama_token> ids;
    std::stringstream list(argv[3]);
    for (std::string id; std::getline(list, id, ',');)
        if (!id.empty()) ids.push_back((llama_token)std::atoi(id.c_str()));
    const int n = (int)ids.size();
    if (n < 1 || n > 512) {
        std::fprintf(stderr, "%d token ids: 1 to 512 expected\n", n);
        return 2;
    }

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "%s: cannot load\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (argc == 5) cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) {
        std::fprintf(stderr, "llama_decode failed\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = std::fopen(argv[2], "wb");
    if (!out) {
        std::fprintf(stderr, "%s: cannot write\n", argv[2]);
        return 1;
    }
    for (int i = 0; i < n; i++)
        std::fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, out);
    std::fclose(out);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
