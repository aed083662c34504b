/* vk.h: the Vulkan backend's internal interface, shared by the files of src/vulkan.
 *
 *   device.c     loads libvulkan at run time, creates the instance (with the
 *                validation messenger when asked), picks and opens a device, lists
 *                devices for `anyllm devices`
 *   memory.c     buffers: device-local, host-visible, imported host memory; weight
 *                upload (import, staging copy or host copy); tensor storage
 *   pipelines.c  the embedded SPIR-V, layouts, compute pipelines and their sizes
 *   stream.c     the command stream: one command buffer per forward pass, barriers
 *                from tracked hazards, descriptor pool, upload arena, submit and
 *                wait; one stream per backend object, so one per context
 *   ops.c        every op, recorded into the calling backend's stream
 *   moe.c        moe_ffn: a mixture's routed experts for a few tokens, 3 dispatches
 *   recurrent.c  the recurrences of gated delta-net layers: ssm_conv, delta_net
 *   vk_backend.c the al_backend_ops table, the backend objects (the model's, which
 *                owns the device and weights, and one per context), load-time
 *                capability checks, reports
 *   push.h       the push-constant blocks the shaders mirror (push_moe.h: moe.c's)
 *   shaders/     one .comp per op; dequant.glsl reads every weight type
 *
 * Nothing links against libvulkan: the loader is opened with dlopen and every entry
 * point is fetched through vkGetInstanceProcAddr / vkGetDeviceProcAddr into vk_fns,
 * so the same binary runs where Vulkan is absent.
 *
 * Errors inside the ops (which return nothing, see backend.h) are kept in the stream
 * as a sticky status: the first failure is remembered, later ops are skipped, and
 * the `sync` op returns it.
 *
 * Threads: a model's backend and its contexts' backends share one vk_shared (device,
 * pipelines, weights) and each has its own vk_stream, so contexts on different
 * threads record and submit independently. What they share is either read-only after
 * load or guarded: the queue (vk_device.queue_lock: vkQueueSubmit needs external
 * synchronization), the lazily made pipelines (vk_pipelines.lock), the counters
 * (atomics).
 */
#ifndef AL_VK_H
#define AL_VK_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <vulkan/vulkan.h>

#include "backend.h"
#include "format/quant.h"

/* Rows of attention_rows one dispatch takes: al_eval_multi's step of n sequences is
 * ceil(n / VK_SEQ_ROWS) attention dispatches per layer. */
enum { VK_SEQ_ROWS = 8 };

/* ---- entry points ----------------------------------------------------------------- */

#define VK_GLOBAL_FNS(X)                                                                  \
    X(vkCreateInstance) X(vkEnumerateInstanceExtensionProperties)                        \
    X(vkEnumerateInstanceLayerProperties) X(vkEnumerateInstanceVersion)

#define VK_INSTANCE_FNS(X)                                                                \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)   \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                    \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceQueueFamilyProperties)   \
    X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)

/* from VK_EXT_debug_utils: NULL when the extension is not enabled */
#define VK_DEBUG_FNS(X) X(vkCreateDebugUtilsMessengerEXT) X(vkDestroyDebugUtilsMessengerEXT)

/* from VK_NV_cooperative_matrix: NULL where the loader does not know it */
#define VK_COOPMAT_FNS(X) X(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)

#define VK_DEVICE_FNS(X)                                                                  \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle)                            \
    X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)                 \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory)             \
    X(vkCreateShaderModule) X(vkDestroyShaderModule)                                      \
    X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout)                        \
    X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                                  \
    X(vkCreateComputePipelines) X(vkDestroyPipeline)                                      \
    X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkResetDescriptorPool)         \
    X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets)                                 \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers)            \
    X(vkResetCommandBuffer) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)                 \
    X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants)                 \
    X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer)        \
    X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)                \
    X(vkGetFenceStatus) X(vkQueueSubmit)                                                  \
    X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdResetQueryPool)                     \
    X(vkCmdWriteTimestamp) X(vkGetQueryPoolResults)

/* from VK_EXT_external_memory_host: NULL when not enabled */
#define VK_HOST_IMPORT_FNS(X) X(vkGetMemoryHostPointerPropertiesEXT)

