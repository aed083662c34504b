/* device.c: the Vulkan loader, instance, device choice and the device list.
 *
 * libvulkan is opened with dlopen (al_set_vulkan_instance's loader overrides the name,
 * for tests; the CLI's ANYLLM_VK_LOADER), so a machine without it gets a status, not a
 * failed program start. Every entry point comes from vkGetInstanceProcAddr /
 * vkGetDeviceProcAddr.
 *
 * The backend needs Vulkan 1.1 (subgroup properties, 16-bit storage) on both the
 * loader and the device. Optional: VK_EXT_external_memory_host (zero-copy weights on
 * unified memory), VK_EXT_debug_utils (counting validation messages).
 *
 * With validation on (al_set_vulkan_instance; the CLI's ANYLLM_VK_VALIDATION=1) the
 * Khronos validation layer is enabled, with its synchronization validation (missing
 * barriers) where it offers that, and a debug-utils messenger logs and counts every
 * warning and error it reports; tests assert the count is zero.
 *
 * Both are process-wide, not model parameters: the device list (al_backend_list,
 * al_gpu_count) creates instances before any model exists.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vk.h"
#include "vk_backend.h"

static const char *VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation";

/* al_set_vulkan_instance's values, copied: the caller's string need not outlive the
 * call. A lock, since instances may be created on several threads. */
static pthread_mutex_t g_instance_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_loader[4096];
static bool g_validation;

al_status al_set_vulkan_instance(const char *loader, bool validation) {
    if (loader && strlen(loader) >= sizeof g_loader)
        return al_error(AL_ERR_ARG, "al_set_vulkan_instance: the loader path is over %zu bytes",
                        sizeof g_loader - 1);
    pthread_mutex_lock(&g_instance_lock);
    snprintf(g_loader, sizeof g_loader, "%s", loader ? loader : "");
    g_validation = validation;
    pthread_mutex_unlock(&g_instance_lock);
    return AL_OK;
}

/* The loader's name into name (size bytes) and whether validation is on. */
static bool instance_settings(char *name, size_t size) {
    pthread_mutex_lock(&g_instance_lock);
    snprintf(name, size, "%s", g_loader[0] ? g_loader : "libvulkan.so.1");
    const bool validation = g_validation;
    pthread_mutex_unlock(&g_instance_lock);
    return validation;
}

const char *vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_INVALID_EXTERNAL_HANDLE: return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
    }
}

/* ---- loader and instance ------------------------------------------------------------ */

static al_status load_library(vk_device *d, const char *name) {
    d->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!d->lib)
        return al_error(AL_ERR_UNSUPPORTED, "Vulkan loader %s is not installed", name);
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer */
    *(void **)&d->fn.vkGetInstanceProcAddr = dlsym(d->lib, "vkGetInstanceProcAddr");
    if (!d->fn.vkGetInstanceProcAddr)
        return al_error(AL_ERR_UNSUPPORTED, "%s has no vkGetInstanceProcAddr", name);
#define LOAD_GLOBAL(f) d->fn.f = (PFN_##f)d->fn.vkGetInstanceProcAddr(NULL, #f);
    VK_GLOBAL_FNS(LOAD_GLOBAL)
#undef LOAD_GLOBAL
    if (!d->fn.vkCreateInstance || !d->fn.vkEnumerateInstanceExtensionProperties)
        return al_error(AL_ERR_UNSUPPORTED, "the Vulkan loader %s is incomplete", name);
    uint32_t version = VK_API_VERSION_1_0;
    if (d->fn.vkEnumerateInstanceVersion) d->fn.vkEnumerateInstanceVersion(&version);
    if (version < VK_API_VERSION_1_1)
        return al_error(AL_ERR_UNSUPPORTED, "the Vulkan loader supports only Vulkan %u.%u; "
                        "1.1 is needed", VK_API_VERSION_MAJOR(version),
                        VK_API_VERSION_MINOR(version));
    return AL_OK;
}

/* Whether the loader (layer NULL) or that layer offers the instance extension. */
static bool layer_has_extension(vk_device *d, const char *layer, const char *name) {
    uint32_t n = 0;
    if (d->fn.vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS) return false;
    VkExtensionProperties *p = al_calloc(n ? n : 1, sizeof *p);
    bool found = false;
    if (p && d->fn.vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].extensionName, name);
    al_free(p);
    return found;
}

