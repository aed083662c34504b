/* profile.h: device profiles: how fast each backend of this machine runs a model file.
 *
 * `anyllm bench --save-profile` stores the measured pp and tg of each backend, at each
 * prompt size, generation length, depth and thread count it measured, in a small JSON
 * file per model file and machine under the user's cache directory:
 *   $XDG_CACHE_HOME/anyllm/profiles/MODEL-MACHINE.json  (else ~/.cache/anyllm/...)
 * A later save merges its points into the file, replacing the ones measured again.
 * `--backend auto` (run, chat) reads it to put each phase on its fastest backend
 * (split.h), and `anyllm profile -m FILE` shows it.
 *
 * MODEL identifies the file's contents: a 64-bit FNV-1a hash of its size and of its
 * first and last MiB. That reads 2 MiB whatever the size (hashing a 20 GB file would
 * take longer than the runs it speeds up), and still tells apart the files that
 * matter: another quantization differs in size and header, another fine-tune of one
 * architecture (same header, maybe same size) in the weights at its end. A file
 * changed only in its middle, with size, header and tail kept, would pass for the
 * same; a profile is a speed hint, so that is acceptable.
 * MACHINE identifies the hardware: a hash of the CPU's model name and the backends
 * al_backend_list names (each Vulkan device's name). */
#ifndef AL_PROFILE_H
#define AL_PROFILE_H

#include <stdbool.h>
#include <stddef.h>

/* One measurement, as bench made it. */
typedef struct profile_point {
    const char *backend; /* as --backend takes it: cpu, cpu:precise, vulkan:N */
    const char *desc;    /* what ran, al_model_info.backend: "cpu avx2 q8" */
    bool is_pp;          /* pp: a prompt of n_tokens; else tg: n_tokens one at a time */
    int n_tokens, n_depth, n_threads;
    double ts, sd;       /* tokens/s, mean and standard deviation */
} profile_point;

/* Saves (merges) the points of one model file; *path gets the file's name. 0 or an exit
 * status (message printed). */
int profile_save(const char *model, const profile_point *pts, int n, char *path, size_t size);

/* auto's choice for a prompt of n_prompt tokens after n_depth held, on n_threads CPU
 * threads (0: all cores). */
typedef struct profile_choice {
    char prefill[32], decode[32]; /* backend names */
    char prefill_why[128];        /* e.g. "pp512 at depth 0: <speed>; cpu <speed>" */
    char decode_why[128];
    char path[768];               /* the profile read */
    char why[1024];               /* when there is no choice: why not */
} profile_choice;

/* The fastest backend per phase by the profile: for the prompt, the best pp at the
 * measured point nearest n_prompt tokens at depth n_depth (the nearest depth first,
 * then the nearest size by ratio); for the tokens, the best tg at the depth nearest
 * n_depth + n_prompt, where they start. Returns 0, or 1 with out->why set when there
 * is no profile (or no usable point in it). */
int profile_choose(const char *model, int n_prompt, int n_depth, int n_threads,
                   profile_choice *out);

#endif /* AL_PROFILE_H */