#define VK_DECLARE_FN(name) PFN_##name name;
typedef struct vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    VK_GLOBAL_FNS(VK_DECLARE_FN)
    VK_INSTANCE_FNS(VK_DECLARE_FN)
    VK_DEBUG_FNS(VK_DECLARE_FN)
    VK_COOPMAT_FNS(VK_DECLARE_FN)
    VK_DEVICE_FNS(VK_DECLARE_FN)
    VK_HOST_IMPORT_FNS(VK_DECLARE_FN)
} vk_fns;
#undef VK_DECLARE_FN

/* ---- the device ------------------------------------------------------------------- */

/* What the backend needs to know about a physical device, read once. */
typedef struct vk_caps {
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    char driver[VK_MAX_DRIVER_NAME_SIZE + VK_MAX_DRIVER_INFO_SIZE + 4];
    VkPhysicalDeviceType type;
    uint32_t api_version, driver_version, vendor_id;
    uint64_t max_range;        /* maxStorageBufferRange, capped so uint offsets fit */
    uint64_t max_alloc;        /* maxMemoryAllocationSize */
    uint64_t align;            /* minStorageBufferOffsetAlignment */
    uint32_t max_groups[3];    /* maxComputeWorkGroupCount */
    uint32_t max_wg;           /* maxComputeWorkGroupInvocations */
    uint32_t shared_bytes;     /* maxComputeSharedMemorySize */
    uint32_t subgroup_size;
    bool subgroup_arith;       /* subgroup add/max in compute shaders */
    bool subgroup_shuffle;     /* subgroupShuffle in compute shaders */
    bool dyn_index;            /* shaderStorageBufferArrayDynamicIndexing: the MULTI builds */
    uint32_t max_ssbo;         /* storage buffers a set and a stage may have (the lower) */
    uint32_t max_ubo_range;    /* maxUniformBufferRange */
    bool storage16;            /* storageBuffer16BitAccess: needed by every weight read */
    bool fp16, int8, int8_dot; /* shaderFloat16, shaderInt8, accelerated 4x8-bit dot */
    /* VK_NV_cooperative_matrix with 16 x 16 x 16 fp16 blocks summed in fp32 by a
     * subgroup of 32, fp16 arithmetic and the Vulkan memory model: matmul_cm.comp */
    bool coopmat;
    bool uma;                  /* one memory serves host and device: no upload needed */
    bool host_import;          /* VK_EXT_external_memory_host */
    uint64_t import_align;     /* minImportedHostPointerAlignment */
    bool debug_utils;          /* the instance has VK_EXT_debug_utils */
    float ts_period;           /* timestampPeriod: nanoseconds per timestamp tick */
    VkPhysicalDeviceMemoryProperties mem;
} vk_caps;

typedef struct vk_device {
    void *lib;                 /* dlopen handle of libvulkan */
    vk_fns fn;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    atomic_int n_validation;   /* validation errors and warnings seen */
    VkPhysicalDevice pdev;
    vk_caps caps;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    uint32_t ts_bits;          /* the queue's timestampValidBits; 0: no timestamps */
    pthread_mutex_t queue_lock; /* held around vkQueueSubmit: streams of many threads */
    bool has_queue_lock;
} vk_device;

/* Opens the loader and creates an instance, as al_set_vulkan_instance last said: with
 * validation on, the Khronos validation layer is enabled when present and its messages
 * are counted. */
al_status vk_instance_create(vk_device *d);
/* Physical devices in preference order (discrete, integrated, virtual, CPU): index N
 * of "vulkan:N". *n is set to the count; devs may be NULL to count only. */
al_status vk_physical_devices(vk_device *d, VkPhysicalDevice *devs, uint32_t *n);
void vk_read_caps(vk_device *d, VkPhysicalDevice pdev, vk_caps *c);
/* Creates the logical device and queue on d->pdev, enabling what the backend uses. */
al_status vk_device_open(vk_device *d);
/* Waits for nothing: the caller makes sure the device is idle. d may be half built. */
void vk_device_close(vk_device *d);
/* Name of a VkResult for messages. */
const char *vk_result_str(VkResult r);

