/* settings.c: the ANYLLM_* environment variables, read here and nowhere else: the
 * library takes its settings as parameters (al_model_params.cpu and .vulkan,
 * al_set_vulkan_instance), and the CLI maps each variable onto one of them with the
 * value syntax the variables have always had, so that scripts keep working.
 *
 * An empty or unset variable leaves the library's default. A switch (0 or 1) with
 * another value is not the library's business: it is reported here, as before, and
 * the default kept. A name (ISA, activation mode, tuning, weights) goes through as
 * given, so that a bad one fails the load with the library's message naming the
 * field and the value, which cli_settings_message turns back into the variable's name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* --no-repack: wins over ANYLLM_X16, as the variable it used to set did. */
static bool g_no_repack;

void cli_no_repack(void) {
    g_no_repack = true;
}

/* The variable's value, or NULL where it is unset or empty. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A 0-or-1 variable into *field (-1: the default, left where unset); another value is
 * reported with what happens instead (otherwise). */
static void env_switch(const char *name, int *field, const char *otherwise) {
    const char *v = env(name);
    if (!v) return;
    if (!strcmp(v, "0") || !strcmp(v, "1"))
        *field = v[0] - '0';
    else
        fprintf(stderr, "anyllm: %s=%s is not one of 0, 1; %s\n", name, v, otherwise);
}

/* A variable that is on when set to anything but 0. */
static bool env_on(const char *name) {
    const char *v = env(name);
    return v && strcmp(v, "0") != 0;
}

static void cpu_from_env(al_cpu_settings *s) {
    if (env("ANYLLM_ISA")) s->isa = env("ANYLLM_ISA");
    if (env("ANYLLM_ACT")) s->act = env("ANYLLM_ACT");
    env_switch("ANYLLM_AMX", &s->amx, "using AMX where it can run");
    env_switch("ANYLLM_X16", &s->x16, "using the x16 layout");
    env_switch("ANYLLM_X16_PF", &s->x16_prefetch, "keeping the CPU's default");
    env_switch("ANYLLM_MOE_FUSE", &s->moe_fuse, "fusing the experts");
    env_switch("ANYLLM_CPU_FUSE", &s->fuse, "fusing the matmuls");
    if (g_no_repack) s->x16 = 0;
}

static void vulkan_from_env(al_vulkan_settings *s) {
    if (env("ANYLLM_VK_TUNE")) s->tune = env("ANYLLM_VK_TUNE");
    if (env("ANYLLM_VK_WEIGHTS")) s->weights = env("ANYLLM_VK_WEIGHTS");
    s->no_subgroup |= env_on("ANYLLM_VK_NO_SUBGROUP");
    s->pretend_discrete |= env_on("ANYLLM_VK_PRETEND_DISCRETE");
    s->profile |= env_on("ANYLLM_VK_PROFILE");
    const char *sw = env("ANYLLM_VK_AUTO_SOFTWARE"); /* only 1, as it always was */
    if (sw && !strcmp(sw, "1")) s->auto_software = true;
    const char *t = env("ANYLLM_VK_TIMEOUT_MS"); /* a negative one: the default */
    if (t && atoll(t) >= 0) s->timeout_ms = atoll(t);
    const char *max = env("ANYLLM_VK_MAX_WEIGHT_BYTES");
    if (max) s->max_weight_bytes = strtoull(max, NULL, 10);
}

void cli_settings_from_env(al_model_params *p) {
    cpu_from_env(&p->cpu);
    vulkan_from_env(&p->vulkan);
}

/* Each setting the CLI fills from a variable, by the name the library's messages give
 * it (anyllm.h). */
static const struct {
    const char *field, *var;
} k_names[] = {
    {"cpu.isa", "ANYLLM_ISA"},
    {"cpu.act", "ANYLLM_ACT"},
    {"cpu.amx", "ANYLLM_AMX"},
    {"cpu.x16_prefetch", "ANYLLM_X16_PF"},
    {"cpu.x16", "ANYLLM_X16"},
    {"cpu.moe_fuse", "ANYLLM_MOE_FUSE"},
    {"cpu.fuse", "ANYLLM_CPU_FUSE"},
    {"vulkan.tune", "ANYLLM_VK_TUNE"},
    {"vulkan.no_subgroup", "ANYLLM_VK_NO_SUBGROUP"},
    {"vulkan.timeout_ms", "ANYLLM_VK_TIMEOUT_MS"},
    {"vulkan.auto_software", "ANYLLM_VK_AUTO_SOFTWARE"},
    {"vulkan.pretend_discrete", "ANYLLM_VK_PRETEND_DISCRETE"},
    {"vulkan.max_weight_bytes", "ANYLLM_VK_MAX_WEIGHT_BYTES"},
    {"vulkan.weights", "ANYLLM_VK_WEIGHTS"},
    {"vulkan.profile", "ANYLLM_VK_PROFILE"},
};

/* The library's messages about a setting start with its field and value ("cpu.amx = 1:
 * ...", "cpu.isa 'avx512': ...", "vulkan.profile: ..."); where the value is the one a
 * variable gave, the line names the variable instead ("ANYLLM_AMX=1: ..."), as the
 * CLI's messages always have: what the user typed is what they can find. */
const char *cli_settings_message(const char *line, char *buf, size_t size) {
    for (size_t i = 0; i < sizeof k_names / sizeof *k_names; i++) {
        const size_t n = strlen(k_names[i].field);
        const char *v = env(k_names[i].var);
        if (strncmp(line, k_names[i].field, n) != 0 || !v) continue;
        const char *val = line + n, *end = val; /* the value the line names, if any */
        if (!strncmp(val, " = ", 3)) {
            val += 3;
            end = val + strcspn(val, ": ");
        } else if (!strncmp(val, " '", 2) && strchr(val + 2, '\'')) {
            val += 2;
            end = strchr(val, '\'');
        } else if (*val != ':')
            continue; /* a longer field that starts the same (cpu.x16_prefetch) */
        if (end > val && ((size_t)(end - val) != strlen(v) || strncmp(val, v, strlen(v))))
            continue; /* not the variable's value (--no-repack's x16, say) */
        snprintf(buf, size, "%s=%s%s", k_names[i].var, v, end + (*end == '\''));
        return buf;
    }
    return line;
}

/* Prints its own message rather than through cli_fail, so that test programs run by
 * the scripts with these variables (tests/test_ref.c) can link this file alone. */
int cli_settings_instance(void) {
    if (al_set_vulkan_instance(env("ANYLLM_VK_LOADER"), env_on("ANYLLM_VK_VALIDATION")) == AL_OK)
        return 0;
    fprintf(stderr, "anyllm: ANYLLM_VK_LOADER: %s\n", al_last_error());
    return 1;
}
