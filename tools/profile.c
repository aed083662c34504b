/* profile.c: device profiles (profile.h): identities, the file, auto's choice, and
 * `anyllm profile`.
 *
 * The file (JSON, format "anyllm-profile-1"):
 *   {"format": ..., "saved": "2025-01-01T00:00:00Z", "anyllm": "0.5.0",
 *    "model": {"path": ..., "file_bytes": N, "id": MODEL},
 *    "machine": {"description": "CPU NAME; cpu avx2, vulkan:0 llvmpipe ...", "id": MACHINE},
 *    "points": [{"backend": "cpu", "desc": "cpu avx2 q8", "test": "pp", "n_tokens": 512,
 *                "n_depth": 0, "n_threads": 2, "ts": 61.2, "sd": 0.8}, ...]}
 */
#include "profile.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "anyllm.h"
#include "cli.h"

#define PROFILE_FORMAT "anyllm-profile-1"
enum { HASH_SPAN = 1 << 20, MAX_POINTS = 4096 };

/* ---- identities ------------------------------------------------------------------------ */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static const uint64_t FNV_BASIS = 0xcbf29ce484222325ull;

/* The model's id: its size, first and last MiB (profile.h says why). 0, or -1 with
 * why set. */
static int model_id(const char *path, char id[17], uint64_t *n_bytes, char *why, size_t n_why) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = malloc(HASH_SPAN);
    int rc = -1;
    if (!f || !buf) {
        snprintf(why, n_why, "cannot read %s: %s", path, f ? "out of memory" : strerror(errno));
        goto done;
    }
    if (fseeko(f, 0, SEEK_END) != 0) goto io;
    const uint64_t size = (uint64_t)ftello(f);
    uint64_t h = fnv1a(FNV_BASIS, &size, sizeof size);
    const uint64_t tail = size > HASH_SPAN ? size - HASH_SPAN : 0;
    if (fseeko(f, 0, SEEK_SET) != 0) goto io;
    h = fnv1a(h, buf, fread(buf, 1, HASH_SPAN, f));
    if (fseeko(f, (off_t)tail, SEEK_SET) != 0) goto io;
    h = fnv1a(h, buf, fread(buf, 1, HASH_SPAN, f));
    if (ferror(f)) goto io;
    snprintf(id, 17, "%016llx", (unsigned long long)h);
    *n_bytes = size;
    rc = 0;
    goto done;
io:
    snprintf(why, n_why, "cannot read %s: %s", path, strerror(errno));
done:
    if (f) fclose(f);
    free(buf);
    return rc;
}

/* The CPU's model name from /proc/cpuinfo, or "unknown CPU". */
static void cpu_model(char *out, size_t size) {
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        snprintf(out, size, "%s", colon + 2);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    if (f) fclose(f);
}

/* The machine's description (the CPU, each backend) and its hash. */
static void machine_id(char *desc, size_t size, char id[17]) {
    cpu_model(desc, size);
    const char *names[16];
    int n = al_backend_list(names, 16);
    for (int i = 0; i < n && i < 16; i++) {
        char d[128] = "";
        if (al_backend_describe(names[i], d, sizeof d) != AL_OK) snprintf(d, sizeof d, "?");
        size_t len = strlen(desc);
        if (strncmp(d, names[i], strlen(names[i])) == 0) /* "cpu avx2" names itself */
            snprintf(desc + len, size - len, "%s %s", i ? "," : ";", d);
        else
            snprintf(desc + len, size - len, "%s %s %s", i ? "," : ";", names[i], d);
    }
    snprintf(id, 17, "%016llx", (unsigned long long)fnv1a(FNV_BASIS, desc, strlen(desc)));
}

/* ---- the file ------------------------------------------------------------------------------ */

/* $XDG_CACHE_HOME/anyllm/profiles (an absolute XDG_CACHE_HOME only, as the XDG spec
 * says), else ~/.cache/anyllm/profiles. */
static int profile_dir(char *out, size_t size) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/') snprintf(out, size, "%s/anyllm/profiles", xdg);
    else if (home && *home) snprintf(out, size, "%s/.cache/anyllm/profiles", home);
    else return -1;
    return 0;
}

