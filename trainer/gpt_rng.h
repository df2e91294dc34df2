/* gpt_rng.h — small deterministic generators for the GPT example (private).
 *
 * splitmix64 (Steele, Lea, Flood 2014) to expand a seed and as the data
 * loader's one-word generator; xoshiro256** (Blackman, Vigna 2018) for
 * parameter initialization; Box-Muller for normals. All state is in the
 * caller's struct: no globals.
 */
#ifndef STRATA_EXAMPLES_GPT_RNG_H
#define STRATA_EXAMPLES_GPT_RNG_H

#include <math.h>
#include <stdint.h>

/* Advance *state and return the next 64 random bits. */
static inline uint64_t gpt_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct gpt_rng {
    uint64_t s[4];
    double spare;    /* second Box-Muller normal, valid when has_spare */
    int has_spare;
} gpt_rng;

static inline void gpt_rng_seed(gpt_rng *r, uint64_t seed)
{
    uint64_t sm = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = gpt_splitmix64(&sm);
    r->has_spare = 0;
    r->spare = 0.0;
}

static inline uint64_t gpt_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t gpt_rng_next(gpt_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = gpt_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = gpt_rng_rotl(s[3], 45);
    return result;
}

/* Uniform in (0, 1]: never 0, so log() below is finite. */
static inline double gpt_rng_uniform(gpt_rng *r)
{
    return (double)((gpt_rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Standard normal by Box-Muller; pairs are used in order. */
static inline double gpt_rng_normal(gpt_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = gpt_rng_uniform(r), u2 = gpt_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double th = 6.283185307179586476925 * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return rad * cos(th);
}

#endif /* STRATA_EXAMPLES_GPT_RNG_H */