static bool has_instance_extension(vk_device *d, const char *name) {
    return layer_has_extension(d, NULL, name);
}

static bool has_layer(vk_device *d, const char *name) {
    uint32_t n = 0;
    if (!d->fn.vkEnumerateInstanceLayerProperties ||
        d->fn.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS)
        return false;
    VkLayerProperties *p = al_calloc(n ? n : 1, sizeof *p);
    bool found = false;
    if (p && d->fn.vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].layerName, name);
    al_free(p);
    return found;
}

/* Prints and counts what the validation layer reports; performance hints are not
 * errors and are left out. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT type,
    const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    (void)type;
    atomic_int *count = user;
    atomic_fetch_add(count, 1);
    al_log(AL_LOG_WARN, "vulkan %s: %s",
           severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "validation error"
                                                                    : "validation warning",
           data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

al_status vk_instance_create(vk_device *d) {
    char loader[sizeof g_loader + 16];
    const bool validate = instance_settings(loader, sizeof loader);
    al_status st = load_library(d, loader);
    if (st != AL_OK) return st;
    const char *exts[5];
    const char *layers[1];
    uint32_t n_ext = 0, n_layer = 0;
    VkInstanceCreateFlags flags = 0;
    if (validate) {
        if (!has_layer(d, VALIDATION_LAYER) || !has_instance_extension(d, "VK_EXT_debug_utils"))
            return al_error(AL_ERR_UNSUPPORTED, "Vulkan validation is on "
                            "(al_set_vulkan_instance) but %s or VK_EXT_debug_utils is not "
                            "installed", VALIDATION_LAYER);
        layers[n_layer++] = VALIDATION_LAYER;
        exts[n_ext++] = "VK_EXT_debug_utils";
        d->caps.debug_utils = true;
    }
    /* synchronization validation too, where the layer offers it: a missing barrier is
     * a race on a GPU that a CPU driver, running dispatches in turn, never shows */
    const VkValidationFeatureEnableEXT sync =
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                  .enabledValidationFeatureCount = 1,
                                  .pEnabledValidationFeatures = &sync};
    bool sync_validation =
        validate && layer_has_extension(d, VALIDATION_LAYER, "VK_EXT_validation_features");
    if (sync_validation) exts[n_ext++] = "VK_EXT_validation_features";
    /* MoltenVK-style drivers are listed only when the application asks for them */
    if (has_instance_extension(d, "VK_KHR_portability_enumeration")) {
        exts[n_ext++] = "VK_KHR_portability_enumeration";
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
        .pfnUserCallback = on_validation,
        .pUserData = &d->n_validation,
        .pNext = sync_validation ? &vf : NULL,
    };
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "anyllm",
        .pEngineName = "anyllm",
        .apiVersion = VK_API_VERSION_1_2,
    };
    VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = validate ? &mci : NULL, /* also reports problems of instance creation */
        .flags = flags,
        .pApplicationInfo = &app,
        .enabledLayerCount = n_layer,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = n_ext,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = d->fn.vkCreateInstance(&ici, NULL, &d->instance);
    if (r != VK_SUCCESS) {
        d->instance = VK_NULL_HANDLE;
        return al_error(AL_ERR_UNSUPPORTED, "no Vulkan driver: vkCreateInstance failed (%s)",
                        vk_result_str(r));
    }
#define LOAD_INSTANCE(f) d->fn.f = (PFN_##f)d->fn.vkGetInstanceProcAddr(d->instance, #f);
    VK_INSTANCE_FNS(LOAD_INSTANCE)
    VK_DEBUG_FNS(LOAD_INSTANCE)
    VK_COOPMAT_FNS(LOAD_INSTANCE)
#undef LOAD_INSTANCE
    if (!d->fn.vkEnumeratePhysicalDevices || !d->fn.vkGetPhysicalDeviceProperties2 ||
        !d->fn.vkCreateDevice || !d->fn.vkGetDeviceProcAddr)
        return al_error(AL_ERR_UNSUPPORTED, "the Vulkan instance lacks Vulkan 1.1 entry points");
    if (validate && d->fn.vkCreateDebugUtilsMessengerEXT) {
        mci.pNext = NULL; /* the validation features belong to the instance's chain only */
        r = d->fn.vkCreateDebugUtilsMessengerEXT(d->instance, &mci, NULL, &d->messenger);
        if (r != VK_SUCCESS)
            return al_error(AL_ERR_DEVICE, "vkCreateDebugUtilsMessengerEXT failed (%s)",
                            vk_result_str(r));
    }
    return AL_OK;
}