/* ---- buffers (memory.c) ---------------------------------------------------------- */

typedef enum vk_buf_kind {
    VK_BUF_DEVICE,   /* device-local, not mapped */
    VK_BUF_HOST,     /* host-visible and coherent, mapped */
    VK_BUF_IMPORTED, /* host memory imported with VK_EXT_external_memory_host */
} vk_buf_kind;

/* One VkBuffer with its own memory. al_tensor.data points at one of these. */
typedef struct vk_buf {
    VkBuffer buffer;
    VkDeviceMemory memory;
    uint64_t size;
    void *mapped;            /* host address of byte 0, or NULL */
    bool host_cached;        /* mapped memory the host reads at full speed (cached) */
    vk_buf_kind kind;
    const void *host_base;   /* VK_BUF_IMPORTED: the host address of byte 0 */
} vk_buf;

typedef struct vk_backend vk_backend;

al_status vk_buf_create(vk_device *d, uint64_t size, vk_buf_kind kind, vk_buf **out);
/* Imports [ptr, ptr + size) of host memory, both aligned to caps.import_align. */
al_status vk_buf_import(vk_device *d, void *ptr, uint64_t size, vk_buf **out);
void vk_buf_destroy(vk_device *d, vk_buf *b);

/* ---- pipelines (pipelines.c) ---------------------------------------------------- */

typedef enum vk_op {
    VK_OP_ADD, VK_OP_ADD_ROWS, VK_OP_SILU_MUL, VK_OP_GELU_MUL, VK_OP_SWIGLU_OAI, VK_OP_SCALE, VK_OP_RMS_NORM,
    VK_OP_ROPE, VK_OP_ATTENTION, VK_OP_ATTENTION_ROWS, VK_OP_GET_ROWS, VK_OP_MATVEC, VK_OP_MATMUL,
    VK_OP_MATMUL_CM, VK_OP_MATMUL_CM_EMU, /* matmul on cooperative matrices; emulated */
    VK_OP_MATMUL_ROWS,
    VK_OP_MATVEC_GLU, VK_OP_MATMUL_ROWS_GLU, /* the GLU builds: gate and up in one dispatch */
    VK_OP_MATVEC_MULTI, VK_OP_MATMUL_ROWS_MULTI, /* the MULTI builds: matmul_multi */
    VK_OP_COPY,
    VK_OP_MOE_MV, VK_OP_MOE_MV_GLU, VK_OP_MOE_ROWS, VK_OP_MOE_ROWS_GLU, VK_OP_MOE_SUM, /* moe.c */
    VK_OP_SIGMOID_MUL, VK_OP_SSM_CONV, /* qwen35's gate; the recurrent layers' (recurrent.c) */
    VK_OP_DELTA_NET, VK_OP_DELTA_NET_SG, /* delta_net: a lane per row; rows over shuffles */
    /* typed KV caches (kv_types): the attention builds that read them, the rows into them */
    VK_OP_ATTENTION_KV, VK_OP_ATTENTION_ROWS_KV, VK_OP_KV_WRITE,
    VK_OP_COUNT
} vk_op;

enum { VK_MAX_BINDINGS = 9, VK_PUSH_BYTES = 128 }; /* attention_rows: 9 */
/* A binding of a MULTI build is an array of VK_MULTI buffers (weights, biases, outputs:
 * one per weight of matmul_multi); attention_rows binds the caches of VK_SEQ sequences
 * (attention.comp says it again) as two arrays. A set holds up to VK_MAX_DESCRIPTORS. */
enum { VK_MULTI = AL_MULTI_MAX, VK_SEQ = VK_SEQ_ROWS, VK_ROWS_DESCRIPTORS = 7 + 2 * VK_SEQ };
enum { VK_MAX_DESCRIPTORS = VK_ROWS_DESCRIPTORS > 1 + 3 * VK_MULTI + 1 ? VK_ROWS_DESCRIPTORS
                                                                        : 1 + 3 * VK_MULTI + 1 };

