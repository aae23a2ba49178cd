/* A readable listing of a Hugging Face model directory: config.json's keys (long values cut),
 * the weight files and every tensor (dtype, shape as the file writes it, bytes, file, offset). */
#ifndef NC_HF_DUMP_H
#define NC_HF_DUMP_H

#include <stdio.h>

#include "format/hf_dir.h"

/* Writes the listing to out; returns 0, or -1 when writing failed. */
int hf_dump(const hf_dir *d, FILE *out);

#endif
