/* vk_backend.h: the Vulkan backend as the rest of anyllm sees it.
 *
 * Built only when the Vulkan headers and glslc are present (AL_HAVE_VULKAN); the
 * loader itself is opened at run time, so these functions fail cleanly (a status
 * and al_last_error()) on a machine without libvulkan, without a driver or without
 * a usable device.
 */
#ifndef AL_VK_BACKEND_H
#define AL_VK_BACKEND_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"

/* A backend on Vulkan device device_index, in the order `anyllm devices` lists them
 * (discrete GPUs first). device_index -1 means "auto": the first device that is a
 * real GPU, so that a software rasterizer such as lavapipe, slower than the CPU
 * backend, is never chosen by default. s: the settings (anyllm.h; NULL: the
 * defaults). On failure *out is NULL. */
al_status vk_backend_create(int device_index, const al_vulkan_settings *s, al_backend **out);
/* AL_ERR_ARG, naming the field and the value, unless the settings vk_backend_create
 * can check without a device are valid (vulkan.weights' name, vulkan.tune's syntax). */
al_status vk_settings_check(const al_vulkan_settings *s);

/* Prints every Vulkan device: type, driver, memory heaps, unified memory or not,
 * subgroup size, fp16 and int8-dot support, limits that matter here. Returns the
 * number of devices, or -1 with al_last_error() set when Vulkan is unusable. */
int vk_list_devices(FILE *out); /* out NULL: only counts them */

/* The name of device index (as vk_list_devices orders them) into buf; 0, or -1 when
 * there is no such device. */
int vk_device_name(int index, char *buf, size_t size);

/* vk_list_devices' lines on device index into buf (NUL-terminated, cut short where they
 * do not fit); 0, or -1 when there is no such device. */
int vk_device_details(int index, char *buf, size_t size);

/* What a backend did, for reports. */
typedef struct vk_backend_stats {
    const char *weight_path;  /* "import", "host copy" or "staging copy" */
    uint64_t bytes_imported;  /* weight bytes used in place (no copy) */
    uint64_t bytes_copied;    /* weight bytes copied to the device or host-visible memory */
    double load_s;            /* seconds spent in weight_load */
    uint64_t n_submits, n_dispatches;
    uint64_t n_kv_copies;     /* copy commands that stored keys or values in a cache */
    int n_validation;         /* validation messages (al_set_vulkan_instance) */
    /* seconds over every submission: recording on the host (from the first command to
     * the submit), waiting for the fence, and the device's own time from the first
     * command to the last (timestamps; n_timed submissions had them) */
    double record_s, wait_s, gpu_s;
    uint64_t n_timed;
    bool cpu_rows, fuse_norm; /* the tuning in use (pipelines.c): what a step dispatches */
    bool coopmat;             /* prompts' matmuls on cooperative matrices (matmul_cm.comp) */
} vk_backend_stats;

/* Fills *out and returns true if be is a Vulkan backend; false otherwise. */
bool vk_backend_get_stats(const al_backend *be, vk_backend_stats *out);

/* Test hook: fence waits of be give up after ns nanoseconds from now on (0: look
 * once, do not wait). No-op for other backends. */
void vk_backend_set_timeout(al_backend *be, uint64_t ns);

/* Device memory bandwidth of device device_index in GB/s (1e9 B/s): the best of a few
 * runs of a copy shader over a large buffer, counting the bytes read and written. */
al_status vk_measure_bandwidth(int device_index, double *gbs);

#endif /* AL_VK_BACKEND_H */