/* ---- physical devices --------------------------------------------------------------- */

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

al_status vk_physical_devices(vk_device *d, VkPhysicalDevice *devs, uint32_t *n) {
    uint32_t count = 0;
    VkResult r = d->fn.vkEnumeratePhysicalDevices(d->instance, &count, NULL);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return al_error(AL_ERR_UNSUPPORTED, "vkEnumeratePhysicalDevices failed (%s)",
                        vk_result_str(r));
    if (!devs || count == 0) {
        *n = count;
        return AL_OK;
    }
    count = count < *n ? count : *n;
    r = d->fn.vkEnumeratePhysicalDevices(d->instance, &count, devs);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE)
        return al_error(AL_ERR_UNSUPPORTED, "vkEnumeratePhysicalDevices failed (%s)",
                        vk_result_str(r));
    /* stable insertion sort by preference: the loader's order breaks ties */
    for (uint32_t i = 1; i < count; i++) {
        VkPhysicalDevice key = devs[i];
        VkPhysicalDeviceProperties pk;
        d->fn.vkGetPhysicalDeviceProperties(key, &pk);
        uint32_t j = i;
        for (; j > 0; j--) {
            VkPhysicalDeviceProperties pj;
            d->fn.vkGetPhysicalDeviceProperties(devs[j - 1], &pj);
            if (type_rank(pj.deviceType) <= type_rank(pk.deviceType)) break;
            devs[j] = devs[j - 1];
        }
        devs[j] = key;
    }
    *n = count;
    return AL_OK;
}

static bool has_device_extension(vk_device *d, VkPhysicalDevice pdev, const char *name) {
    uint32_t n = 0;
    if (d->fn.vkEnumerateDeviceExtensionProperties(pdev, NULL, &n, NULL) != VK_SUCCESS) return false;
    VkExtensionProperties *p = al_calloc(n ? n : 1, sizeof *p);
    bool found = false;
    if (p && d->fn.vkEnumerateDeviceExtensionProperties(pdev, NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].extensionName, name);
    al_free(p);
    return found;
}

/* Unified memory: the device is integrated or a CPU, or every heap is device-local
 * (a discrete GPU with resizable BAR still has a host heap that is not). */
