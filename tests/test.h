/* A minimal unit-test harness: CHECK records a failure and goes on; test_summary() prints the
 * line CI reads ("N passed, N failed") and returns the exit status. */
#ifndef NC_TEST_H
#define NC_TEST_H

#include <math.h>
#include <stdio.h>

static int test_passed, test_failed;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (cond) test_passed++;                                                             \
        else { test_failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                 \
    do {                                                                                     \
        if (cond) test_passed++;                                                             \
        else {                                                                               \
            test_failed++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)", (double)(a), (double)(b), (double)(tol))

static inline int test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
