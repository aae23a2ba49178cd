/* Compares two quantisations of one GGUF file tensor by tensor: ours (nucleus quantize) and
 * theirs (llama-quantize), against the unquantised source. One line per tensor of SOURCE:
 *   NAME OUR_TYPE THEIR_TYPE SAME OURS_ERR THEIRS_ERR
 * SAME is 1 when the two tensors' bytes are identical; the errors are the relative RMS errors of
 * the dequantised tensors against the source, sqrt(sum (q - x)^2 / sum x^2). Then a line
 * "files: SAME_TABLE" (1 when both files list the same tensors in the same order with the same
 * types and shapes). Exit status 2 on a usage error or an unreadable file. Used by
 * tests/e2e/quantize.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "tensor/quant.h"

static double rel_err(const gguf_tensor *q, const gguf_tensor *x) {
    int64_t cols = (int64_t)x->ne[0], rows = (int64_t)(x->n_elems / x->ne[0]);
    float *a = malloc(sizeof(float) * (size_t)cols), *b = malloc(sizeof(float) * (size_t)cols);
    double e2 = 0, r2 = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row(q->type, (const uint8_t *)q->data + quant_row_bytes(q->type, cols) * (size_t)r, a, cols);
        quant_dequantize_row(x->type, (const uint8_t *)x->data + quant_row_bytes(x->type, cols) * (size_t)r, b, cols);
        for (int64_t k = 0; k < cols; k++) {
            e2 += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
            r2 += (double)b[k] * b[k];
        }
    }
    free(a);
    free(b);
    return r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: quant_compare SOURCE OURS THEIRS\n");
        return 2;
    }
    gguf_file *f[3];
    for (int i = 0; i < 3; i++) {
        nc_err err;
        if (gguf_open(&f[i], argv[i + 1], &err)) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 2;
        }
    }
    for (size_t i = 0; i < gguf_n_tensors(f[0]); i++) {
        const gguf_tensor *x = gguf_tensor_at(f[0], i);
        const gguf_tensor *a = gguf_find_tensor(f[1], x->name), *b = gguf_find_tensor(f[2], x->name);
        char ta[24], tb[24];
        if (!a || !b || a->n_elems != x->n_elems || b->n_elems != x->n_elems || !quant_type_supported(a->type) ||
            !quant_type_supported(b->type)) {
            printf("%s missing-or-unreadable\n", x->name);
            continue;
        }
        int same = a->n_bytes == b->n_bytes && !memcmp(a->data, b->data, a->n_bytes);
        printf("%s %s %s %d %.6f %.6f\n", x->name, ggml_type_name(a->type, ta), ggml_type_name(b->type, tb), same,
               rel_err(a, x), rel_err(b, x));
    }
    int same_table = gguf_n_tensors(f[1]) == gguf_n_tensors(f[2]);
    for (size_t i = 0; same_table && i < gguf_n_tensors(f[1]); i++) {
        const gguf_tensor *a = gguf_tensor_at(f[1], i), *b = gguf_tensor_at(f[2], i);
        same_table = !strcmp(a->name, b->name) && a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne);
    }
    printf("files: %d\n", same_table);
    for (int i = 0; i < 3; i++) gguf_close(f[i]);
    return 0;
}
