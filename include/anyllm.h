/* anyllm.h: run GGUF language models on the CPU (and, later, on GPUs through Vulkan).
 *
 * This header is the specification of the library. Everything not declared here is
 * private. Conventions:
 *   - Objects are opaque handles with create/destroy (or load/destroy) pairs; every
 *     destroy function accepts NULL.
 *   - Functions that can fail return an al_status. On failure their out-parameters are
 *     set to NULL and al_last_error() describes what went wrong, naming the file, field
 *     and value at fault.
 *   - A NULL handle or out-parameter crashes nothing: a function that returns an
 *     al_status returns AL_ERR_ARG, a getter gives zeros (an info struct all zero, a
 *     count of 0, NULL, false, token -1) and anything else does nothing.
 *   - An al_model is immutable once loaded and may be shared by threads; an al_context
 *     (one sequence: KV cache and scratch) is used by one thread at a time.
 */
#ifndef AL_ANYLLM_H
#define AL_ANYLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum al_status {
    AL_OK = 0,
    AL_ERR_ARG,         /* the caller passed something invalid             */
    AL_ERR_IO,          /* open / read / mmap failed                       */
    AL_ERR_FORMAT,      /* the file is not valid GGUF, or is inconsistent  */
    AL_ERR_UNSUPPORTED, /* architecture, type or op not implemented here   */
    AL_ERR_NOMEM,
    AL_ERR_DEVICE,      /* a backend failed, e.g. the GPU was lost         */
} al_status;

/* A short English name for a status ("format error", ...). Never NULL. */
const char *al_status_str(al_status s);

/* The message of the last failure on the calling thread. Never NULL; "" if none. */
const char *al_last_error(void);

/* What the library has to say that is not a failure: a fallback it took (a GPU that
 * cannot run a model, so the CPU does), a setting it could not honour, the Vulkan
 * validation layer's messages. One line per call, without a newline. */
typedef enum al_log_level { AL_LOG_INFO, AL_LOG_WARN } al_log_level;
typedef void (*al_log_fn)(void *user, al_log_level level, const char *line);
/* Where those lines go, process-wide: fn(user, level, line) from whichever thread
 * speaks, so fn must be thread-safe. NULL (the default) drops them; the library never
 * writes to stdout or stderr itself. */
void al_set_log(al_log_fn fn, void *user);

/* The library's version, e.g. "0.5.0". */
const char *al_version(void);
/* The backends this build has, e.g. "cpu (avx512-vnni), vulkan": the CPU's instruction
 * set is the one its kernels would use on this machine. */
const char *al_backends(void);
/* The backends this machine can run, as al_model_params.backend names them: "cpu",
 * then "vulkan:0", "vulkan:1", ... for each Vulkan device (software ones included).
 * Returns how many; fills names[0 .. min(count, max)) with static strings (none where
 * names is NULL: the count alone). */
int al_backend_list(const char **names, int max);
/* What a backend al_backend_list names is, on one line into buf (size bytes, NUL-
 * terminated): "cpu avx2" (its instruction set), or a Vulkan device's name. AL_ERR_ARG
 * for a name that is not one of this machine's backends. */
al_status al_backend_describe(const char *name, char *buf, size_t size);
/* How many GPUs the Vulkan backend sees (the vulkan:N of al_backend_list), or -1 where
 * this build has no Vulkan backend or it cannot start (al_last_error says why: no
 * loader, no instance). */
int al_gpu_count(void);
/* What a GPU backend (vulkan:N) is and can do, over several lines into buf (size bytes,
 * NUL-terminated, cut short where it does not fit): device type and unified memory,
 * driver, memory heaps, subgroup size, fp16 / int8 support, binding and allocation
 * limits, host import. AL_ERR_ARG for a name that is not one of this machine's GPUs. */
al_status al_gpu_details(const char *name, char *buf, size_t size);
/* The copy bandwidth of GPU backend name in GB/s (1e9 B/s; bytes read plus written):
 * the best of a few runs of a copy shader over a large buffer. */
al_status al_gpu_bandwidth(const char *name, double *gbs);

/* The Vulkan loader and validation layer, process-wide: they act when the library
 * creates a Vulkan instance, which al_backend_list, al_gpu_count, al_backend_describe,
 * al_gpu_details and al_gpu_bandwidth do before any model exists, so they cannot be
 * parameters of a model. Call it before the first Vulkan use: every instance created
 * after the call has these values (NULL, false until then).
 *   loader      the file dlopen opens as libvulkan; NULL or "": "libvulkan.so.1"
 *               (the CLI: ANYLLM_VK_LOADER)
 *   validation  the Khronos validation layer with its synchronization checks; its
 *               messages go to the log (al_set_log) and are counted, and the count is
 *               logged as a model's Vulkan backend ends. Where the layer is not
 *               installed, Vulkan backends fail to start (ANYLLM_VK_VALIDATION=1)
 * AL_ERR_ARG for a loader path over 4095 bytes. A build without Vulkan keeps nothing
 * and returns AL_OK: there is no instance to configure. */
al_status al_set_vulkan_instance(const char *loader, bool validation);

typedef struct al_model al_model;     /* weights + hyper-parameters; immutable; shared */
typedef struct al_context al_context; /* KV cache + scratch for one sequence          */

/* How the CPU backend runs (al_model_params.cpu), for comparisons and benchmarks; the
 * defaults are the fastest this machine has. The int switches are -1 for the backend's
 * default, 0 off, 1 on; any other value, or a name not listed, fails al_model_load
 * with AL_ERR_ARG naming the field. The library reads no environment: the CLI maps
 * the ANYLLM_* variable in parentheses onto each field. */
typedef struct al_cpu_settings {
    const char *isa;  /* the kernels' instruction set: NULL or "best" (the best this CPU
                         runs), "avx512", "avx2", "scalar" (portable C) or "ref" (the
                         plain reference ops, the oracle). One this CPU cannot run gives
                         way to the best, with a warning in the log (ANYLLM_ISA) */
    const char *act;  /* how the fast kernels round activations: NULL or "q8" (8 bits,
                         as llama.cpp), "q8x2" or "precise" (~15 bits); a backend name
                         with a mode ("cpu:precise") wins over it (ANYLLM_ACT) */
    int amx;          /* prompts on AMX tiles where the CPU and the OS allow (default
                         on); 1 where they do not logs why (ANYLLM_AMX) */
    int x16;          /* weights moved into the x16 layout at load (default on); off,
                         they are read in place: a quicker load (ANYLLM_X16) */
    int x16_prefetch; /* the x16 kernels prefetch into L1 (default: on Intel CPUs)
                         (ANYLLM_X16_PF) */
    int moe_fuse;     /* a few tokens' experts in one pass (default on) (ANYLLM_MOE_FUSE) */
    int fuse;         /* a few tokens' matmuls fused (default on) (ANYLLM_CPU_FUSE) */
} al_cpu_settings;

/* How the Vulkan backend runs (al_model_params.vulkan); the defaults are zeros and
 * NULLs, but for timeout_ms (-1). Mostly for tests and tuning; a bad value fails
 * al_model_load with AL_ERR_ARG naming the field. The CLI maps the variable in
 * parentheses. */
