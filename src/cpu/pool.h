/* pool.h: a fixed set of worker threads that run one data-parallel job at a time.
 *
 * Threads are created once, with the pool, and wait between jobs, so an op costs a
 * wake-up rather than a thread creation. A job is fn(arg, ith, nth) called once for
 * each ith in [0, nth) where nth is the pool's size; the caller's thread runs ith 0.
 * pool_run returns when every part has finished. Concurrent pool_run calls from
 * different threads are serialized.
 */
#ifndef AL_POOL_H
#define AL_POOL_H

#include "anyllm.h"

typedef struct al_pool al_pool;
typedef void (*al_pool_fn)(void *arg, int ith, int nth);

al_status pool_create(int n_threads, al_pool **out);
void pool_destroy(al_pool *p);
int pool_size(const al_pool *p);
void pool_run(al_pool *p, al_pool_fn fn, void *arg);

/* Number of online CPUs (at least 1). */
int pool_n_cpus(void);

#endif /* AL_POOL_H */