static bool is_uma(const vk_caps *c) {
    if (c->type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || c->type == VK_PHYSICAL_DEVICE_TYPE_CPU)
        return true;
    for (uint32_t i = 0; i < c->mem.memoryHeapCount; i++)
        if (!(c->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) return false;
    return true;
}

/* Whether matmul_cm.comp can run on pdev: the extension with a 16 x 16 x 16 block of
 * fp16 inputs and fp32 sums for a subgroup, its feature, fp16 arithmetic and the Vulkan
 * memory model (the shader's SPIR-V declares both), and subgroups of 32 (the shader's
 * four subgroups of its 128 invocations). Vulkan 1.2 has the features' structs. */
static bool read_coopmat(vk_device *d, VkPhysicalDevice pdev, const vk_caps *c) {
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV props =
        d->fn.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV;
    if (c->api_version < VK_API_VERSION_1_2 || !c->fp16 || !props || c->subgroup_size != 32 ||
        !c->subgroup_arith || c->max_wg < 128 || c->shared_bytes < 24 * 1024 ||
        !has_device_extension(d, pdev, "VK_NV_cooperative_matrix"))
        return false;
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, .pNext = &vmm};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &cm};
    d->fn.vkGetPhysicalDeviceFeatures2(pdev, &f2);
    if (!cm.cooperativeMatrix || !vmm.vulkanMemoryModel) return false;
    uint32_t n = 0;
    if (props(pdev, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkCooperativeMatrixPropertiesNV *p = al_calloc(n, sizeof *p);
    if (!p) return false;
    for (uint32_t i = 0; i < n; i++)
        p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    bool found = false;
    if (props(pdev, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 &&
                    p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                    p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                    p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                    p[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                    p[i].scope == VK_SCOPE_SUBGROUP_NV;
    al_free(p);
    return found;
}

void vk_read_caps(vk_device *d, VkPhysicalDevice pdev, vk_caps *c) {
    bool debug_utils = c->debug_utils;
    memset(c, 0, sizeof *c);
    c->debug_utils = debug_utils;
    VkPhysicalDeviceProperties base;
    d->fn.vkGetPhysicalDeviceProperties(pdev, &base);
    bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
    bool v13 = base.apiVersion >= VK_API_VERSION_1_3;
    c->host_import = has_device_extension(d, pdev, "VK_EXT_external_memory_host");

    /* the property structs this device knows, chained front to back */
    VkPhysicalDeviceShaderIntegerDotProductProperties dot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT host = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    void *tail = NULL;
    if (v13) dot.pNext = tail, tail = &dot;
    if (c->host_import) host.pNext = tail, tail = &host;
    if (v12) drv.pNext = tail, tail = &drv;
    m3.pNext = tail;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sg};
    d->fn.vkGetPhysicalDeviceProperties2(pdev, &p2);

    VkPhysicalDeviceShaderFloat16Int8Features f16i8 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
        .pNext = v12 ? &f16i8 : NULL};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &s16};
    d->fn.vkGetPhysicalDeviceFeatures2(pdev, &f2);

    const VkPhysicalDeviceLimits *lim = &base.limits;
    snprintf(c->name, sizeof c->name, "%s", base.deviceName);
    if (v12)
        snprintf(c->driver, sizeof c->driver, "%s %s", drv.driverName, drv.driverInfo);
    else
        snprintf(c->driver, sizeof c->driver, "(driver name needs Vulkan 1.2)");
    c->type = base.deviceType;
    c->api_version = base.apiVersion;
    c->driver_version = base.driverVersion;
    c->vendor_id = base.vendorID;
    /* offsets inside a binding are 32-bit in the shaders (16-bit word indices of
     * byte offsets): keep ranges under 2 GiB */
    c->max_range = lim->maxStorageBufferRange < (1u << 31) ? lim->maxStorageBufferRange : (1u << 31);
    c->align = lim->minStorageBufferOffsetAlignment;
    for (int i = 0; i < 3; i++) c->max_groups[i] = lim->maxComputeWorkGroupCount[i];
    c->max_wg = lim->maxComputeWorkGroupInvocations;
    c->shared_bytes = lim->maxComputeSharedMemorySize;
    c->ts_period = lim->timestampPeriod;
    c->subgroup_size = sg.subgroupSize;
    c->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                        (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                        (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    c->subgroup_shuffle = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c->max_ubo_range = lim->maxUniformBufferRange;
    c->dyn_index = f2.features.shaderStorageBufferArrayDynamicIndexing;
    c->max_ssbo = lim->maxPerStageDescriptorStorageBuffers < lim->maxDescriptorSetStorageBuffers
                      ? lim->maxPerStageDescriptorStorageBuffers
                      : lim->maxDescriptorSetStorageBuffers;
    c->storage16 = s16.storageBuffer16BitAccess;
    c->fp16 = v12 && f16i8.shaderFloat16;
    c->int8 = v12 && f16i8.shaderInt8;
    c->int8_dot = v13 && dot.integerDotProduct4x8BitPackedSignedAccelerated;
    c->import_align = c->host_import ? host.minImportedHostPointerAlignment : 0;
    d->fn.vkGetPhysicalDeviceMemoryProperties(pdev, &c->mem);
    c->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : 1ull << 30;
    c->uma = is_uma(c);
    c->coopmat = read_coopmat(d, pdev, c);
}

/* ---- the logical device ------------------------------------------------------------- */

al_status vk_device_open(vk_device *d) {
    vk_caps *c = &d->caps;
    if (c->api_version < VK_API_VERSION_1_1)
        return al_error(AL_ERR_UNSUPPORTED, "%s supports only Vulkan %u.%u; 1.1 is needed",
                        c->name, VK_API_VERSION_MAJOR(c->api_version),
                        VK_API_VERSION_MINOR(c->api_version));
    if (!c->storage16)
        return al_error(AL_ERR_UNSUPPORTED, "%s lacks 16-bit storage buffer access, which the "
                        "weight shaders need", c->name);
    uint32_t n_fam = 0;
    d->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->pdev, &n_fam, NULL);
    VkQueueFamilyProperties fams[16];
    n_fam = n_fam < 16 ? n_fam : 16;
    d->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->pdev, &n_fam, fams);
    uint32_t fam = UINT32_MAX;
    for (uint32_t i = 0; i < n_fam && fam == UINT32_MAX; i++)
        if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = i;
    if (fam == UINT32_MAX)
        return al_error(AL_ERR_UNSUPPORTED, "%s has no compute queue", c->name);
    d->queue_family = fam;
    d->ts_bits = fams[fam].timestampValidBits;

    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = fam,
        .queueCount = 1,
        .pQueuePriorities = &priority,
    };
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
        .storageBuffer16BitAccess = VK_TRUE,
    };
    /* the MULTI builds pick one of several weights per workgroup (a uniform index) */
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &s16,
                                    .features.shaderStorageBufferArrayDynamicIndexing =
                                        c->dyn_index};
    /* matmul_cm.comp: cooperative matrices, fp16 arithmetic, the Vulkan memory model */
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES,
        .vulkanMemoryModel = VK_TRUE};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES,
        .shaderFloat16 = VK_TRUE, .pNext = &vmm};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
        .cooperativeMatrix = VK_TRUE, .pNext = &f16};
    if (c->coopmat) s16.pNext = &cm;
    const char *exts[2];
    uint32_t n_ext = 0;
    if (c->host_import) exts[n_ext++] = "VK_EXT_external_memory_host";
    if (c->coopmat) exts[n_ext++] = "VK_NV_cooperative_matrix";
    VkDeviceCreateInfo dci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &f2,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &qci,
        .enabledExtensionCount = n_ext,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = d->fn.vkCreateDevice(d->pdev, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        d->dev = VK_NULL_HANDLE;
        return al_error(r == VK_ERROR_OUT_OF_HOST_MEMORY ? AL_ERR_NOMEM : AL_ERR_DEVICE,
                        "vkCreateDevice on %s failed (%s)", c->name, vk_result_str(r));
    }
