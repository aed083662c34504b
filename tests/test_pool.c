/* test_pool.c: the worker pool (src/cpu/pool.c). Every part of every job runs once,
 * with that job's argument, and pool_run returns only after all of them: back to back
 * (workers spinning), with gaps that put the workers to sleep, with parts that outlast
 * the caller's spin (the caller sleeps), with more threads than cores, and with two
 * threads calling pool_run at once. The Makefile also builds this test with
 * ThreadSanitizer (build/tsan/test_pool), which checks how a job is published and
 * its end is seen. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cpu/pool.h"
#include "test.h"

enum { MAX_THREADS = 64 };

/* ThreadSanitizer runs each job ~10x slower */
#ifdef __SANITIZE_THREAD__
enum { MANY = 10000 };
#else
enum { MANY = 100000 };
#endif

typedef struct job {
    unsigned id;                    /* the job's number: a part stores what it saw */
    unsigned seen[MAX_THREADS];     /* seen[ith]: the id part ith ran with */
    int nth[MAX_THREADS];           /* the nth part ith was given */
    int64_t busy_ns;                /* how long parts 1.. work */
} job;

static void sleep_ns(int64_t ns) {
    struct timespec t = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&t, NULL);
}

static void part(void *arg, int ith, int nth) {
    job *j = arg;
    if (ith > 0 && j->busy_ns > 0) sleep_ns(j->busy_ns);
    j->seen[ith] = j->id;
    j->nth[ith] = nth;
}

/* n_runs jobs on p, each checked when pool_run returns; gap_ns between them. */
static bool run_jobs(al_pool *p, int n_runs, int64_t gap_ns, int64_t busy_ns) {
    const int n = pool_size(p);
    job j;
    memset(&j, 0, sizeof j);
    j.busy_ns = busy_ns;
    for (int r = 0; r < n_runs; r++) {
        j.id = (unsigned)r + 1;
        pool_run(p, part, &j);
        for (int i = 0; i < n; i++)
            if (j.seen[i] != j.id || j.nth[i] != n) {
                fprintf(stderr, "  run %d: part %d of %d saw job %u (nth %d)\n", r, i, n,
                        j.seen[i], j.nth[i]);
                return false;
            }
        if (gap_ns > 0) sleep_ns(gap_ns);
    }
    return true;
}

static void test_back_to_back(void) {
    al_pool *p = NULL;
    CHECK(pool_create(2, &p) == AL_OK);
    if (!p) return;
    CHECK(pool_size(p) == 2);
    CHECK(run_jobs(p, MANY, 0, 0));
    pool_destroy(p);
}

/* 2 ms between jobs: longer than the workers spin, so each job wakes them. */
static void test_workers_sleep(void) {
    al_pool *p = NULL;
    CHECK(pool_create(3, &p) == AL_OK);
    if (!p) return;
    CHECK(run_jobs(p, 50, 2000000, 0));
    pool_destroy(p);
}

/* Parts of 2 ms on the workers: the caller finishes its own and sleeps. */
static void test_caller_sleeps(void) {
    al_pool *p = NULL;
    CHECK(pool_create(2, &p) == AL_OK);
    if (!p) return;
    CHECK(run_jobs(p, 50, 0, 2000000));
    /* and jobs that end at about when the sleeper gives up spinning */
    for (int64_t busy = 1000; busy <= 512000; busy *= 2) CHECK(run_jobs(p, 20, busy / 2, busy));
    pool_destroy(p);
}

/* More threads than cores: the short spin. */
static void test_oversubscribed(void) {
    const int n = pool_n_cpus() * 2 + 1 > MAX_THREADS ? MAX_THREADS : pool_n_cpus() * 2 + 1;
    al_pool *p = NULL;
    CHECK(pool_create(n, &p) == AL_OK);
    if (!p) return;
    CHECK(pool_size(p) == n);
    CHECK(run_jobs(p, MANY / 20, 0, 0));
    CHECK(run_jobs(p, 20, 1000000, 0));
    pool_destroy(p);
}

typedef struct caller {
    al_pool *p;
    bool ok;
} caller;

static void *call_jobs(void *arg) {
    caller *c = arg;
    c->ok = run_jobs(c->p, MANY / 5, 0, 0);
    return NULL;
}

/* Two threads call pool_run at once: their jobs take turns, each whole. */
static void test_two_callers(void) {
    al_pool *p = NULL;
    CHECK(pool_create(2, &p) == AL_OK);
    if (!p) return;
    caller a = {p, false}, b = {p, false};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, call_jobs, &a) == 0);
    CHECK(pthread_create(&tb, NULL, call_jobs, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.ok && b.ok);
    pool_destroy(p);
}

/* Destroyed while its workers spin, and while they sleep: both return. */
static void test_destroy(void) {
    for (int sleep_first = 0; sleep_first < 2; sleep_first++) {
        al_pool *p = NULL;
        CHECK(pool_create(4, &p) == AL_OK);
        if (!p) return;
        CHECK(run_jobs(p, 10, 0, 0));
        if (sleep_first) sleep_ns(50000000);
        pool_destroy(p);
    }
    al_pool *p = NULL;
    CHECK(pool_create(1, &p) == AL_OK); /* the caller alone */
    if (!p) return;
    CHECK(run_jobs(p, 10, 0, 0));
    pool_destroy(p);
    CHECK(pool_create(MAX_THREADS * 8, &p) != AL_OK && p == NULL);
}

int main(void) {
    TEST_RUN(test_back_to_back);
    TEST_RUN(test_workers_sleep);
    TEST_RUN(test_caller_sleeps);
    TEST_RUN(test_oversubscribed);
    TEST_RUN(test_two_callers);
    TEST_RUN(test_destroy);
    return test_finish();
}
