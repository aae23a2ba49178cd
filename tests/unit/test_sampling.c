#include <math.h>

#include "nucleus.h"
#include "test.h"

int main(void) {
    /* xoshiro256** from splitmix64(0): the first outputs are fixed forever (reproducibility) */
    nc_rng a, b;
    nc_rng_seed(&a, 12345);
    nc_rng_seed(&b, 12345);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= nc_rng_next(&a) == nc_rng_next(&b);
    CHECK(same);
    /* splitmix64 reference values (Vigna's splitmix64.c): seed 0 -> first output 0xe220a8397b1dcdaf */
    nc_rng z;
    nc_rng_seed(&z, 0);
    CHECK(z.s[0] == 0xe220a8397b1dcdafull);
    CHECK(z.s[1] == 0x6e789e6aa1b965f4ull);
    /* xoshiro256** with state {1, 2, 3, 4}: first output rotl(2 * 5, 7) * 9 = 11520 */
    nc_rng x = {{1, 2, 3, 4}};
    CHECK(nc_rng_next(&x) == 11520u);
    double mn = 1, mx = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = nc_rng_uniform(&a);
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
        sum += u;
    }
    CHECK(mn >= 0 && mx < 1);
    CHECK_NEAR(sum / 100000, 0.5, 0.005);

    float logits[5] = {3, 2, 1, 0.5f, 0.1f};
    CHECK(nc_sample_greedy(logits, 5) == 0);
    float tie[3] = {1, 5, 5};
    CHECK(nc_sample_greedy(tie, 3) == 1);
    CHECK(nc_sample_temperature(logits, 5, 0, &a) == 0);
    /* frequencies at T = 0.5 match softmax(logits / 0.5): p0 = e^6 / (e^6 + e^4 + e^2 + e^1 + e^0.2) */
    for (int k = 0; k < 2; k++) {
        double T = k ? 2.0 : 0.5, zsum = 0, p[5];
        for (int i = 0; i < 5; i++) zsum += exp(logits[i] / T);
        for (int i = 0; i < 5; i++) p[i] = exp(logits[i] / T) / zsum;
        int counts[5] = {0};
        nc_rng r;
        nc_rng_seed(&r, 99);
        int N = 100000;
        for (int i = 0; i < N; i++) counts[nc_sample_temperature(logits, 5, (float)T, &r)]++;
        double chi2 = 0;
        for (int i = 0; i < 5; i++) chi2 += (counts[i] - N * p[i]) * (counts[i] - N * p[i]) / (N * p[i]);
        /* 4 degrees of freedom: P(chi2 > 18.47) = 0.001 */
        CHECK_MSG(chi2 < 18.47, "T=%g chi2=%g", T, chi2);
    }
    return test_summary("sampling");
}
