/* A GGUF model in parts, as llama.cpp's gguf-split writes one: NAME-00001-of-0000N.gguf holds the
 * metadata and some tensors, the other parts (found beside it by name) the rest. Each part is a
 * GGUF file of its own (format/gguf.h) carrying split.no and split.count; a tensor is in exactly
 * one part. The parts stay mmapped; their tensors are found through one lookup. */
#ifndef NC_GGUF_SPLIT_H
#define NC_GGUF_SPLIT_H

#include "format/gguf.h"

typedef struct gguf_split gguf_split;

/* The number of parts first says it is one of (split.count; 1 for a whole file), or -1 with err
 * set when the key is malformed. */
int gguf_split_count(const gguf_file *first, nc_err *err);
/* Open the other parts of the split whose first part is `first` (its path must name it as part 1
 * of split.count) and check them: the same count, each its own number, no tensor in two parts,
 * split.tensors.count tensors in all. On success *out owns `first` too. */
int gguf_split_open(gguf_split **out, gguf_file *first, nc_err *err);
void gguf_split_close(gguf_split *s);

const gguf_tensor *gguf_split_find_tensor(const gguf_split *s, const char *name);
uint64_t gguf_split_bytes(const gguf_split *s);  /* of every part */

#endif
