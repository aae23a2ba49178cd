/* The two plain decoding rules the core engine needs: greedy and temperature sampling. */
#include <math.h>
#include <stdlib.h>

#include "nucleus.h"

int32_t nc_sample_greedy(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* p_i = exp((l_i - max) / T) / Z, then the first id whose cumulative probability passes a
 * uniform draw. Double precision sums keep the draw exact enough for 100k-token vocabularies. */
int32_t nc_sample_temperature(const float *logits, int32_t n, float temp, nc_rng *rng) {
    if (!(temp > 0)) return nc_sample_greedy(logits, n);
    int32_t best = nc_sample_greedy(logits, n);
    double mx = logits[best], z = 0;
    for (int32_t i = 0; i < n; i++) z += exp(((double)logits[i] - mx) / temp);
    double u = nc_rng_uniform(rng) * z, acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp(((double)logits[i] - mx) / temp);
        if (u < acc) return i;
    }
    return best; /* u landed on rounding slack at the very end */
}
