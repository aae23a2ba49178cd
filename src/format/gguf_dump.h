/* A readable listing of a parsed GGUF file: a header line, every key/value pair (long arrays
 * and strings abbreviated, unprintable bytes escaped) and the tensor table. */
#ifndef NC_GGUF_DUMP_H
#define NC_GGUF_DUMP_H

#include <stdio.h>

#include "format/gguf.h"

/* Writes the listing to out; returns 0, or -1 when writing failed. */
int gguf_dump(const gguf_file *f, FILE *out);

#endif