/* Builds of one op and type that differ in specialization constants: matvec has
 * one per token count 1, 2, 4, 8 (variant = log2), matmul_rows per 1, 4, 16. */
/* Attention's wide build (variant 1 of the attention ops and kv_write): heads beyond
 * the tuning's attn_max_hd up to this, latent attention's cached rows (kv_lora_rank
 * 512 plus 64 rope); the narrow build keeps its registers for the common sizes. */
enum { VK_ATTN_WIDE_HD = 576 };
enum { VK_VARIANTS = 8 }; /* matvec's GLU and MULTI builds: + 4 with the input norm */

typedef struct vk_pipeline {
    VkPipeline pipeline;
    int n_bindings;
    uint32_t wg;             /* invocations per workgroup */
} vk_pipeline;

/* Sizes given to the shaders as specialization constants. Defaults depend on the
 * device; vulkan.tune = "mv_wg=64,mv_nr=2,mm_bm=64,..." (the CLI's ANYLLM_VK_TUNE)
 * overrides them (tuning). */
typedef struct vk_tuning {
    uint32_t ew_wg;                       /* add, silu_mul, gelu_mul, swiglu_oai, scale */
    uint32_t norm_wg, rope_wg, rows_wg;   /* rms_norm, rope, get_rows */
    uint32_t attn_wg, attn_max_hd;        /* attention: positions per step, head_dim bound */
    uint32_t attn_rows_wg;                /* attention_rows (decoding): positions per step */
    uint32_t mv_wg, mv_nr;                /* matvec: invocations, rows per workgroup */
    uint32_t cpu_rows;                    /* 1: every matmul by matmul_rows (CPU devices) */
    uint32_t mr_wg;                       /* matmul_rows: rows per workgroup */
    uint32_t mr_sg;                       /* matmul_rows: the subgroup size it assumes */
    uint32_t mm_bm, mm_bn, mm_tm, mm_tn;  /* matmul: tile and per-invocation block (tm, tn: x 4) */
    uint32_t mv_max_tok;                  /* matvec up to this many tokens, then matmul */
    uint32_t fuse;                        /* 0: the fused ops decline (A/B measurements) */
    uint32_t fuse_norm;                   /* 0: the input norms run alone (A/B of that fusion) */
    uint32_t fuse_attn;                   /* 0: attention_rows declines (A/B of that fusion) */
    uint32_t chunk;                       /* > 0: submit every chunk dispatches (stream.c) */
    uint32_t coopmat;                     /* 1: prompts' matmuls by matmul_cm where the
                                           * device has it (caps.coopmat), else 0; 2:
                                           * its emulation on any device (tests) */
    uint32_t cm_bm, cm_bn;                /* matmul_cm: tile (multiples of 32, <= 128) */
    uint32_t dn_wg;                       /* delta_net: invocations per workgroup */
    uint32_t dn_lanes;                    /* delta_net: lanes per state row (1: no shuffles) */
} vk_tuning;

/* The attention ops' build for heads of head_dim: the wide one (1) beyond the tuning's
 * bound. */
static inline int vk_attn_variant(const vk_tuning *t, int head_dim) {
    return (uint32_t)head_dim > t->attn_max_hd ? 1 : 0;
}
/* attention.comp's shared memory in bytes for workgroups of wg and heads up to max_hd:
 * ps and red_, qs and ks (os in the KV builds), each team's softmax (teams of 64). */
static inline uint64_t vk_attn_shared(uint32_t wg, uint32_t max_hd) {
    const uint64_t n_team = wg > 64 ? wg / 64 : 1;
    return (2ull * wg + 3ull * max_hd + n_team * (max_hd + 2ull)) * 4;
}

/* The op of a prompt's matmul on a GPU (not cpu_rows): matmul.comp, or matmul_cm.comp
 * on cooperative matrices or their emulation. */
static inline vk_op vk_prompt_matmul(const vk_tuning *t) {
    return t->coopmat == 2 ? VK_OP_MATMUL_CM_EMU : t->coopmat ? VK_OP_MATMUL_CM : VK_OP_MATMUL;
}