typedef struct al_vulkan_settings {
    const char *tune;   /* "key=value,...": shader sizes and fusions over the device's
                           defaults (src/vulkan/pipelines.c lists the keys); NULL: none.
                           A key not known or a value outside 0..4096 is AL_ERR_ARG
                           (ANYLLM_VK_TUNE) */
    bool no_subgroup;   /* the shaders without subgroup arithmetic, even where the device
                           has it (ANYLLM_VK_NO_SUBGROUP) */
    int64_t timeout_ms; /* a fence wait longer than this loses the device; < 0: 600000
                           (lavapipe runs a 1B prompt in minutes); 0: never wait, only
                           look (tests) (ANYLLM_VK_TIMEOUT_MS) */
    bool auto_software; /* "auto" may take a software renderer such as lavapipe (tests)
                           (ANYLLM_VK_AUTO_SOFTWARE) */
    bool pretend_discrete; /* a unified-memory device treated as discrete: the weights
                              staged into its own memory (tests of those paths)
                              (ANYLLM_VK_PRETEND_DISCRETE) */
    uint64_t max_weight_bytes; /* > 0: the device takes at most this many bytes of
                                  weights, as a small one would (tests); 0: no limit
                                  (ANYLLM_VK_MAX_WEIGHT_BYTES) */
    const char *weights; /* how the weights reach the device: NULL (imported where the
                            memory is unified and the driver imports host memory, else
                            a host-visible copy; a discrete GPU: staged), "import",
                            "host" or "staging"; one the device cannot do is AL_ERR_ARG
                            (ANYLLM_VK_WEIGHTS) */
    bool profile;       /* time each dispatch for al_model_get_dispatch_times
                           (ANYLLM_VK_PROFILE) */
} al_vulkan_settings;

typedef struct al_model_params {
    int n_threads;       /* worker threads for the CPU backend; 0 = number of cores   */
    const char *backend; /* "cpu", "vulkan", "vulkan:N" (device N) or "auto" (the
                            first GPU that works, else the CPU); NULL = "cpu".
                            "cpu" rounds activations to 8 bits as llama.cpp does
                            ("cpu:q8"); "cpu:precise" ("cpu:q8x2") to ~15 bits, close
                            to the reference ops at twice the integer work          */
    /* Called as a GPU backend takes the weights (a copy to a discrete GPU can take a
     * while) with the share done so far, 0 < done <= 1; NULL: none. */
    void (*progress)(void *user, double done);
    void *progress_user;
    /* The backends' settings (above): those of the backend this model creates apply,
     * but al_model_load checks both, so a bad value fails whichever backend runs (a
     * build without Vulkan ignores .vulkan). */
    al_cpu_settings cpu;
    al_vulkan_settings vulkan;
    /* Latent attention (deepseek2): no f32 copies of k_b and v_b for the expanded form
     * of prompts (al_context_params.mla_expand_min), which saves their memory
     * (al_model_info.mla_expand_bytes); every batch then attends in the absorbed form. */
    bool mla_absorbed;
} al_model_params;

/* The defaults of every field: a caller starts from these and changes what it needs
 * (a zero-filled struct is not the same: cpu's switches would read 0, off). */
al_model_params al_model_default_params(void);

/* Maps and validates a GGUF file and binds the weights of a supported architecture.
 * The weights stay in the mapping (no copy). On success *out owns the mapping. */
al_status al_model_load(const char *path, const al_model_params *params, al_model **out);
void al_model_destroy(al_model *m);

/* Hyper-parameters, as read from the file. */
typedef struct al_model_info {
    const char *arch;   /* general.architecture: llama, qwen2, qwen3, gemma3 */
    int n_vocab;        /* logits per position                          */
    int n_ctx_train;    /* context length the model was trained with    */
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_ff;
    uint64_t n_params;  /* elements over all tensors                    */
    uint64_t n_bytes;   /* bytes of tensor data                         */
    uint64_t n_bytes_per_token; /* weight bytes one decode step reads: every
                                   matrix (of a mixture of experts, only the
                                   experts a token uses), the output, one
                                   embedding row */
    const char *backend; /* where the model runs, e.g. "cpu avx512 q8x2" */
    uint64_t n_bytes_copied; /* weight bytes the backend copied at load; 0 when all
                                are used in place from the file mapping (the CPU, a
                                GPU on unified memory that imports the mapping) */
    double load_s;       /* seconds al_model_load took                   */
    const char *features; /* what the layers do, e.g. "neox rope (base 1e+06),
                             per-head Q/K norm, SiLU-gated FFN, tied output" */
    int n_recurrent;     /* layers with a recurrent state instead of a KV cache
                            (qwen35...): see al_context_checkpoint */
    uint64_t state_bytes; /* bytes of that state, per sequence and per checkpoint */
    int n_mtp;           /* next-token-prediction blocks al_draft_mtp can run (0 or 1) */
    /* latent attention (deepseek2): the values one layer caches per position (the
     * compressed vector and the rope key: head_dim, which the keys and values of every
     * head share), and the values the expanded keys and values of all heads would take
     * instead; both 0 for other architectures */
    int kv_latent_dim, kv_expanded_dim;
    /* latent attention: bytes of the f32 weights made at load for prompts' expanded form
     * (al_context_params.mla_expand_min), beside the file's */
    uint64_t mla_expand_bytes;
} al_model_info;

void al_model_get_info(const al_model *m, al_model_info *out);

/* What a model's backend has done since it was created, for reports (anyllm bench):
 * counters that only grow, so a caller takes their difference around the work it
 * measures. A backend that runs on the host (the CPU) has no submissions: gpu is false
 * and the rest 0. */
typedef struct al_backend_stats {
    bool gpu;              /* the backend records work for a device and submits it */
    uint64_t n_submits;    /* submissions (command buffers) */
    uint64_t n_dispatches; /* compute dispatches recorded */
    double record_s;       /* host seconds recording, from a submission's first command
                              to its submit: what replaying a recording could save */
    double wait_s;         /* host seconds waiting for submissions to finish */
    double gpu_s;          /* the device's own seconds, first command to last, over the
                              n_timed submissions whose queue had timestamps */
    uint64_t n_timed;
    /* how the weights reached the device: "import" (used in place), "host copy" or
     * "staging copy"; NULL on the host */
    const char *weight_path;
    uint64_t bytes_imported, bytes_copied; /* weight bytes used in place, copied */
    double load_s;                         /* seconds loading weights onto the device */
} al_backend_stats;

void al_model_get_backend_stats(const al_model *m, al_backend_stats *out);

/* Device time per shader build, for finding where a GPU's time goes. Only where the
 * backend times each dispatch: a Vulkan backend created with vulkan.profile set (the
 * CLI's ANYLLM_VK_PROFILE=1) writes a timestamp before and after every dispatch.
 * Those make the dispatches run one at a time, so a profiled run is slower than a
 * plain one: read the shares, not the totals. Counters only grow, as
 * al_backend_stats' do. */
typedef struct al_dispatch_time {
    char name[48];  /* the shader build and its variant, e.g. "matvec_q4_0_sg.0" */
    uint64_t n;     /* dispatches timed */
    double gpu_s;   /* device seconds from their starts to their ends, summed */
} al_dispatch_time;

/* Writes the builds that have run (n > 0), up to max of them, in an order that does
 * not change while m lives, and returns how many there are (more than max: some were
 * left out); 0 where nothing is timed. With out NULL, the count alone. */
int al_model_get_dispatch_times(const al_model *m, al_dispatch_time *out, int max);

/* Reads n_bytes at buf with this CPU's widest vector loads and returns a sum of what it
 * read (the 64-bit words of its 64-byte-aligned middle, the bytes of its edges), which
 * keeps the read from being optimized away: the read a memory bandwidth probe times
 * (anyllm bench). A plain C loop reads narrower and measured ~25% less. */
uint64_t al_memory_read_sum(const void *buf, size_t n_bytes);

/* ---- a GGUF file's header, without loading its model (anyllm info) ---------------- */

