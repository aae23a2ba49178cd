/* xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2018),
 * seeded through splitmix64 so that any 64-bit seed gives a well-mixed state. Our own generator,
 * never libc rand(): results must be identical on every platform. */
#include "nucleus.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void nc_rng_seed(nc_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t nc_rng_next(nc_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double nc_rng_uniform(nc_rng *r) { return (double)(nc_rng_next(r) >> 11) * 0x1.0p-53; }