typedef struct vk_pipelines {
    vk_tuning tune;
    bool use_subgroup;                    /* the *_sg builds: subgroup arithmetic */
    VkDescriptorSetLayout set_layout[VK_OP_COUNT];
    VkPipelineLayout layout[VK_OP_COUNT];
    /* untyped ops use [op][0]; the weight ops are indexed by al_type */
    vk_pipeline pipe[VK_OP_COUNT][AL_TYPE_COUNT][VK_VARIANTS];
    pthread_mutex_t lock; /* pipelines are made on first use, by any context's thread */
    bool has_lock;
} vk_pipelines;

/* Layouts and tuning; pipelines are made on first use by vk_pipeline_get. */
al_status vk_pipelines_init(vk_device *d, vk_pipelines *pl, const al_vulkan_settings *s);
/* AL_ERR_ARG, naming vulkan.tune, unless spec (NULL: none) is a tuning string that
 * vk_pipelines_init reads: known keys, values 0..4096. Sizes are checked there. */
al_status vk_tune_check(const char *spec);
/* Creates the pipeline of an op (type: the weight type of get_rows / matvec / matmul,
 * else ignored; variant < VK_VARIANTS, see above) unless it exists.
 * AL_ERR_UNSUPPORTED for a type without shaders. */
al_status vk_pipeline_get(vk_device *d, vk_pipelines *pl, vk_op op, uint32_t type, int variant,
                          const vk_pipeline **out);
/* The descriptor type of binding i of op's shader (a few are uniform buffers). */
VkDescriptorType vk_binding_type(vk_op op, int i);
/* The descriptors binding i of op's shader holds: VK_MULTI or VK_SEQ for the arrays,
 * else 1. */
uint32_t vk_binding_count(vk_op op, int i);
/* true if the weight ops have shaders for this type */
bool vk_type_supported(uint32_t type);
/* Pipeline builds as one index, for per-build counters: VK_PIPELINE_KINDS of them. */
enum { VK_PIPELINE_KINDS = VK_OP_COUNT * AL_TYPE_COUNT * VK_VARIANTS };
int vk_pipeline_kind(vk_op op, uint32_t type, int variant);
/* The build's name, as its shader's, with the variant after a dot: "matvec_q4_0_sg.1". */
void vk_pipeline_kind_name(const vk_pipelines *pl, int kind, char *out, size_t n);
void vk_pipelines_destroy(vk_device *d, vk_pipelines *pl);

/* ---- the backend object ----------------------------------------------------------- */

/* How weights reach the device (vulkan.weights forces one, for tests). */
typedef enum vk_weight_mode {
    VK_WEIGHTS_IMPORT,  /* UMA: import the file mapping, no copy */
    VK_WEIGHTS_HOST,    /* UMA without import: copy into host-visible memory */
    VK_WEIGHTS_STAGING, /* discrete: copy through a staging buffer to device-local memory */
} vk_weight_mode;

/* What one model's backends share: the device, the pipelines and the weights. Made
 * by vk_backend_create, destroyed with that backend (the model's) after every
 * context's backend is gone. Read-only while contexts run, except the counters and
 * what the locks of vk_device and vk_pipelines guard. */
typedef struct vk_prof_entry {
    _Atomic uint64_t n, ns; /* dispatches timed, their device nanoseconds */
} vk_prof_entry;

typedef struct vk_shared {
    vk_device d;
    vk_pipelines pl;
    vk_weight_mode weight_mode;
    /* buffers made by weight_load (at load time, on one thread), freed with the model */
    vk_buf **weights;
    int n_weights, cap_weights;
    uint64_t max_weight_bytes; /* tests (vulkan.max_weight_bytes): a device this small;
                                * 0 = no limit */
    atomic_bool in_flight;     /* a stream timed out: the device may still run its work,
                                * so device, pipelines and weights are never destroyed */
    /* for reports */
    uint64_t bytes_imported;   /* copied bytes: the model backend's base.n_bytes_copied */
    double load_s;
    _Atomic uint64_t n_submits, n_dispatches; /* over every stream */
    _Atomic uint64_t n_kv_copies;              /* copy commands into the KV caches */
    /* where a submission's time goes (stream.c: vk_submit_wait), over every stream */
    _Atomic uint64_t record_ns;  /* host: from the first command recorded to the submit */
    _Atomic uint64_t wait_ns;    /* host: from the submit to the fence */
    _Atomic uint64_t gpu_ns;     /* device: from the first command to the last, by the
                                  * queue's timestamps, where it has them */
    _Atomic uint64_t n_timed;    /* submissions with gpu_ns */
    /* vulkan.profile (ANYLLM_VK_PROFILE=1): each dispatch between two timestamps, its
     * device time summed per pipeline build (vk_pipeline_kind); NULL when not asked for */
    vk_prof_entry *prof;
} vk_shared;