typedef struct al_gguf al_gguf; /* an open file: its metadata and its table of tensors */

/* Maps path and validates its header as al_model_load does, binding no model: files
 * the engine cannot run (a vocabulary alone) open too. */
al_status al_gguf_open(const char *path, al_gguf **out);
void al_gguf_close(al_gguf *g); /* NULL is a no-op */

typedef struct al_gguf_info {
    uint32_t version;
    uint64_t file_size, alignment;
    uint64_t n_kv, n_tensors;
} al_gguf_info;

void al_gguf_get_info(const al_gguf *g, al_gguf_info *out);

/* Metadata entry i (< n_kv): its key into key (cut to key_size - 1 bytes), its type's
 * name into *type ("u32", "f32", "string", "array", ...) and its value as text into
 * value: a number, true or false, a string with line breaks and tabs as spaces, an
 * array as "[TYPE x N]"; *cut says whether the value was cut to value_size - 1 bytes.
 * AL_ERR_ARG for an i out of range or a missing buffer. */
al_status al_gguf_kv(const al_gguf *g, uint64_t i, char *key, size_t key_size, const char **type,
                     char *value, size_t value_size, bool *cut);

typedef struct al_gguf_tensor {
    const char *type; /* "F32", "Q4_K", ... */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* ne[0] is the contiguous dimension; unused ones are 1 */
    uint64_t n_elem, n_bytes;
} al_gguf_tensor;

/* Tensor i (< n_tensors): its name into name (cut to name_size - 1 bytes) and its
 * shape and storage into *out. AL_ERR_ARG for an i out of range or a missing buffer. */
al_status al_gguf_tensor_info(const al_gguf *g, uint64_t i, char *name, size_t name_size,
                              al_gguf_tensor *out);

/* The type of a KV cache's keys or of its values (al_context_params.type_k/type_v). */
typedef enum al_kv_type { AL_KV_F32 = 0, AL_KV_F16, AL_KV_Q8_0, AL_KV_Q4_0 } al_kv_type;

/* "f32", "f16", "q8_0", "q4_0"; "?" for a value out of range. */
const char *al_kv_type_name(al_kv_type t);

/* The type named name (al_kv_type_name's names), or AL_ERR_ARG listing them. */
al_status al_kv_type_parse(const char *name, al_kv_type *out);

typedef struct al_context_params {
    int n_ctx;   /* positions the KV cache holds; 0 = al_model_default_n_ctx, or with
                    kv_shared_with that context's size */
    /* NULL, or a context (of this model or another of the same shape, e.g. the same
     * file loaded on another backend) whose KV cache memory this context uses too, where
     * both backends see the same memory: the CPU and a GPU on unified memory, which
     * imports the other's pages as it imports weights. Elsewhere (a discrete GPU) the
     * context has a cache of its own and al_context_handoff copies. That context must
     * outlive this one, and n_ctx must equal its size (AL_ERR_ARG otherwise).
     * al_context_get_info says whether the memory is shared. */
    const struct al_context *kv_shared_with;
    /* Models with recurrent layers: how many checkpoints of the state the context keeps
     * (al_context_checkpoint), each al_model_info.state_bytes of host memory; the
     * oldest goes when one more is made. 0 = the default, AL_DEFAULT_CHECKPOINTS; -1 =
     * none. al_context_create counts them with the KV cache against the host's memory. */
    int n_checkpoints;
    /* The KV cache's types for keys and values (llama.cpp's --cache-type-k/-v): f32 by
     * default. f16 halves the cache, q8_0 takes 34 bytes per 32 values (about a
     * quarter), q4_0 18 (about an eighth). A backend that cannot read a type refuses
     * it at al_context_create, naming it. */
    al_kv_type type_k, type_v;
    /* Quantized types store each head rotated by a Hadamard transform, which spreads an
     * outlier over the head instead of letting it set its block's scale; true stores
     * them as they are (to measure what the rotation gives). */
    bool kv_unrotated;
    /* Keep the cache of the model's next-token-prediction block, for al_draft_mtp:
     * AL_ERR_UNSUPPORTED where the file has none (al_model_info.n_mtp). al_eval_multi
     * takes such contexts only together (all with mtp, or none). */
    bool mtp;
    /* Latent attention (deepseek2): batches of at least this many tokens attend in the
     * expanded form, each head's keys and values made from the cached latent rows
     * (fewer operations per score), shorter ones and decoding in the absorbed form,
     * over the latent rows themselves. 0 = AL_MLA_EXPAND_MIN; -1 = never (to compare).
     * The expanded form takes f32 caches, and scratch for one head's keys and values of
     * the context's positions (less than one layer's cache). */
    int mla_expand_min;
} al_context_params;

enum { AL_DEFAULT_CHECKPOINTS = 4, AL_MLA_EXPAND_MIN = 192 };

/* Bytes of KV cache a context of n_ctx positions allocates with keys and values of
 * types k and v: to check before creating one (al_context_create refuses one the CPU
 * backend's memory cannot hold). */
uint64_t al_model_kv_bytes(const al_model *m, int n_ctx, al_kv_type k, al_kv_type v);

/* Bytes of keys and values (of types k and v) the token at position pos reads: every
 * layer's keys up to pos, or its window's (a sliding-window layer). A decode step reads
 * these beside al_model_info.n_bytes_per_token, and at depth they are no longer small
 * (bench-1b at position 2048: 88 MiB in f32, against 574 MiB of weights). */
uint64_t al_model_kv_read_bytes(const al_model *m, int pos, al_kv_type k, al_kv_type v);

/* The context a size of 0 gives: the model's training context, or less where its KV
 * cache would take more than half the memory available now (the CPU backend, which
 * keeps it in host memory); on a GPU backend at most 4096 positions. */
int al_model_default_n_ctx(const al_model *m);

al_context_params al_context_default_params(void);

/* A sequence over a model. The model must outlive the context. */
al_status al_context_create(const al_model *m, const al_context_params *params,
                            al_context **out);
void al_context_destroy(al_context *c);

/* Positions held in the KV cache so far. */
int al_context_n_past(const al_context *c);

/* Forgets every position; the next al_eval starts a new sequence. */
void al_context_reset(al_context *c);

/* Forgets positions n_past and later, keeping the first n_past (a shared prefix).
 * AL_ERR_ARG if n_past is negative or beyond the positions held. A model with
 * sliding-window layers keeps only the recent positions those layers need, about a
 * batch (512) beyond the window: cut back further, the context starts over (keeps 0
 * positions). A model with recurrent layers (qwen35, qwen35moe, qwen3next) has their
 * state at its last position only: cut back, it goes back to the latest checkpoint at
 * or before n_past (al_context_checkpoint), or starts over where there is none. Read
 * al_context_n_past afterwards for what was kept. */
al_status al_context_truncate(al_context *c, int n_past);

/* Models with recurrent layers: saves their state at the current position, so that a
 * later al_context_truncate to this position or beyond can go back to it (a server
 * reusing the prefix of the previous request, a chat its previous turns). Only the
 * latest n_checkpoints (al_context_params) are kept; al_context_reset and a truncate
 * before a checkpoint drop it. AL_OK and nothing saved for other models, at position
 * 0, or where a checkpoint of this position exists. AL_ERR_NOMEM where the host has no
 * room for one (the context is unchanged). */
al_status al_context_checkpoint(al_context *c);

/* Checkpoints a context holds and the latest one's position (0 if none). */
int al_context_n_checkpoints(const al_context *c, int *latest);

/* Positions the context holds at most. */
int al_context_n_ctx(const al_context *c);