/* The profile's path for a model file on this machine; fills the identities. */
typedef struct profile_ids {
    char model[17], machine[17];
    char machine_desc[512];
    uint64_t file_bytes;
    char path[768];
} profile_ids;

static int profile_locate(const char *model, profile_ids *ids, char *why, size_t n_why) {
    char dir[600];
    if (model_id(model, ids->model, &ids->file_bytes, why, n_why)) return -1;
    if (profile_dir(dir, sizeof dir)) {
        snprintf(why, n_why, "neither XDG_CACHE_HOME nor HOME is set: no cache directory");
        return -1;
    }
    machine_id(ids->machine_desc, sizeof ids->machine_desc, ids->machine);
    snprintf(ids->path, sizeof ids->path, "%s/%s-%s.json", dir, ids->model, ids->machine);
    return 0;
}

/* mkdir -p of the directory part of path. */
static int make_dirs(const char *path) {
    char buf[768];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

/* The profile at path, or NULL when there is none (or it is not one). */
static json_t *profile_read(const char *path) {
    json_t *root = json_load_file(path, 0, NULL);
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (root && (!fmt || strcmp(fmt, PROFILE_FORMAT) || !json_is_array(json_object_get(root, "points")))) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static bool same_point(json_t *p, const profile_point *q) {
    const char *b = json_string_value(json_object_get(p, "backend"));
    const char *t = json_string_value(json_object_get(p, "test"));
    return b && t && !strcmp(b, q->backend) && !strcmp(t, q->is_pp ? "pp" : "tg") &&
           json_integer_value(json_object_get(p, "n_tokens")) == q->n_tokens &&
           json_integer_value(json_object_get(p, "n_depth")) == q->n_depth &&
           json_integer_value(json_object_get(p, "n_threads")) == q->n_threads;
}

/* Adds q to points, replacing the point it measures again. */
static void merge_point(json_t *points, const profile_point *q) {
    for (size_t i = json_array_size(points); i-- > 0;)
        if (same_point(json_array_get(points, i), q)) json_array_remove(points, i);
    json_array_append_new(points, json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:f, s:f}",
                                            "backend", q->backend, "desc", q->desc, "test",
                                            q->is_pp ? "pp" : "tg", "n_tokens", q->n_tokens,
                                            "n_depth", q->n_depth, "n_threads", q->n_threads,
                                            "ts", q->ts, "sd", q->sd));
}

int profile_save(const char *model, const profile_point *pts, int n, char *path, size_t size) {
    profile_ids ids;
    char why[600];
    if (profile_locate(model, &ids, why, sizeof why)) return cli_fail("profile: %s", why);
    json_t *root = profile_read(ids.path);
    if (!root) root = json_pack("{s:s, s:[]}", "format", PROFILE_FORMAT, "points");
    json_t *points = json_object_get(root, "points");
    for (int i = 0; i < n; i++) merge_point(points, &pts[i]);
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_object_set_new(root, "saved", json_string(when));
    json_object_set_new(root, "anyllm", json_string(al_version()));
    json_object_set_new(root, "model", json_pack("{s:s, s:I, s:s}", "path", model, "file_bytes",
                                                 (json_int_t)ids.file_bytes, "id", ids.model));
    json_object_set_new(root, "machine", json_pack("{s:s, s:s}", "description",
                                                   ids.machine_desc, "id", ids.machine));
    /* written whole, then renamed over the old one: a reader never sees half a file */
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", ids.path, (long)getpid());
    int rc = make_dirs(ids.path) || json_dump_file(root, tmp, JSON_INDENT(1)) ||
             rename(tmp, ids.path);
    json_decref(root);
    if (rc) {
        remove(tmp);
        return cli_fail("profile: cannot write %s: %s", ids.path, strerror(errno));
    }
    snprintf(path, size, "%s", ids.path);
    return 0;
}

/* ---- auto's choice -------------------------------------------------------------------------- */