/* The types of KV cache the attention ops read besides f32 (al_backend_ops.kv_types). */
#define VK_KV_TYPES ((1u << AL_TYPE_F16) | (1u << AL_TYPE_Q8_0) | (1u << AL_TYPE_Q4_0))

/* Buffers one barrier interval tracks: more than any command declares (attention_rows:
 * 4 reads, 17 writes) */
enum { VK_MAX_HAZARDS = 32 };

/* A command stream (stream.c): everything needed to record and submit work, owned by
 * one backend object, so that two contexts on two threads never touch the same
 * command buffer, descriptor pool, hazard list or scratch. The model's backend has
 * one (weight uploads, the op tests) and every context's backend has its own. */
/* The last rope table of a stream (ops.c): rows at pos0 + t, or (by_pos) at pos[t],
 * kept for up to VK_ROPE_POS rows (rope_qk_rows). */
enum { VK_ROPE_POS = 64 };
typedef struct vk_rope_cache {
    int pos0, n_rows;
    al_rope rope;
    uint64_t offset; /* in the upload arena */
    bool valid, by_pos;
    int32_t pos[VK_ROPE_POS];
} vk_rope_cache;

enum { VK_MAX_SETS = 1024 }; /* dispatches per submission: a descriptor set each */
enum { VK_CHUNKS = 8 };       /* command buffers of one submission (vk_tuning.chunk) */

typedef struct vk_stream {
    /* recording: one command buffer, submitted when the host needs results; with
     * vk_tuning.chunk, up to VK_CHUNKS of them, all but the last submitted as soon as
     * they hold chunk dispatches, so that the device runs them while the host records
     * the rest. cmd: the one being recorded, cmds[n_cmds - 1] */
    VkCommandPool cmd_pool;
    VkCommandBuffer cmd;
    VkCommandBuffer cmds[VK_CHUNKS];
    int n_cmds;
    uint32_t chunk_sets;          /* dispatches recorded into cmd */
    VkFence fence;
    VkDescriptorPool desc_pool;
    VkQueryPool ts_pool;          /* two timestamps per submission; VK_NULL_HANDLE: none */
    VkQueryPool prof_pool;        /* sh->prof: two per dispatch, before and after it */
    uint16_t prof_kind[VK_MAX_SETS]; /* sh->prof: the pipeline of dispatch i (n_sets) */
    double t_begin;               /* al_time_s() when the recording began */
    uint32_t n_sets;              /* descriptor sets taken from desc_pool */
    bool recording;
    bool in_flight;               /* a submission timed out: its resources stay alive */
    uint64_t timeout_ns;          /* fence waits give up after this */
    /* buffers read / written since the last barrier (see stream.c: hazards); those from
     * cmd_reads / cmd_writes on belong to the command not yet recorded */
    VkBuffer reads[VK_MAX_HAZARDS], writes[VK_MAX_HAZARDS];
    int n_reads, n_writes, cmd_reads, cmd_writes;

    /* host-visible arena for small per-op inputs (token ids, rope tables), reset at
     * each submit */
    vk_buf *upload;
    uint64_t upload_used;
    vk_rope_cache rope_cache;
    vk_buf *staging;              /* weight upload and read-back on discrete devices */
    vk_buf *scratch;              /* matmul_rows: inputs packed in uniform-buffer slices */

    al_status failed;             /* sticky: the first failure of an op on this stream */
    char fail_msg[256];
} vk_stream;

