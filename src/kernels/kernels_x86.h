/* Pieces the x86 kernel sets (AVX2, AVX-512) share: SSE code both compile with their own flags. */
#ifndef NC_KERNELS_X86_H
#define NC_KERNELS_X86_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

/* The 32 codes of a Q8_0 or Q4_0 block (src: the block, its F16 scale first) as two vectors of
 * 16 signed bytes, codes 0..15 and 16..31 (Q4_0: byte i holds code i in its low nibble, code
 * 16 + i in its high one, both offset by 8). */
static inline void x86_block_codes(bool q8, const uint8_t *src, __m128i *lo, __m128i *hi) {
    if (q8) {
        *lo = _mm_loadu_si128((const __m128i *)(src + 2));
        *hi = _mm_loadu_si128((const __m128i *)(src + 18));
        return;
    }
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    __m128i q = _mm_loadu_si128((const __m128i *)(src + 2));
    *lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);
    *hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
}

/* The float matmuls' prefetch: while a panel (rows [ra, ra + pr) of W, elements [k0, k0 + kn),
 * es bytes each) computes through its tiles of tokens, the next panel's weights (the next k-block
 * of these rows, else the next rows' first) are fetched, tile `tile` of `tiles` fetching its
 * share: a model's weights stream from memory, and the panel's widening would wait on them.
 * Rows end at r1, k-blocks hold kb elements of the cols. */
static inline __attribute__((always_inline)) void x86_prefetch_next_panel(const uint8_t *W, size_t rb, size_t es,
                                                                          int cols, int kb, int r1, int ra, int pr,
                                                                          int k0, int kn, int tile, int tiles) {
    const int nk = k0 + kn < cols ? k0 + kn : 0, nra = nk ? ra : ra + pr;
    const int nrows = nra >= r1 ? 0 : r1 - nra < pr ? r1 - nra : pr;
    const int lpr = (int)(((size_t)(cols - nk < kb ? cols - nk : kb) * es + 63) / 64), lines = nrows * lpr;
    if (!lines) return; /* the last panel: nothing next (and no pointer past the matrix) */
    const uint8_t *next = W + (size_t)nra * rb + (size_t)nk * es;
    for (int i = lines * tile / tiles; i < lines * (tile + 1) / tiles; i++)
        _mm_prefetch((const char *)next + (size_t)(i / lpr) * rb + 64 * (size_t)(i % lpr), _MM_HINT_T0);
}

/* A block's F16 scale (F16C converts it exactly). */
static inline float x86_block_scale(const uint8_t *src) { return _cvtsh_ss((unsigned short)(src[0] | src[1] << 8)); }

#endif
