/* registry.c: the table of backend kinds, and everything that goes by their names.
 *
 * Adding a backend is a folder that exports an al_backend_desc and one line in the
 * table below (with its declaration beside it). The first kind is the fall-back: it
 * must run every model ("cpu"). A kind whose build is absent is simply not listed:
 * the same binary runs where a driver is missing, and "auto" treats a missing device
 * as a normal situation, not an error.
 */
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

extern const al_backend_desc cpu_backend_desc;
#ifdef AL_HAVE_VULKAN
extern const al_backend_desc vk_backend_desc;
#endif

static const al_backend_desc *const g_kinds[] = {
    &cpu_backend_desc,
#ifdef AL_HAVE_VULKAN
    &vk_backend_desc,
#endif
};
enum { N_KINDS = sizeof g_kinds / sizeof *g_kinds };

/* ---- specs ------------------------------------------------------------------------- */

/* The kind spec names, its device (0 unless "name:N") and variant ("name:VARIANT"), or
 * NULL when spec names no kind of this build. */
static const al_backend_desc *parse_spec(const char *spec, int *dev, const char **variant) {
    *dev = 0;
    *variant = NULL;
    for (int i = 0; i < N_KINDS; i++) {
        const size_t n = strlen(g_kinds[i]->name);
        if (strncmp(spec, g_kinds[i]->name, n) != 0) continue;
        if (spec[n] == 0) return g_kinds[i];
        if (spec[n] != ':' || spec[n + 1] == 0) continue;
        const char *rest = spec + n + 1;
        if (rest[0] < '0' || rest[0] > '9') {
            *variant = rest;
            return g_kinds[i];
        }
        char *end;
        const long d = strtol(rest, &end, 10);
        if (*end || d > 255) return NULL;
        *dev = (int)d;
        return g_kinds[i];
    }
    return NULL;
}

