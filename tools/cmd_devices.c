/* cmd_devices.c: `anyllm devices [--bandwidth]`, the Vulkan devices this machine has.
 *
 * Lists every device in the order "vulkan:N" numbers them (discrete GPUs first), with
 * what decides how anyllm runs there: device type and unified memory, driver, memory
 * heaps, subgroup size, fp16 / int8-dot support, the binding and allocation limits.
 * --bandwidth also measures each device's copy bandwidth (for roofline estimates).
 * Built without the Vulkan backend, it says so and lists only the CPU.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#ifdef AL_HAVE_VULKAN
#include "vulkan/vk_backend.h"
#endif

int cmd_devices(int argc, char **argv) {
    bool bandwidth = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bandwidth")) bandwidth = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: anyllm devices [--bandwidth]\n");
            return 0;
        } else {
            return cli_fail("devices: unknown option %s", argv[i]);
        }
    }
    printf("cpu       the CPU backend (always available)\n");
#ifdef AL_HAVE_VULKAN
    int n = vk_list_devices(stdout);
    if (n < 0) return cli_fail("no Vulkan: %s", al_last_error());
    if (n == 0) printf("(no Vulkan devices)\n");
    for (int i = 0; bandwidth && i < n; i++) {
        double gbs;
        al_status st = vk_measure_bandwidth(i, &gbs);
        if (st != AL_OK) return cli_fail_status(st);
        printf("vulkan:%d  copy bandwidth %.1f GB/s (read + write, measured)\n", i, gbs);
    }
    return 0;
#else
    (void)bandwidth;
    printf("(this build of anyllm has no Vulkan backend: glslc or the Vulkan headers were "
           "missing when it was built)\n");
    return 0;
#endif
}