/* What a context holds and where. */
typedef struct al_context_info {
    int n_ctx, n_past;
    const char *backend;      /* its model's backend, as al_model_info.backend */
    uint64_t kv_bytes;        /* bytes of KV cache (al_model_kv_bytes)              */
    bool kv_shared;           /* its KV cache is another context's memory
                                 (al_context_params.kv_shared_with)                 */
    uint64_t kv_bytes_copied; /* KV bytes al_context_handoff copied into it so far:
                                 0 while every hand-off shared memory               */
    al_kv_type type_k, type_v; /* its cache's types (al_context_params)             */
    bool kv_rotated;          /* the quantized caches hold rotated heads            */
    /* latent attention: the fewest tokens of a batch that take the expanded form, and
     * the positions its scratch holds (0: never taken, al_context_params.mla_expand_min) */
    int mla_expand_min, mla_expand_rows;
} al_context_info;

void al_context_get_info(const al_context *c, al_context_info *out);

/* Hands the sequence src holds to dst: afterwards dst holds exactly what src held (its
 * positions and their KV rows, a sliding window's ring included), so that a prompt
 * evaluated on one backend is continued on another, e.g. prefill on a GPU and decode on
 * the CPU, and the logits do not depend on the split. The models must have the same
 * shape (AL_ERR_ARG naming what differs) and dst room for src's positions. Waits until
 * src's backend has written its cache. When the two share KV memory (kv_shared_with)
 * nothing is copied, and src is emptied (0 positions), since dst's next evaluation
 * writes the rows src would read; otherwise the rows are copied once (counted in dst's
 * kv_bytes_copied) and src keeps its positions. A model's recurrent states (qwen35...)
 * are each context's own: they are copied either way (counted too), and the
 * checkpoints (al_context_checkpoint) move to dst. Neither context may be in use by
 * another thread meanwhile. */
al_status al_context_handoff(al_context *dst, al_context *src);

/* Two contexts for one sequence split between backends: the prompt is evaluated on
 * *prefill_ctx (of model prefill) and handed (al_context_handoff) to *decode_ctx (of
 * model decode), which generates. They share the attention layers' KV memory
 * (kv_shared_with), which the context whose memory the other can use owns: the one in
 * host memory (the CPU's) when only one is, so that a GPU on unified memory imports
 * ordinary pages, else the prefill context. p applies to both (its kv_shared_with is
 * ignored). On failure neither exists. Destroy them with al_context_destroy_pair. */
al_status al_context_create_pair(const al_model *prefill, const al_model *decode,
                                 const al_context_params *p, al_context **prefill_ctx,
                                 al_context **decode_ctx);
/* Destroys both contexts of al_context_create_pair in the order their sharing needs
 * (the borrower first); either may be NULL. */
void al_context_destroy_pair(al_context *prefill_ctx, al_context *decode_ctx);

/* Evaluates n_tokens tokens as one batch at positions n_past .. n_past+n_tokens-1 and
 * appends them to the KV cache. If logits is not NULL it receives the logits:
 *   all_logits: [n_tokens][n_vocab], else only the last position's [n_vocab].
 * Fails with AL_ERR_ARG (and changes nothing) if a token id is out of range or the
 * batch does not fit in the context. */
al_status al_eval(al_context *c, const int32_t *tokens, int n_tokens, float *logits,
                  bool all_logits);

/* Continuous batching: evaluates the next token of each of n sequences as one batch,
 * so the weights are read once for all of them, and appends each token to its own
 * context. logits, if not NULL, receives [n][n_vocab]. The contexts must share one
 * model, be distinct, each have room for one more position, and n must not exceed
 * the first context's batch size (min(n_ctx, 512)). On failure nothing changes. */
al_status al_eval_multi(al_context *const *ctxs, const int32_t *tokens, int n, float *logits);

/* ---- vocabulary and tokenizer ---------------------------------------------------------
 * The tokenizer of a model comes from its file's tokenizer.ggml.* keys. Supported:
 * SentencePiece-style ("llama": scores, byte fallback) and byte-level BPE ("gpt2":
 * merges, with the pre-tokenizer named by tokenizer.ggml.pre). A vocabulary is
 * immutable once loaded and may be shared by threads. */

typedef struct al_vocab al_vocab;

/* Loads only the vocabulary of a GGUF file (vocabulary-only files included). */
al_status al_vocab_load(const char *path, al_vocab **out);
void al_vocab_destroy(al_vocab *v);

/* The vocabulary of a loaded model, or NULL if its file has none. Owned by the model. */
const al_vocab *al_model_vocab(const al_model *m);

int al_vocab_n_tokens(const al_vocab *v);
int32_t al_vocab_bos(const al_vocab *v);  /* -1 if none */
int32_t al_vocab_eos(const al_vocab *v);  /* -1 if none */
/* True for tokens that end a turn or the text: EOS, EOT, <|im_end|>, <|eot_id|>, ... */
bool al_vocab_is_eog(const al_vocab *v, int32_t id);
/* True for control tokens (BOS, EOS, <|im_start|>, ...), which print as nothing. */
bool al_vocab_is_control(const al_vocab *v, int32_t id);
/* Looks up the id of a token's exact text; -1 if absent. */
int32_t al_vocab_find(const al_vocab *v, const char *text);
/* The token's stored text (e.g. "▁the", "Ġthe", "<0x0A>"), NUL-terminated; NULL for
 * an id out of range. */
const char *al_vocab_text(const al_vocab *v, int32_t id);

typedef struct al_tokenize_params {
    bool add_special;   /* add BOS (and EOS) as the file's add_bos/add_eos flags say */
    bool parse_special; /* recognise control tokens' text (e.g. "<|im_start|>") in the
                           input; user-defined tokens are always recognised */
} al_tokenize_params;

al_tokenize_params al_tokenize_default_params(void); /* both false */

/* Tokenizes len bytes of text (params NULL = the defaults). On success *tokens is an
 * array of *n_tokens ids that the caller frees with al_free_tokens(). Text the
 * vocabulary cannot spell falls back to byte tokens, else to the unknown token; it is
 * an error only when the vocabulary has neither. */
al_status al_tokenize(const al_vocab *v, const char *text, size_t len,
                      const al_tokenize_params *params, int32_t **tokens, int *n_tokens);
void al_free_tokens(int32_t *tokens);

/* The bytes a token stands for in text (byte-level BPE and <0xNN> tokens decoded,
 * "▁" as space). Control and unknown tokens give "" unless show_special is set; an id
 * out of range gives 0. Writes at most size bytes (no NUL) and returns the full
 * length, which may exceed size. */
int al_token_to_bytes(const al_vocab *v, int32_t id, bool show_special, char *buf, int size);

/* Streaming detokenizer: pushes tokens and returns text that is complete UTF-8, holding
 * back the bytes of a character that is not complete yet (a byte-fallback or
 * byte-level token may carry part of one). */
typedef struct al_detok al_detok;
al_status al_detok_create(const al_vocab *v, al_detok **out);
void al_detok_destroy(al_detok *d);
/* Appends the token; *text is the newly completed text (valid until the next call),
 * *len its length. */
al_status al_detok_push(al_detok *d, int32_t id, const char **text, size_t *len);
/* Returns whatever is held back (possibly an invalid tail) and resets. */
void al_detok_flush(al_detok *d, const char **text, size_t *len);

/* Bytes of the UTF-8 character that starts at s (n bytes there): 1 to 4, or 0 where
 * they are no valid character (a model's text may end inside one, or be any bytes). */
size_t al_utf8_char_len(const char *s, size_t n);