static al_status unknown_spec(const char *fn, const char *spec) {
    char list[256] = "";
    for (int i = 0; i < N_KINDS; i++) {
        strncat(list, g_kinds[i]->specs, sizeof list - strlen(list) - 1);
        strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    strncat(list, "auto", sizeof list - strlen(list) - 1);
    return al_error(AL_ERR_ARG, "%sbackend '%s' is not known (%s)", fn, spec, list);
}

/* ---- creating ---------------------------------------------------------------------- */

static al_status check_all(const al_model_params *p) {
    for (int i = 0; i < N_KINDS; i++) {
        al_status st = g_kinds[i]->check ? g_kinds[i]->check(p) : AL_OK;
        if (st != AL_OK) return st;
    }
    return AL_OK;
}

al_status backend_create_fallback(int n_threads, const al_model_params *p, al_backend **out) {
    const al_model_params d = p ? *p : al_model_default_params();
    return g_kinds[0]->create(0, NULL, n_threads, &d, out);
}

/* "auto": the first kind that can take a device of its own, else the fall-back. */
static al_status create_auto(int n_threads, const al_model_params *p, al_backend **out) {
    char why[512] = "";
    for (int i = 1; i < N_KINDS; i++) {
        if (!(g_kinds[i]->caps & AL_CAP_AUTO)) continue;
        al_status st = g_kinds[i]->create(-1, NULL, n_threads, p, out);
        if (st == AL_OK || st == AL_ERR_NOMEM) return st;
        snprintf(why, sizeof why, "%s", al_last_error());
    }
    al_log(AL_LOG_WARN, "no usable GPU (%s); using the CPU",
           why[0] ? why : "this build has no GPU backend");
    return backend_create_fallback(n_threads, p, out);
}

al_status backend_create(const char *spec, int n_threads, const al_model_params *params,
                         al_backend **out) {
    *out = NULL;
    const al_model_params p = params ? *params : al_model_default_params();
    al_status st = check_all(&p);
    if (st != AL_OK) return st;
    if (!spec) return backend_create_fallback(n_threads, &p, out);
    if (!strcmp(spec, "auto")) return create_auto(n_threads, &p, out);
    int dev;
    const char *variant;
    const al_backend_desc *k = parse_spec(spec, &dev, &variant);
    if (!k) return unknown_spec("", spec);
    return k->create(dev, variant, n_threads, &p, out);
}

/* ---- the public device calls (anyllm.h) --------------------------------------------- */

const char *al_version(void) { return "0.5.0"; }

#ifndef AL_HAVE_VULKAN
/* Nothing to configure (anyllm.h): accepted, so that a caller need not know the build. */
al_status al_set_vulkan_instance(const char *loader, bool validation) {
    (void)loader;
    (void)validation;
    return AL_OK;
}
#endif

const char *al_backends(void) {
    static char s[128];
    char part[64];
    size_t n = 0;
    for (int i = 0; i < N_KINDS && n < sizeof s; i++) {
        g_kinds[i]->summary(part, sizeof part);
        n += (size_t)snprintf(s + n, sizeof s - n, "%s%s", i ? ", " : "", part);
    }
    return s;
}

int al_backend_list(const char **names, int max) {
    if (!names) max = 0; /* a count alone */
    int n = 0;
    for (int i = 0; i < N_KINDS; i++) {
        const int n_dev = g_kinds[i]->n_devices();
        for (int d = 0; d < n_dev && d < g_kinds[i]->max_devices; d++, n++)
            if (n < max) names[n] = g_kinds[i]->device_names[d];
    }
    return n;
}

int al_gpu_count(void) {
    int n = -1;
    for (int i = 0; i < N_KINDS; i++) {
        if (!(g_kinds[i]->caps & AL_CAP_DEVICE)) continue;
        const int k = g_kinds[i]->n_devices();
        if (k >= 0) n = (n < 0 ? 0 : n) + k;
    }
    if (n < 0 && N_KINDS == 1) al_error(AL_ERR_UNSUPPORTED, "this build has no Vulkan backend");
    return n;
}

/* The kind and device a name of al_backend_list gives, or NULL with an error naming it
 * (fn: the caller). device: only kinds with devices of their own. Whether the machine
 * has that device, the kind's calls say. */
static const al_backend_desc *named(const char *fn, const char *name, bool device, int *dev) {
    const char *variant;
    const al_backend_desc *k = name ? parse_spec(name, dev, &variant) : NULL;
    if (k && !variant && (!device || (k->caps & AL_CAP_DEVICE))) return k;
    al_error(AL_ERR_ARG, "%s: '%s' is not a %s of this machine (al_backend_list names them)",
             fn, name ? name : "(null)", device ? "GPU" : "backend");
    return NULL;
}

al_status al_gpu_details(const char *name, char *buf, size_t size) {
    if (!buf || size == 0) return al_error(AL_ERR_ARG, "al_gpu_details: no buffer");
    buf[0] = 0;
    int dev;
    const al_backend_desc *k = named("al_gpu_details", name, true, &dev);
    if (!k) return AL_ERR_ARG;
    const int rc = k->details ? k->details(dev, buf, size) : k->describe(dev, buf, size);
    if (rc == 0) return AL_OK;
    return al_error(AL_ERR_ARG, "al_gpu_details: '%s' is not a GPU of this machine "
                    "(al_backend_list names them)", name);
}

al_status al_gpu_bandwidth(const char *name, double *gbs) {
    if (!gbs) return al_error(AL_ERR_ARG, "al_gpu_bandwidth: no output");
    *gbs = 0;
    int dev;
    const al_backend_desc *k = named("al_gpu_bandwidth", name, true, &dev);
    if (!k) return AL_ERR_ARG;
    if (!k->bandwidth) return al_error(AL_ERR_UNSUPPORTED, "al_gpu_bandwidth: %s: not measured", name);
    return k->bandwidth(dev, gbs);
}

al_status al_backend_describe(const char *name, char *buf, size_t size) {
    if (!name || !buf || size == 0)
        return al_error(AL_ERR_ARG, "al_backend_describe: no name or no buffer");
    int dev;
    const al_backend_desc *k = named("al_backend_describe", name, false, &dev);
    if (k && k->describe(dev, buf, size) == 0) return AL_OK;
    return al_error(AL_ERR_ARG, "al_backend_describe: '%s' is not a backend of this machine "
                    "(al_backend_list names them)", name);
}
