/* The 16-row interleaved layout of weights (kernels.h, KERNELS_ILV): converting to it and back. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels_impl.h"

/* Block o (a byte offset into the rows) of 16 plain rows, rb bytes apart, into its record. */
static void to_record(uint32_t type, const uint8_t *plain, size_t rb, uint8_t *rec) {
    size_t q0, qn, bb = int_block_bytes(type);
    ilv_region(type, &q0, &qn);
    size_t hn = bb - qn; /* a row's bytes outside the region */
    for (int r = 0; r < KERNELS_ILV_ROWS; r++) {
        const uint8_t *blk = plain + (size_t)r * rb;
        memcpy(rec + (size_t)r * hn, blk, q0);
        memcpy(rec + (size_t)r * hn + q0, blk + q0 + qn, bb - q0 - qn);
        for (size_t c = 0; c < qn / 4; c++) memcpy(rec + KERNELS_ILV_ROWS * hn + (c * KERNELS_ILV_ROWS + (size_t)r) * 4, blk + q0 + 4 * c, 4);
    }
}

static void from_record(uint32_t type, const uint8_t *rec, uint8_t *plain, size_t rb) {
    size_t q0, qn, bb = int_block_bytes(type);
    ilv_region(type, &q0, &qn);
    size_t hn = bb - qn;
    for (int r = 0; r < KERNELS_ILV_ROWS; r++) {
        uint8_t *blk = plain + (size_t)r * rb;
        memcpy(blk, rec + (size_t)r * hn, q0);
        memcpy(blk + q0 + qn, rec + (size_t)r * hn + q0, bb - q0 - qn);
        for (size_t c = 0; c < qn / 4; c++) memcpy(blk + q0 + 4 * c, rec + KERNELS_ILV_ROWS * hn + (c * KERNELS_ILV_ROWS + (size_t)r) * 4, 4);
    }
}

void kernels_interleave(uint32_t type, const void *src, void *dst, int rows, int cols) {
    size_t rb = quant_row_bytes(type, cols), bb = int_block_bytes(type);
    for (int r = 0; r < rows; r += KERNELS_ILV_ROWS)
        for (size_t o = 0; o < rb; o += bb)
            to_record(type, (const uint8_t *)src + (size_t)r * rb + o, rb, (uint8_t *)dst + (size_t)r * rb + KERNELS_ILV_ROWS * o);
}

void ilv_deinterleave(uint32_t type, const void *src, void *dst, int rows, int cols) {
    size_t rb = quant_row_bytes(type, cols), bb = int_block_bytes(type);
    for (int r = 0; r < rows; r += KERNELS_ILV_ROWS)
        for (size_t o = 0; o < rb; o += bb)
            from_record(type, (const uint8_t *)src + (size_t)r * rb + KERNELS_ILV_ROWS * o, (uint8_t *)dst + (size_t)r * rb + o, rb);
}