/* ---- sampling -------------------------------------------------------------------------
 * Picks the next token from logits. Steps, in order: repetition/frequency/presence
 * penalties over the last penalty_last_n accepted tokens, top-k, top-p, min-p,
 * temperature, then a draw from the seeded generator. temperature <= 0 is greedy. */

typedef struct al_sampler_params {
    float temperature;       /* <= 0: greedy (argmax)                       */
    int top_k;               /* keep the k most likely; <= 0: all            */
    float top_p;             /* keep the smallest set with mass >= p; 1: all */
    float min_p;             /* drop tokens below min_p * p(best); 0: none   */
    float repeat_penalty;    /* divide positive / multiply negative logits of
                                recent tokens; 1: none                      */
    float frequency_penalty; /* minus count * this; 0: none                  */
    float presence_penalty;  /* minus this if seen; 0: none                  */
    int penalty_last_n;      /* how many recent tokens the penalties see     */
    uint64_t seed;
} al_sampler_params;

typedef struct al_sampler al_sampler;

al_sampler_params al_sampler_default_params(void);
/* Fails with AL_ERR_ARG naming the first field that is out of range. */
al_status al_sampler_create(const al_sampler_params *p, int n_vocab, al_sampler **out);
void al_sampler_destroy(al_sampler *s);
/* Picks a token from logits [n_vocab] (not modified); -1 for a NULL sampler or logits. */
int32_t al_sampler_sample(al_sampler *s, const float *logits);
/* Records a token of the sequence (prompt or generated) for the penalties. */
void al_sampler_accept(al_sampler *s, int32_t token);
/* Forgets the history and reseeds with the original seed. */
void al_sampler_reset(al_sampler *s);

/* ---- speculative decoding: drafts ------------------------------------------------------
 * A draft is a guess of the next tokens, which the model checks in one evaluation of all
 * of them: the caller samples each position's logits in turn and keeps the draft's token
 * while the sampler draws it, the first other draw being the next token, then cuts the
 * refused positions from the cache (al_context_truncate; a model with a recurrent state
 * needs an al_context_checkpoint before the evaluation). A draft that proposes its
 * tokens with certainty, checked so, gives exactly the tokens decoding gives without it,
 * greedy or sampled with a seed. */

/* The n-gram draft: the tokens that followed the latest earlier occurrence in hist [n]
 * of its last 4 tokens (else 3), at most max of them, into out. Returns how many (0:
 * nothing matched). */
int al_draft_ngram(const int32_t *hist, int n, int max, int32_t *out);

/* How long the next draft should be: it starts at 2, doubles (up to max) after a draft
 * taken whole, halves after one refused at its first token, and once a draft of one
 * token is refused, drafting pauses for 1, 2, 4, ... up to 32 steps, so that text the
 * guess gets wrong costs little. Plain data: initialize with al_draft_len_init. */
typedef struct al_draft_len {
    int max, cur, pause, skip;
} al_draft_len;

/* A draft model: a small model of the target's vocabulary (al_vocab_same) continuing
 * the text greedily on a context of its own, which follows the text the target keeps:
 * before each draft its cache is cut back to the tokens it shares with hist (a
 * recurrent state may go back further; what it keeps is read back) and the rest of
 * hist is evaluated as one batch. Not thread-safe; one per sequence. */
typedef struct al_drafter al_drafter;

/* A drafter over model m with a context of n_ctx positions (the target's). */
al_status al_drafter_create(const al_model *m, int n_ctx, al_drafter **out);
void al_drafter_destroy(al_drafter *d); /* NULL is a no-op */
/* At most max tokens continuing hist [n] greedily, into out: how many (0 when the
 * context has no room), or -1 when an evaluation failed (al_last_error says why). */
int al_drafter_draft(al_drafter *d, const int32_t *hist, int n, int max, int32_t *out);
/* Evaluates hist [n] (a prompt) now, so that the first draft need not. */
al_status al_drafter_sync(al_drafter *d, const int32_t *hist, int n);
/* Empties the drafter's context (a new text). */
void al_drafter_reset(al_drafter *d);

/* Whether two vocabularies are one: as many tokens, each with the same text. false with
 * the first difference described in why (cap bytes) otherwise. */
bool al_vocab_same(const al_vocab *a, const al_vocab *b, char *why, size_t cap);

/* The model's own draft (--spec mtp): a file with a next-token-prediction block
 * (Qwen3.5 / 3.6: nextn_predict_layers) predicts the token after the next from the
 * trunk's last hidden state and the next token, and then from its own. A context
 * made with al_context_params.mtp runs the block's attention over every position it
 * evaluates (its own KV cache); al_draft_mtp then drafts: last is the token the model
 * chose for position n_past (not evaluated yet), and out receives at most max greedy
 * tokens for the positions after it. Returns how many (0 where the context has no
 * room), or -1 on failure (al_last_error says why). The context's positions and the
 * model's cache are unchanged. */
int al_draft_mtp(al_context *c, int32_t last, int max, int32_t *out);

void al_draft_len_init(al_draft_len *d, int max);
/* The length to draft now, at most limit (0: no draft this step). */
int al_draft_len_next(al_draft_len *d, int limit);
/* A draft of n_drafted tokens of which n_accepted were taken. */
void al_draft_len_result(al_draft_len *d, int n_drafted, int n_accepted);

/* ---- grammars ---------------------------------------------------------------------------
 * A grammar constrains what a sampler may pick: every token keeps the text a prefix of
 * a sentence of the grammar, and an end-of-generation token comes only when the text
 * is a whole sentence. The text is a list of rules, `name ::= body`, one of them named
 * root; a body runs until the next `name ::=` and is made of
 *     "literal"   with escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH
 *     [a-z0-9_]   a character class; [^"\\] its complement; .  any character
 *     name        another rule          ( ... )  a group
 *     a b         a sequence            a | b    alternatives
 *     x*  x+  x?  x{m}  x{m,}  x{m,n}   repetitions (m, n <= 10000)
 *     # ...       a comment to the end of the line
 * Characters are Unicode code points; tokens carrying part of a UTF-8 character are
 * matched byte by byte. A rule that can reach itself without matching a character
 * (left recursion) is refused. One al_grammar follows one sequence: it is not
 * thread-safe; several may share a vocabulary. */

typedef struct al_grammar al_grammar;

/* Compiles the grammar text for the vocabulary's tokens; AL_ERR_ARG names the line and
 * the fault. The vocabulary must outlive the grammar. */
al_status al_grammar_create(const al_vocab *v, const char *text, al_grammar **out);
void al_grammar_destroy(al_grammar *g);
/* Back to the empty text. */
void al_grammar_reset(al_grammar *g);
/* Whether the token may come next (an end-of-generation token: whether the text is
 * complete). Control tokens that spell no text are never allowed. */
bool al_grammar_allows(al_grammar *g, int32_t token);
/* Appends the token's text; AL_ERR_ARG, state unchanged, when it is not allowed. */
al_status al_grammar_accept(al_grammar *g, int32_t token);
/* allowed[id] = 1 for every token that may come next, 0 for the others (n_vocab bytes). */
al_status al_grammar_mask(al_grammar *g, uint8_t *allowed);
/* The text so far is a sentence of the grammar. */
bool al_grammar_complete(const al_grammar *g);
/* ... and nothing can follow it: only an end-of-generation token is allowed. */
bool al_grammar_finished(const al_grammar *g);
/* The sampler picks only tokens g allows (NULL: none); it does not own g and does not
 * advance it: the caller accepts each token it keeps with al_grammar_accept. When the
 * drawn token is not allowed, the sampler draws again from the allowed ones only; it
 * returns -1 when the grammar allows no token at all. */