#define LOAD_DEVICE(f) d->fn.f = (PFN_##f)d->fn.vkGetDeviceProcAddr(d->dev, #f);
    VK_DEVICE_FNS(LOAD_DEVICE)
    VK_HOST_IMPORT_FNS(LOAD_DEVICE)
#undef LOAD_DEVICE
#define CHECK_DEVICE(f) if (!d->fn.f) return al_error(AL_ERR_DEVICE, "%s: no %s", c->name, #f);
    VK_DEVICE_FNS(CHECK_DEVICE)
#undef CHECK_DEVICE
    if (!d->fn.vkGetMemoryHostPointerPropertiesEXT) c->host_import = false;
    d->fn.vkGetDeviceQueue(d->dev, fam, 0, &d->queue);
    if (pthread_mutex_init(&d->queue_lock, NULL) != 0)
        return al_error(AL_ERR_NOMEM, "cannot create the queue lock");
    d->has_queue_lock = true;
    return AL_OK;
}

void vk_device_close(vk_device *d) {
    if (d->has_queue_lock) pthread_mutex_destroy(&d->queue_lock);
    d->has_queue_lock = false;
    if (d->dev) d->fn.vkDestroyDevice(d->dev, NULL);
    d->dev = VK_NULL_HANDLE;
    if (d->messenger && d->fn.vkDestroyDebugUtilsMessengerEXT)
        d->fn.vkDestroyDebugUtilsMessengerEXT(d->instance, d->messenger, NULL);
    d->messenger = VK_NULL_HANDLE;
    if (d->instance) d->fn.vkDestroyInstance(d->instance, NULL);
    d->instance = VK_NULL_HANDLE;
    if (d->lib) dlclose(d->lib);
    d->lib = NULL;
}

/* ---- the device list ----------------------------------------------------------------- */

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
    default: return "other";
    }
}

