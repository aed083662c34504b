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

/* Every line of the listing: up to 16 memory heaps of a line each, and the rest. */
enum { DETAILS_BYTES = 4096 };

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
    if (!strstr(al_backends(), "vulkan")) {
        printf("(this build of anyllm has no Vulkan backend: glslc or the Vulkan headers were "
               "missing when it was built)\n");
        return 0;
    }
    const int n = al_gpu_count();
    if (n < 0) return cli_fail("no Vulkan: %s", al_last_error());
    if (n == 0) printf("(no Vulkan devices)\n");
    for (int i = 0; i < n; i++) {
        char name[32], details[DETAILS_BYTES];
        snprintf(name, sizeof name, "vulkan:%d", i);
        al_status st = al_gpu_details(name, details, sizeof details);
        if (st != AL_OK) return cli_fail_status(st);
        fputs(details, stdout);
    }
    for (int i = 0; bandwidth && i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "vulkan:%d", i);
        double gbs;
        al_status st = al_gpu_bandwidth(name, &gbs);
        if (st != AL_OK) return cli_fail_status(st);
        printf("vulkan:%d  copy bandwidth %.1f GB/s (read + write, measured)\n", i, gbs);
    }
    return 0;
}