void al_sampler_set_grammar(al_sampler *s, al_grammar *g);

/* ---- chat templates ---------------------------------------------------------------------
 * A model's tokenizer.chat_template is Jinja. anyllm does not run Jinja: it recognises
 * the common formats from the template's text and renders them in C. Formats:
 * "chatml" (Qwen, SmolLM2), "llama3", "llama2", "mistral", "gemma" (Gemma 1-3),
 * "gemma4", "phi3", "harmony" (gpt-oss), whose replies come on channels (al_harmony
 * below), "glm45" (GLM-4.5 and 4.6) and "glm47" (GLM-4.7, 4.7-Flash). A template
 * that is not recognised is an error, never a guess; a file with no template gets its
 * architecture's built-in format where the family fixes one (al_chat_template_choose).
 * The rendered text holds no BOS (GLM's [gMASK]<sop> is template text, and is there).
 * Generation ends at the format's end-of-turn token (al_vocab_is_eog: <|im_end|>,
 * <|eot_id|>, <end_of_turn>, <turn|>, ...).
 * To feed a model, use al_chat_tokenize: tokenizing the rendered text with
 * parse_special would also turn marker text inside the messages into control tokens,
 * letting a message forge turn boundaries ("<|im_end|>\n<|im_start|>system ..."). */

typedef struct al_chat_message {
    const char *role;    /* "system", "user" or "assistant"; "tool" (a tool's result) for
                            llama3, which writes it in its ipython role */
    const char *content;
} al_chat_message;

/* A message with the parts of tool use, for al_chat_render_turns. Fields not used are
 * NULL: a designated initializer, {.role = "user", .content = "Hi"}, leaves them so. */
typedef struct al_chat_turn {
    const char *role;         /* "system", "user", "assistant" or "tool" (a tool's result) */
    const char *content;      /* the text; NULL means "" (an assistant turn of calls only) */
    const char *tool_calls;   /* assistant: the calls it made, an OpenAI JSON array
                                 [{"id", "function": {"name", "arguments"}}] ("name" and
                                 "arguments" also directly in the call); arguments an object
                                 or a string holding one; NULL: none */
    const char *tool_call_id; /* tool: the id of the call this answers; NULL: the call at
                                 its place among the results after the last calls */
    const char *name;         /* tool: the function that answered; NULL: the answered call's */
    const char *reasoning;    /* assistant: its chain of thought (harmony and gemma4 keep
                                 it for a turn of calls after the last user turn: the
                                 models need it back between calls; glm45 and glm47 for
                                 any turn after the last user turn) */
} al_chat_turn;

typedef struct al_chat_params {
    bool add_generation_prompt; /* end with the assistant's header */
    const char *tools;          /* the functions the model may call: an OpenAI "tools" JSON
                                   array [{"type": "function", "function": {"name",
                                   "description", "parameters"}}]; NULL: none */
} al_chat_params;

/* Generation prompt on, no tools. */
al_chat_params al_chat_default_params(void);

/* The model's tokenizer.chat_template text, or NULL if it has none. Owned by the model. */
const char *al_model_chat_template(const al_model *m);

/* Recognises a Jinja template: *name is one of the format names above (static). */
al_status al_chat_template_detect(const char *tmpl, const char **name);

/* The built-in format of an architecture (al_model_info.arch) whose model files may
 * carry no template: "gemma" for gemma, gemma2 and gemma3, "gemma4" for gemma4,
 * "harmony" for gpt-oss, whose turn formats are fixed by the model family; NULL for the
 * others and for NULL. The name is static. */
const char *al_chat_template_builtin(const char *arch);

/* The format to chat with a model in, from its template (al_model_chat_template, may be
 * NULL) and its architecture (may be NULL): the format recognised in the template when
 * the file has one, else the architecture's built-in format. A template that is present
 * but not recognised stays an error (AL_ERR_UNSUPPORTED, as al_chat_template_detect):
 * the built-in format serves files with none, it is not a guess for the others.
 * AL_ERR_ARG when there is neither. *name is static. */
al_status al_chat_template_choose(const char *tmpl, const char *arch, const char **name);

/* Renders n messages in the named format, then the assistant's header when
 * add_generation_prompt. tmpl, if not NULL, is the model's template: a default system
 * prompt written into it (as SmolLM2's and Qwen's are) is used when the messages have
 * none. On success *out is a NUL-terminated string freed with al_string_free().
 * "harmony" renders what OpenAI's gpt-oss template renders for a plain conversation:
 * always its system message (the model identity and knowledge cutoff the template sets,
 * else OpenAI's; "Reasoning: medium"; the valid channels; no "Current date" line, so a
 * prompt does not change with the day), then each system message as a developer
 * message ("# Instructions\n\n" + text), user turns, and past assistant turns as their
 * final channel (<|start|>assistant<|channel|>final<|message|>TEXT<|end|>); the
 * generation prompt is "<|start|>assistant". */
al_status al_chat_render(const char *name, const char *tmpl, const al_chat_message *msgs,
                         int n, bool add_generation_prompt, char **out);
void al_string_free(char *s);

/* Renders as al_chat_render does and tokenizes the result with add_special (BOS as the
 * file says), where only the template's own markers become control tokens: the text of
 * the messages is tokenized as plain text (user-defined tokens still match, as they do
 * without parse_special). For conversations whose messages hold no control-token text,
 * the ids equal those of al_tokenize on the rendered text with add_special and
 * parse_special set. On success *tokens (freed with al_free_tokens()) holds *n_tokens
 * ids. */
al_status al_chat_tokenize(const al_vocab *v, const char *name, const char *tmpl,
                           const al_chat_message *msgs, int n, bool add_generation_prompt,
                           int32_t **tokens, int *n_tokens);

/* Tool use. al_chat_render_turns renders turns as al_chat_render renders messages (the
 * same text for turns without tool parts), with params (NULL: the defaults); the formats
 * that render tools themselves, because their markup is control tokens, are:
 *   "mistral" (v3 tokenizers' control tokens):
 *     [AVAILABLE_TOOLS][{"type": "function", "function": {...}}, ...][/AVAILABLE_TOOLS]
 *       right before the last user turn's [INST], the tools array as given;
 *     an assistant turn's calls after its text as
 *       [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcdefghi"}, ...]</s>;
 *     a tool result as [TOOL_RESULTS]{"content": "TEXT", "call_id": "abcdefghi"}[/TOOL_RESULTS].
 *     JSON is written as Mistral's tokenizer writes it (json.dumps: ", " and ": "). Call
 *     ids are Mistral's 9 letters or digits: an id that is not one is replaced by one
 *     derived from it (the same for the call and its result), a missing one by one
 *     derived from its place in the conversation.
 *   "harmony" (gpt-oss), as OpenAI's template renders them: the system message adds
 *     "Calls to these tools must go to the commentary channel: 'functions'."; the
 *     developer message holds the instructions (the first system turn), then "# Tools"
 *     and the functions as TypeScript types ("namespace functions { ... }": strings,
 *     numbers, integers as number, booleans, enums as "a" | "b", arrays, objects, the
 *     rest any); each call of an assistant turn is
 *       <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>
 *     after its reasoning (else its text) as <|start|>assistant<|channel|>analysis
 *     <|message|>...<|end|> when no later assistant turn is an answer (the template
 *     drops the chain of thought of finished turns); with both, the text follows as a
 *     commentary message. A result is <|start|>functions.NAME to=assistant<|channel|>
 *     commentary<|message|>"TEXT"<|end|> (the text as a JSON string, as the template).
 *   "gemma4", as Google's Gemma 4 template renders them (google-gemma-4-31B-it.jinja):
 *     the system turn holds the first system message, then each tool as
 *       <|tool>declaration:NAME{description:<|"|>...<|"|>,parameters:{...}}<tool|>
 *     (Gemma's notation: bare keys, strings between <|"|>, keys sorted); an assistant
 *     turn's calls come first, <|tool_call>call:NAME{key:VALUE,...}<tool_call|>, then
 *     the results of the tool messages right after it, each <|tool_response>response:
 *     NAME{value:<|"|>TEXT<|"|>}<tool_response|>, then its text, in one model turn; a
 *     turn of calls with no result yet ends with <|tool_response>, and one with results
 *     and no text stays open for the model to go on. A tool message that does not
 *     follow a turn of calls is AL_ERR_ARG (the template would drop it).
 *   "glm45" and "glm47", as GLM's templates render them: the tools in a system turn of
 *     their own after [gMASK]<sop>, each tool's JSON on a line inside <tools></tools>,
 *     with the call syntax; each call <tool_call>NAME<arg_key>KEY</arg_key><arg_value>
 *     VALUE</arg_value>...</tool_call> (a string value as it is, others as JSON; glm45
 *     puts newlines between the parts); each run of results <|observation|> then
 *     <tool_response>TEXT</tool_response> per result.
 *   "llama3": the "tool" role only (its calls are text: the caller writes them).
 * Other formats give AL_ERR_UNSUPPORTED for tools or a turn's tool parts, never drop
 * them; tools or calls that are not the JSON described give AL_ERR_ARG. */