/* The points of a profile; the strings point into root. */
static int read_points(json_t *root, profile_point *pts, int max) {
    json_t *arr = json_object_get(root, "points");
    int n = 0;
    for (size_t i = 0; i < json_array_size(arr) && n < max; i++) {
        json_t *p = json_array_get(arr, i);
        const char *b = json_string_value(json_object_get(p, "backend"));
        const char *t = json_string_value(json_object_get(p, "test"));
        const char *d = json_string_value(json_object_get(p, "desc"));
        if (!b || !t || strlen(b) >= 32) continue;
        pts[n] = (profile_point){
            .backend = b, .desc = d ? d : b, .is_pp = !strcmp(t, "pp"),
            .n_tokens = (int)json_integer_value(json_object_get(p, "n_tokens")),
            .n_depth = (int)json_integer_value(json_object_get(p, "n_depth")),
            .n_threads = (int)json_integer_value(json_object_get(p, "n_threads")),
            .ts = json_number_value(json_object_get(p, "ts")),
            .sd = json_number_value(json_object_get(p, "sd"))};
        if (pts[n].n_tokens > 0 && pts[n].n_depth >= 0 && pts[n].ts > 0) n++;
    }
    return n;
}

/* Whether point a is nearer the target than b: the depth first, then the size by
 * ratio, then the thread count. */
static bool nearer(const profile_point *a, const profile_point *b, int n_tokens, int n_depth,
                   int n_threads) {
    long da = labs((long)a->n_depth - n_depth), db = labs((long)b->n_depth - n_depth);
    if (da != db) return da < db;
    double ra = fabs(log((double)a->n_tokens / n_tokens));
    double rb = fabs(log((double)b->n_tokens / n_tokens));
    if (fabs(ra - rb) > 1e-9) return ra < rb;
    return abs(a->n_threads - n_threads) < abs(b->n_threads - n_threads);
}

/* The fastest backend for one phase: each backend at its point nearest the target, the
 * best of them. Writes its name and a line on the figures; false if no point. */
static bool best_backend(const profile_point *pts, int n, bool is_pp, int n_tokens, int n_depth,
                         int n_threads, char *name, size_t n_name, char *why, size_t n_why) {
    const profile_point *near[16];
    int n_be = 0;
    for (int i = 0; i < n; i++) {
        if (pts[i].is_pp != is_pp) continue;
        int k = 0;
        while (k < n_be && strcmp(near[k]->backend, pts[i].backend)) k++;
        if (k == n_be && n_be == 16) continue;
        if (k == n_be) near[n_be++] = &pts[i];
        else if (nearer(&pts[i], near[k], n_tokens, n_depth, n_threads)) near[k] = &pts[i];
    }
    if (!n_be) return false;
    int best = 0;
    for (int k = 1; k < n_be; k++)
        if (near[k]->ts > near[best]->ts) best = k;
    snprintf(name, n_name, "%s", near[best]->backend);
    size_t len = (size_t)snprintf(why, n_why, "%s%d at depth %d: %.1f t/s", is_pp ? "pp" : "tg",
                                  near[best]->n_tokens, near[best]->n_depth, near[best]->ts);
    for (int k = 0; k < n_be && len < n_why; k++)
        if (k != best)
            len += (size_t)snprintf(why + len, n_why - len, "; %s %.1f", near[k]->backend,
                                    near[k]->ts);
    return true;
}

static int cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int profile_choose(const char *model, int n_prompt, int n_depth, int n_threads,
                   profile_choice *out) {
    *out = (profile_choice){0};
    profile_ids ids;
    if (profile_locate(model, &ids, out->why, sizeof out->why)) return 1;
    snprintf(out->path, sizeof out->path, "%s", ids.path);
    json_t *root = profile_read(ids.path);
    if (!root) {
        snprintf(out->why, sizeof out->why, "no device profile of this model on this machine "
                 "(%s; `anyllm bench -m FILE --backend all --save-profile` makes one)", ids.path);
        return 1;
    }
    profile_point *pts = malloc(MAX_POINTS * sizeof *pts);
    int n = pts ? read_points(root, pts, MAX_POINTS) : 0;
    const int threads = n_threads > 0 ? n_threads : cores();
    if (n_prompt < 1) n_prompt = 1;
    bool ok = best_backend(pts, n, true, n_prompt, n_depth, threads, out->prefill,
                           sizeof out->prefill, out->prefill_why, sizeof out->prefill_why) &&
              best_backend(pts, n, false, 128, n_depth + n_prompt, threads, out->decode,
                           sizeof out->decode, out->decode_why, sizeof out->decode_why);
    if (!ok)
        snprintf(out->why, sizeof out->why, "the device profile %s has no pp or no tg "
                 "measurement", ids.path);
    free(pts);
    json_decref(root);
    return ok ? 0 : 1;
}

