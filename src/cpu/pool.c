/* pool.c: worker threads for pool.h.
 *
 * A job is published by storing fn and arg and bumping a generation counter; workers
 * spin on the counter, and the caller on the pending count, before sleeping on a
 * condition variable: a decode step runs a few hundred short ops back to back, and a
 * futex wake-up for each (~70 us measured) would cost more than the op itself
 * (spinning: ~1 us per empty job). The mutex is taken only to sleep and to wake a
 * sleeper: taken on every job, it made a worker that saw the new generation while the
 * caller still held it sleep in the kernel, in one job of 4 to 8 of a decode.
 */
#include "pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "util.h"

/* Spins before sleeping. With a core for every thread, long: the gaps between a
 * decode step's pool runs (the caller's own small ops) had outlasted 20,000 spins, and
 * the futex wake-ups cost bench-qwen-0.5b 2-13% of its decode on a 2-core Zen 4. With
 * more threads than cores, short: a spinning thread holds the core that the thread it
 * waits for needs (test_kernels' 3-thread backends on 2 cores ran 40% longer at
 * 200,000). */
enum { SPIN_LONG = 200000, SPIN_SHORT = 20000 };

struct al_pool {
    int n_threads;
    pthread_t *threads;      /* [n_threads - 1]; the caller is worker 0 */
    pthread_mutex_t run_lock; /* serializes pool_run callers */
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* workers wait for a new generation */
    pthread_cond_t done;     /* the caller waits for n_pending == 0 */
    al_pool_fn fn;
    void *arg;
    unsigned generation;     /* bumped per job, after fn and arg are stored */
    int n_pending;           /* workers still running the current job */
    int n_sleeping;          /* workers waiting on wake (or about to) */
    bool caller_sleeping;    /* the caller waits on done (or is about to) */
    int spin;                /* SPIN_LONG or SPIN_SHORT */
    bool quit;
};

typedef struct worker_arg {
    al_pool *pool;
    int ith;
} worker_arg;

/* Sleeping and waking pair up like this: each side stores its own flag (n_sleeping,
 * generation; caller_sleeping, n_pending) and then loads the other's, all sequentially
 * consistent, so at least one of the two sees the other's store: either the sleeper
 * finds the job done or published, or the waker finds a sleeper and signals it under
 * the mutex, which the sleeper holds until it waits. */
static void *worker_main(void *varg) {
    worker_arg *wa = varg;
    al_pool *p = wa->pool;
    int ith = wa->ith;
    al_free(wa);
    unsigned seen = 0;
    for (;;) {
        bool fresh = false;
        for (int i = 0; i < p->spin && !fresh; i++)
            fresh = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE) != seen ||
                    __atomic_load_n(&p->quit, __ATOMIC_ACQUIRE);
        if (!fresh) {
            pthread_mutex_lock(&p->lock);
            __atomic_add_fetch(&p->n_sleeping, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&p->generation, __ATOMIC_SEQ_CST) == seen &&
                   !__atomic_load_n(&p->quit, __ATOMIC_SEQ_CST))
                pthread_cond_wait(&p->wake, &p->lock);
            __atomic_sub_fetch(&p->n_sleeping, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&p->lock);
        }
        if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE)) return NULL;
        /* The caller publishes the next job only after every worker has finished this
         * one, so the generation moved exactly once. */
        seen = __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE);

        p->fn(p->arg, ith, p->n_threads);

        if (__atomic_sub_fetch(&p->n_pending, 1, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&p->caller_sleeping, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
}

int pool_n_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

al_status pool_create(int n_threads, al_pool **out) {
    *out = NULL;
    if (n_threads <= 0) n_threads = pool_n_cpus();
    if (n_threads > 256) return al_error(AL_ERR_ARG, "n_threads %d exceeds 256", n_threads);
    al_pool *p = al_calloc(1, sizeof *p);
    if (!p) return al_error(AL_ERR_NOMEM, "out of memory creating a thread pool");
    p->n_threads = 1;
    p->spin = n_threads <= pool_n_cpus() ? SPIN_LONG : SPIN_SHORT;
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = al_calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) goto nomem;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = al_malloc(sizeof *wa);
        if (!wa) goto nomem;
        *wa = (worker_arg){.pool = p, .ith = i};
        if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            al_free(wa);
            pool_destroy(p);
            return al_error(AL_ERR_NOMEM, "cannot create worker thread %d of %d", i,
                            n_threads);
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return AL_OK;
nomem:
    pool_destroy(p);
    return al_error(AL_ERR_NOMEM, "out of memory creating a thread pool");
}

void pool_destroy(al_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&p->quit, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    al_free(p->threads);
    al_free(p);
}

int pool_size(const al_pool *p) { return p->n_threads; }

void pool_run(al_pool *p, al_pool_fn fn, void *arg) {
    if (p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_lock);
    p->fn = fn;
    p->arg = arg;
    __atomic_store_n(&p->n_pending, p->n_threads - 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->generation, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->n_sleeping, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }

    fn(arg, 0, p->n_threads);

    for (int i = 0; i < p->spin && __atomic_load_n(&p->n_pending, __ATOMIC_ACQUIRE) > 0; i++)
        ;
    if (__atomic_load_n(&p->n_pending, __ATOMIC_ACQUIRE) > 0) {
        pthread_mutex_lock(&p->lock);
        __atomic_store_n(&p->caller_sleeping, true, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&p->n_pending, __ATOMIC_SEQ_CST) > 0)
            pthread_cond_wait(&p->done, &p->lock);
        __atomic_store_n(&p->caller_sleeping, false, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->run_lock);
}