al_status al_chat_render_turns(const char *name, const char *tmpl, const al_chat_turn *turns,
                               int n, const al_chat_params *params, char **out);

/* al_chat_tokenize for turns: the tools' and calls' text (names, descriptions,
 * arguments, results, ids) is message text, tokenized as plain text; only the format's
 * markers become control tokens. */
al_status al_chat_tokenize_turns(const al_vocab *v, const char *name, const char *tmpl,
                                 const al_chat_turn *turns, int n, const al_chat_params *params,
                                 int32_t **tokens, int *n_tokens);

/* ---- Harmony replies (gpt-oss) -----------------------------------------------------------
 * A model chatting in the "harmony" format writes its reply as messages on channels:
 *   <|channel|>analysis<|message|>reasoning ...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>the answer ...<|return|>
 * al_harmony splits that text, as it streams in, into pieces by channel. What it reads:
 *   - a message is a header, <|message|>, then a body up to <|end|>, <|return|> or
 *     <|call|>; the header names the channel after <|channel|> (the word up to a space
 *     or a marker: "final", "analysis", "commentary"; another name counts as
 *     commentary, none at all as final); <|start|> opens the next message;
 *   - the reply is complete (al_harmony_done) at <|return|> or <|call|>, or when a final
 *     message ends with <|end|>; what follows is ignored;
 *   - text outside any message (at the start, or after an <|end|>) is final text, so a
 *     model that ignores the format still answers: it is released when <|start|>,
 *     <|end|>, <|return|>, <|call|> or al_harmony_finish ends it, or past 256 bytes
 *     (followed by <|channel|> or <|message|> it is a header instead); a header past
 *     256 bytes ends there, the rest being the body of the channel it named;
 *   - a body cut short by <|start|> or <|channel|> ends there; a stray <|message|> or
 *     <|constrain|> in a body is dropped; any other "<|...|>" is text;
 *   - a header's "to=NAME" (at its start or after a space, before or after the
 *     channel: " to=functions.f<|channel|>commentary json", "<|channel|>commentary
 *     to=functions.f <|constrain|>json") names the message's recipient, up to a space or
 *     a marker; every piece of the body carries it. A message to "functions.NAME" is a
 *     call of that function, its body the arguments (JSON); <|call|> ends it and the
 *     reply. <|constrain|> and what follows it in a header (the body's format) are
 *     ignored.
 * How the text is cut into pushes does not change the pieces' text per channel and
 * recipient: a marker split across pushes is held back until it is complete. The markers are
 * control tokens of gpt-oss's vocabulary, which print as nothing: feed generated tokens
 * with al_harmony_push_token, which writes control tokens' text. Not thread-safe; one
 * parser per reply. */

typedef enum al_channel {
    AL_CHANNEL_FINAL,      /* the answer, for the user                                  */
    AL_CHANNEL_ANALYSIS,   /* the chain of thought: not for the user unless asked       */
    AL_CHANNEL_COMMENTARY, /* tool-call preambles, and calls (with a recipient)         */
} al_channel;

typedef struct al_chat_piece {
    al_channel channel;
    const char *text;      /* len bytes, not NUL-terminated */
    size_t len;
    const char *recipient; /* the message's recipient (its header's "to=functions.NAME":
                              "functions.NAME"), recipient_len bytes; NULL when none */
    size_t recipient_len;
} al_chat_piece;

typedef struct al_harmony al_harmony;

/* A parser for one reply. v (may be NULL) is the vocabulary al_harmony_push_token
 * decodes with; the parser does not own it, and it must outlive the parser. */
al_status al_harmony_create(const al_vocab *v, al_harmony **out);
void al_harmony_destroy(al_harmony *h); /* NULL is a no-op */

/* Feeds len bytes of generated text, markers as text. *pieces (may be set to NULL when
 * *n_pieces is 0) lists the text now known, in order, adjacent pieces of one channel and
 * one recipient merged; it is owned by the parser and valid until its next call. AL_ERR_NOMEM leaves
 * the parser unusable. */
al_status al_harmony_push(al_harmony *h, const char *text, size_t len,
                          const al_chat_piece **pieces, int *n_pieces);

/* Feeds one generated token: a control token that is one of Harmony's markers as its
 * text, other control tokens (BOS, <|endoftext|>) as nothing, and any other token
 * through the parser's own streaming detokenizer (al_detok), which holds back an
 * incomplete UTF-8 character. AL_ERR_ARG for an id out of range or a parser made
 * without a vocabulary. Pieces as al_harmony_push. */
al_status al_harmony_push_token(al_harmony *h, int32_t id, const al_chat_piece **pieces,
                                int *n_pieces);

/* The end of the reply (an end-of-generation token, the token limit): releases what was
 * held back (a partial marker is text, and so is a partial character; text outside any
 * message is final text). The parser is then done and ignores what it is given. */
al_status al_harmony_finish(al_harmony *h, const al_chat_piece **pieces, int *n_pieces);

/* True once the reply is complete: generation should stop. */
bool al_harmony_done(const al_harmony *h);

/* ---- Files: quantize and generate ------------------------------------------------------
 * Two ways to write a GGUF model file:
 *   - al_quantize: an F32/F16/BF16 model quantized as llama.cpp's llama-quantize does it
 *     (the same bytes; no importance matrix), every key kept;
 *   - al_gen_model: a model of RANDOM WEIGHTS, FOR BENCHMARKS ONLY, with the real shapes
 *     and hyper-parameters of an architecture and a minimal vocabulary: it loads and
 *     runs wherever a real model of that shape does, so it measures speed and memory,
 *     but its output is noise.
 * Both stream the tensors a chunk of rows at a time on worker threads (memory bounded by
 * the chunk, not the model) and give a file that does not depend on the thread count.
 * The file is written as OUT.partial and renamed at the end: on failure OUT is untouched.
 * Type names are quantization schemes, case-insensitive: "Q8_0", "Q4_K_M", ...
 * (al_quantize_types lists them; "Q4_K" and "Q5_K" mean Q4_K_M and Q5_K_M, as in
 * llama.cpp). */