/* The object behind al_backend: the model's (owns sh) or a context's (borrows it). */
struct vk_backend {
    al_backend base;
    vk_shared *sh;
    bool owns_shared;
    vk_stream s;
};

/* Records the first failure of be's stream (later ones are dropped) and returns its
 * status. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
al_status vk_fail(vk_backend *be, al_status st, const char *fmt, ...);

/* ---- the command stream (stream.c) ------------------------------------------------ */

/* Creates be's stream on be->sh's device. Its fence timeout is the creator's to set:
 * vulkan.timeout_ms (< 0: VK_DEFAULT_TIMEOUT_MS) for a model's, the model's for a
 * context's. */
al_status vk_stream_init(vk_backend *be);
enum { VK_DEFAULT_TIMEOUT_MS = 600000 }; /* lavapipe runs a 1B prompt in minutes */
/* Frees the stream's objects unless a submission of it timed out. */
void vk_stream_destroy(vk_backend *be);
/* Makes room for n_dispatch dispatches and upload_bytes of uploads in the current
 * command buffer (submitting the full one first) and starts recording. false if the
 * stream has failed. */
bool vk_begin(vk_backend *be, int n_dispatch, uint64_t upload_bytes);
/* Ends, submits and waits for the command buffer, if one is recording. */
al_status vk_submit_wait(vk_backend *be);
/* Declares that the next command reads (write = false) or writes buf, inserting a
 * barrier first if an earlier command since the last barrier conflicts. Every command
 * declares what it touches, and vk_recorded follows its recording. */
void vk_hazard(vk_backend *be, const vk_buf *buf, bool write);
/* The command whose hazards were declared is recorded: later declarations are the next
 * command's. */
void vk_recorded(vk_backend *be);
/* Count a recorded dispatch, a copy into a KV cache, for reports. */
void vk_count_dispatch(vk_backend *be);
/* sh->prof: a timestamp before (after false) or after the dispatch that took the
 * stream's last descriptor set, which runs pipeline build kind (vk_pipeline_kind) */
void vk_prof_mark(vk_backend *be, bool after, int kind);
void vk_count_kv_copy(vk_backend *be);

/* ---- recording (ops.c) ------------------------------------------------------------ */

/* The scratch of matmul_rows (CPU devices) for rows of up to max_cols inputs. */
al_status vk_scratch_reserve(vk_backend *be, int64_t max_cols, int64_t max_ctx);

void vk_op_get_rows(al_backend *be, const al_tensor *table, const int32_t *ids, int n,
                    al_tensor *out);
void vk_op_rms_norm(al_backend *be, const al_tensor *x, const al_tensor *w, float eps,
                    al_tensor *out);
void vk_op_matmul(al_backend *be, const al_tensor *x, const al_tensor *w,
                  const al_tensor *bias, al_tensor *out);
void vk_op_rope(al_backend *be, al_tensor *x, int n_head, int head_dim, int pos0,
                const al_rope *rope);
void vk_op_attention(al_backend *be, const al_tensor *q, const al_tensor *k,
                     const al_tensor *v, al_tensor *k_cache, al_tensor *v_cache,
                     const al_attn_shape *shape, al_tensor *out);
bool vk_op_attention_rows(al_backend *be, al_tensor *q, al_tensor *k, const al_tensor *v,
                          al_tensor *const *k_cache, al_tensor *const *v_cache,
                          const int32_t *pos, const al_rope *rope, const al_attn_shape *shape,
                          al_tensor *out);
void vk_op_silu_mul(al_backend *be, al_tensor *g, const al_tensor *u);
void vk_op_gelu_mul(al_backend *be, al_tensor *g, const al_tensor *u);
void vk_op_swiglu_oai(al_backend *be, al_tensor *g, const al_tensor *u, float alpha, float limit);
void vk_op_scale(al_backend *be, al_tensor *x, float s);
void vk_op_add_rows(al_backend *be, al_tensor *x, const al_tensor *y, const int32_t *ids,
                    const float *w, int n);