static void print_device(FILE *out, uint32_t index, const vk_caps *c) {
    fprintf(out, "vulkan:%u  %s\n", index, c->name);
    fprintf(out, "  type             %s%s\n", type_name(c->type),
            c->uma ? ", unified memory (weights used in place)" : "");
    fprintf(out, "  driver           %s (version 0x%08x), Vulkan %u.%u.%u\n", c->driver,
            c->driver_version, VK_API_VERSION_MAJOR(c->api_version),
            VK_API_VERSION_MINOR(c->api_version), VK_API_VERSION_PATCH(c->api_version));
    for (uint32_t h = 0; h < c->mem.memoryHeapCount; h++) {
        const VkMemoryHeap *heap = &c->mem.memoryHeaps[h];
        char flags[96] = "";
        for (uint32_t t = 0; t < c->mem.memoryTypeCount; t++) {
            const VkMemoryType *mt = &c->mem.memoryTypes[t];
            if (mt->heapIndex != h) continue;
            if ((mt->propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && !strstr(flags, "host"))
                strcat(flags, " host-visible");
        }
        fprintf(out, "  memory heap %u    %.2f GiB%s%s\n", h, (double)heap->size / (1u << 30),
                heap->flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? " device-local" : "", flags);
    }
    fprintf(out, "  subgroup size    %u%s\n", c->subgroup_size,
            c->subgroup_arith ? " (arithmetic in compute)" : " (no compute arithmetic)");
    fprintf(out, "  fp16 / int8      %s / %s, int8 dot product %s\n", c->fp16 ? "yes" : "no",
            c->int8 ? "yes" : "no", c->int8_dot ? "accelerated" : "not accelerated");
    fprintf(out, "  16-bit storage   %s\n", c->storage16 ? "yes" : "no (cannot run anyllm)");
    fprintf(out, "  coop. matrices   %s\n", c->coopmat ? "yes (NV, 16x16x16 fp16 -> fp32: "
            "vulkan.tune coopmat=1)" : "no (prompts' matmuls on fp32 FMAs)");
    fprintf(out, "  max binding      %.0f MiB, max allocation %.2f GiB\n",
            (double)c->max_range / (1 << 20), (double)c->max_alloc / (1u << 30));
    if (c->host_import)
        fprintf(out, "  host import      yes (alignment %" PRIu64 ")\n", c->import_align);
    else
        fprintf(out, "  host import      no\n");
}

int vk_list_devices(FILE *out) {
    vk_device d = {0};
    int n_listed = -1;
    if (vk_instance_create(&d) != AL_OK) goto done;
    uint32_t n = 16;
    VkPhysicalDevice devs[16];
    if (vk_physical_devices(&d, devs, &n) != AL_OK) goto done;
    for (uint32_t i = 0; i < n; i++) {
        vk_caps c = {0};
        vk_read_caps(&d, devs[i], &c);
        if (out) print_device(out, i, &c);
    }
    n_listed = (int)n;
done:
    vk_device_close(&d);
    return n_listed;
}

int vk_device_details(int index, char *buf, size_t size) {
    vk_device d = {0};
    int rc = -1;
    uint32_t n = 16;
    VkPhysicalDevice devs[16];
    if (index >= 0 && size > 0 && vk_instance_create(&d) == AL_OK &&
        vk_physical_devices(&d, devs, &n) == AL_OK && (uint32_t)index < n) {
        vk_caps c = {0};
        vk_read_caps(&d, devs[index], &c);
        /* the listing's own lines (print_device), into the caller's buffer; fclose
         * reports the lines that did not fit, which are cut by design */
        FILE *f = fmemopen(buf, size, "w");
        if (f) {
            print_device(f, (uint32_t)index, &c);
            fclose(f);
            buf[size - 1] = 0;
            rc = 0;
        }
    }
    vk_device_close(&d);
    return rc;
}

int vk_device_name(int index, char *buf, size_t size) {
    vk_device d = {0};
    int rc = -1;
    uint32_t n = 16;
    VkPhysicalDevice devs[16];
    if (index >= 0 && vk_instance_create(&d) == AL_OK &&
        vk_physical_devices(&d, devs, &n) == AL_OK && (uint32_t)index < n) {
        vk_caps c = {0};
        vk_read_caps(&d, devs[index], &c);
        snprintf(buf, size, "%s", c.name);
        rc = 0;
    }
    vk_device_close(&d);
    return rc;
}