/* The schemes, for usage messages: returns how many; fills names[0 .. min(count, max))
 * with each name and help (either may be NULL) with a one-line description of it
 * (static strings). */
int al_quantize_types(const char **names, const char **help, int max);

/* Sent to al_quantize_params.progress once per tensor, after it is written. */
typedef struct al_quantize_progress {
    int index, count;        /* this is tensor index (from 1) of count */
    const char *name;        /* the tensor's; valid during the call */
    const char *from_type;   /* the tensor's type in the input, e.g. "F16" (static) */
    const char *to_type;     /* its type in the output, e.g. "Q4_K" (static) */
    int n_dims;              /* dimensions up to the last above 1 */
    int64_t ne[4];           /* elements per dimension, ne[0] the row */
    uint64_t from_bytes, to_bytes;
    bool fell_back;          /* the scheme's type does not divide ne[0] into blocks: the
                                tensor has llama.cpp's fallback type instead */
} al_quantize_progress;

typedef struct al_quantize_params {
    const char *type;        /* the scheme; required (NULL in the defaults) */
    int n_threads;           /* 0 = number of cores */
    bool pure;               /* every weight matrix in the scheme's type: no Q6_K output,
                                no per-layer mix */
    /* Called on the calling thread after each tensor; NULL: none. */
    void (*progress)(void *user, const al_quantize_progress *p);
    void *progress_user;
} al_quantize_params;

typedef struct al_quantize_report {
    const char *type;        /* the scheme's own name ("Q4_K_M" for "q4_k"; static) */
    uint64_t in_bytes, out_bytes; /* tensor data read and written */
    int n_tensors, n_quantized, n_fallback; /* tensors; those whose type changed; those
                                               that fell back */
    int n_threads;           /* the threads used */
} al_quantize_report;

al_quantize_params al_quantize_default_params(void);

/* Reads in_path (a GGUF whose tensors are F32, F16 or BF16) and writes out_path: every
 * key kept but split.*, general.file_type and general.quantization_version set, the
 * tensors in llama.cpp's order (by layer, then by name) with the types the scheme gives
 * them. *report (may be NULL) is zeroed on failure. AL_ERR_ARG for a NULL path or
 * params, an unknown type (named, with the known ones) or out_path the same file as
 * in_path; AL_ERR_UNSUPPORTED for an input already quantized. */
al_status al_quantize(const char *in_path, const char *out_path, const al_quantize_params *p,
                      al_quantize_report *report);

/* The architectures al_gen_model writes ("llama, qwen2, ..."), into buf (size bytes,
 * NUL-terminated, cut short where it does not fit); returns buf, or "" for a NULL buf. */
const char *al_gen_arch_names(char *buf, size_t size);

/* A model to generate. Sizes of 0 take the default said; the others are required. */
typedef struct al_gen_params {
    const char *arch;        /* general.architecture, one of al_gen_arch_names */
    const char *type;        /* the scheme, as al_quantize_params.type */
    int dim;                 /* embedding length, in [1, 65536] */
    int layers;              /* blocks, in [1, 1024] */
    int heads, kv_heads;     /* query and key/value heads, in [1, 1024]; kv_heads divides
                                heads */
    int head_dim;            /* even, in [2, 4096]; 0: dim / heads, which must be even */
    int ffn;                 /* feed-forward width, in [1, 262144] */
    int vocab;               /* tokens, in [259, 4194304]: <unk>, <s>, </s>, the 256 byte
                                tokens, then filler words */
    int ctx;                 /* training context, in [1, 16777216]; 0: 4096 */
    uint64_t seed;           /* of the weights: any value, 0 included (the defaults: 1) */
    int n_threads;           /* in [1, 256]; 0 = number of cores */
    int swa;                 /* sliding window of an architecture that has one, in
                                [1, 1048576]; 0: 512 */
    /* a mixture of experts (qwen3moe, gpt-oss, ...) needs all three, the others none:
     * experts (in [1, 4096]), experts_used per token (at most experts), and the width of
     * one expert's FFN (in [1, 262144]) */
    int experts, experts_used, ffn_exp;
    int yarn;                /* YaRN rope scaling by this factor over ctx, in [1, 1024];
                                0: none */
    /* hybrid architectures (qwen35, qwen3next, ...) only, 0 for the defaults that follow
     * Qwen3.6-35B-A3B's proportions: the convolution's taps (in [2, 16]; 4), a delta-net
     * head's size (in [2, 512]; dim / 8 up to 128), its value heads (in [1, 1024];
     * 2 dim / ssm_state) and key heads (in [1, 1024], dividing ssm_heads; ssm_heads / 2
     * when even), one full-attention layer in full_attn_interval (in [1, 1024]; 4) and
     * mtp next-token-prediction blocks after the trunk's (in [1, 4]; 0: none) */
    int ssm_conv, ssm_state, ssm_heads, ssm_groups, full_attn_interval, mtp;
    bool ssm_split;          /* qwen3next: attn_qkv + attn_gate, not the older ssm_in */
    /* latent attention (deepseek2) only: head_dim is a query head before absorption, of
     * which a third (even) rotates and the rest sizes a value head; kv_lora is the
     * cached latent vector (in [1, dim]; 0: 4 value heads' worth); q_lora > 0 (in
     * [1, dim]) gives the low-rank query and DeepSeek-V3's router (sigmoid scores plus a
     * bias, experts in 4 groups of which 2 are used, where experts divide by 4), 0 one
     * query matrix and DeepSeek-V2-Lite's (softmax) */
    int q_lora, kv_lora;
    /* gemma4 only, 0 for the defaults: the sliding layers' head size (head_dim / 2),
     * one global layer in swa_period (the architecture's: 6), the last shared_kv
     * layers reading earlier layers' caches (none; the two layers before them must be
     * a sliding and a global one, and their feed-forward is twice as wide), and per-
     * layer inputs of width ple (none) */
    int head_dim_swa, swa_period, shared_kv, ple;
    double rope_base;        /* in (0, 1e12); 0: the architecture's */
    bool tied;               /* no output.weight: the embeddings are the output */
    bool pure;               /* as al_quantize_params.pure */
    /* Called on the calling thread as each block's tensors are written, with the blocks
     * done and their count (layers + mtp); NULL: none. */
    void (*progress)(void *user, int done, int count);
    void *progress_user;
} al_gen_params;

typedef struct al_gen_report {
    const char *type;        /* the scheme's own name (static) */
    uint64_t n_params;       /* elements over all tensors */
    uint64_t n_bytes;        /* bytes of tensor data */
    int n_tensors, n_fallback; /* tensors; those in llama.cpp's fallback type */
    int n_threads;           /* the threads used */
} al_gen_report;

/* All zero but ctx 4096 and seed 1: arch, type and the required sizes are to be set. */
al_gen_params al_gen_default_params(void);

/* Writes a model of random weights to out_path: real shapes and hyper-parameters,
 * general.name "anyllm random benchmark model", norms of ones, weights ~ N(0, 0.02)-like,
 * quantized as the scheme says. Every row depends only on the seed, the tensor and the
 * row: the file is the same for a seed whatever n_threads. *report (may be NULL) is
 * zeroed on failure. AL_ERR_ARG for a NULL path or params, an unknown arch or type, a
 * size out of its range and sizes that do not fit together, naming the fields and
 * values (e.g. "heads 6 is not a multiple of kv_heads 4"). */
al_status al_gen_model(const char *out_path, const al_gen_params *p, al_gen_report *report);

#ifdef __cplusplus
}
#endif
#endif /* AL_ANYLLM_H */
