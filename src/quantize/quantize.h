/* `nucleus quantize`: a GGUF file of float (or, with allow_requantize, quantised) tensors, or a
 * Hugging Face directory (converted first as llama.cpp's converter would, hf_convert.h), to a
 * GGUF file of a file type (quantize/mix.h). The metadata is copied unchanged but for
 * general.file_type and general.quantization_version (2), as llama-quantize writes them; tensors
 * keep their order, names and shapes. Rows are quantised in chunks on a thread pool. */
#ifndef NC_QUANTIZE_H
#define NC_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "quantize/hf_convert.h"
#include "quantize/mix.h"

/* Reported after each tensor is written. */
typedef struct qz_progress {
    int index, n_tensors;       /* index is 1-based */
    const char *name;
    uint32_t from, to;          /* ggml types */
    uint64_t ne[4];
    uint64_t bytes_in, bytes_out;           /* this tensor */
    uint64_t done_in, total_in, done_out;   /* the file so far */
    double seconds;             /* since the start */
    bool fallback;              /* `to` is a fallback for a row length the rules' type cannot take */
} qz_progress;

typedef struct qz_params {
    const char *input, *output;
    const qz_ftype *ftype;
    int n_threads;
    bool allow_requantize;
    qz_rules rules;
    void (*progress)(void *ud, const qz_progress *p); /* NULL for none */
    hfc_progress convert_progress; /* a Hugging Face input's conversion (NULL for none) */
    void *ud;
} qz_params;

typedef struct qz_result {
    uint64_t bytes_in, bytes_out; /* tensor data */
    int n_tensors, n_quantised;
    double seconds;
} qz_result;

/* 0, or -1 with err saying why (nothing is left at the output path then). */
int qz_quantize(const qz_params *p, qz_result *res, nc_err *err);

#endif