/* Records d = s over n bytes (a multiple of 16) with copy.comp. */
void vk_copy_shader(vk_backend *be, const vk_buf *s, vk_buf *d, uint64_t n);
void vk_op_add(al_backend *be, al_tensor *x, const al_tensor *y);
void vk_op_copy(al_backend *be, const al_tensor *src, al_tensor *dst);
bool vk_op_matmul_add(al_backend *be, const al_tensor *x, const al_tensor *w,
                      const al_tensor *bias, al_tensor *out);
bool vk_op_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *wg,
                      const al_tensor *wu, al_glu act, al_tensor *out);
bool vk_op_rope_qk(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                   int head_dim, int pos0, const al_rope *rope);
bool vk_op_rope_qk_rows(al_backend *be, al_tensor *q, int n_head, al_tensor *k, int n_head_kv,
                        int head_dim, const int32_t *pos, const al_rope *rope);
bool vk_op_norm_matmul_glu(al_backend *be, const al_tensor *x, const al_tensor *norm,
                           float eps, const al_tensor *wg, const al_tensor *wu, al_glu act,
                           al_tensor *out);
bool vk_op_matmul_multi(al_backend *be, const al_tensor *x, const al_tensor *norm, float eps,
                        int n, const al_tensor *const *w, const al_tensor *const *bias,
                        al_tensor *const *out);

/* The dispatch helpers of ops.c, for ops recorded in other files: an upload into the
 * arena (room made by vk_begin), a binding of [offset, offset + n) of b or of an f32
 * tensor (returns the offset inside it, bytes or floats), one dispatch. */
uint64_t vk_upload(vk_backend *be, const void *src, uint64_t n);
uint32_t vk_bind(const vk_backend *be, VkDescriptorBufferInfo *info, const vk_buf *b,
                 uint64_t offset, uint64_t n);
uint32_t vk_bind_f32(const vk_backend *be, VkDescriptorBufferInfo *info, const al_tensor *t,
                     uint32_t *stride);
void vk_dispatch(vk_backend *be, vk_op op, uint32_t type, int variant,
                 const VkDescriptorBufferInfo *infos, const void *push, uint32_t push_bytes,
                 uint64_t groups_x, uint32_t groups_y);

/* ---- the recurrent layers' ops (recurrent.c; sigmoid_mul in ops.c) ------------------- */

void vk_op_sigmoid_mul(al_backend *be, al_tensor *x, const al_tensor *g);
void vk_op_ssm_conv(al_backend *be, const al_tensor *x, const al_tensor *w, al_tensor *state,
                    bool fresh, al_tensor *out);
void vk_op_delta_net(al_backend *be, const al_tensor *qkv, const al_tensor *alpha,
                     const al_tensor *beta, const al_tensor *dt_bias, const al_tensor *a,
                     al_tensor *state, bool fresh, const al_delta_shape *shape, al_tensor *out);
/* The largest delta-net head recurrent.c runs (the CPU's, model.c's bound). */
enum { VK_DELTA_MAX_DIM = 512 };

/* ---- mixtures of experts (moe.c) --------------------------------------------------- */

/* moe_ffn (backend.h) for up to 8 tokens in a few dispatches; false, recording
 * nothing, for what it does not fuse. */
bool vk_op_moe_ffn(al_backend *be, const al_tensor *xb, const al_moe *moe, al_tensor *x);
/* true if moe_mm.comp has builds for this weight type */
bool vk_moe_type_supported(uint32_t type);

/* ---- storage (memory.c) ----------------------------------------------------------- */

al_status vk_tensor_alloc(al_backend *be, int64_t n_cols, int64_t n_rows, al_tensor *out);
void vk_tensor_free(al_backend *be, al_tensor *t);
void vk_tensor_read(al_backend *be, const al_tensor *t, void *dst, uint64_t n_bytes);
void vk_tensor_write(al_backend *be, al_tensor *t, const void *src, uint64_t n_bytes);
void *vk_tensor_host(al_backend *be, const al_tensor *t, uint64_t *n_bytes);
al_status vk_tensor_import(al_backend *be, void *host, uint64_t n_bytes, int64_t n_cols,
                           int64_t n_rows, al_tensor *out);
al_status vk_weight_load(al_backend *be, al_tensor *w);
void vk_weights_destroy(vk_backend *be);

#endif /* AL_VK_H */