/* ---- anyllm profile --------------------------------------------------------------------------- */

static void profile_usage(void) {
    printf("usage: anyllm profile -m FILE [-p N] [-d N] [-t N]\n"
           "The device profile of a model file on this machine (saved by anyllm bench\n"
           "--save-profile): the speed of each backend, and what --backend auto picks.\n"
           "options (default in brackets):\n"
           "  -m, --model FILE   the GGUF model file [required]\n"
           "  -p N               auto's choice for a prompt of N tokens [512]\n"
           "  -d N               ... after N tokens held [0]\n"
           "  -t N               ... on N CPU threads [all cores]\n"
           "  -h, --help         this help\n");
}

static void print_points(const profile_point *pts, int n) {
    printf("\n| backend | what ran | test | depth | threads | t/s |\n"
           "| --- | --- | ---: | ---: | ---: | ---: |\n");
    for (int pp = 1; pp >= 0; pp--)
        for (int i = 0; i < n; i++)
            if (pts[i].is_pp == (pp == 1))
                printf("| %s | %s | %s%d | %d | %d | %.2f ± %.2f |\n", pts[i].backend,
                       pts[i].desc, pp ? "pp" : "tg", pts[i].n_tokens, pts[i].n_depth,
                       pts[i].n_threads, pts[i].ts, pts[i].sd);
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL;
    int64_t n_prompt = 512, n_depth = 0, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return profile_usage(), 0;
        if (!v) return cli_fail("profile: option %s needs a value (see anyllm profile --help)", a);
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p") && cli_parse_i64(v, 1, 1 << 20, &n_prompt)) continue;
        else if (!strcmp(a, "-d") && cli_parse_i64(v, 0, 1 << 24, &n_depth)) continue;
        else if (!strcmp(a, "-t") && cli_parse_i64(v, 1, 256, &n_threads)) continue;
        else return cli_fail("profile: %s %s: unknown option or bad value (see anyllm profile "
                             "--help)", a, v);
    }
    if (!model) return cli_fail("profile: -m FILE is required");
    profile_choice pc;
    int rc = profile_choose(model, (int)n_prompt, (int)n_depth, (int)n_threads, &pc);
    json_t *root = rc ? NULL : profile_read(pc.path);
    if (!root) return cli_fail("profile: %s", pc.why);
    json_t *jm = json_object_get(root, "model"), *jh = json_object_get(root, "machine");
    printf("profile  %s\nmodel    %s (%lld bytes, id %s)\nmachine  %s\nsaved    %s by anyllm %s\n",
           pc.path, json_string_value(json_object_get(jm, "path")),
           (long long)json_integer_value(json_object_get(jm, "file_bytes")),
           json_string_value(json_object_get(jm, "id")),
           json_string_value(json_object_get(jh, "description")),
           json_string_value(json_object_get(root, "saved")),
           json_string_value(json_object_get(root, "anyllm")));
    profile_point *pts = malloc(MAX_POINTS * sizeof *pts);
    int n = pts ? read_points(root, pts, MAX_POINTS) : 0;
    print_points(pts, n);
    printf("\nauto, for a prompt of %lld tokens at depth %lld: prefill on %s (%s), decode on %s "
           "(%s)\n", (long long)n_prompt, (long long)n_depth, pc.prefill, pc.prefill_why,
           pc.decode, pc.decode_why);
    free(pts);
    json_decref(root);
    return 0;
}
