/* A file mapped read-only, shared by the format readers (GGUF, safetensors): their weights are
 * used in place. */
#ifndef NC_FMT_MAPPED_H
#define NC_FMT_MAPPED_H

#include <stddef.h>

#include "nucleus.h"

/* Map the regular file at path (anything else is refused before it is opened for good:
 * nc_open_regular). An empty file gives *data = "" and *size = 0 (nothing to map:
 * the parser then names what is missing); *map is what fmt_unmap releases (NULL for none). */
int fmt_map(const char *path, const void **data, size_t *size, void **map, nc_err *err);
void fmt_unmap(void *map, size_t size);

#endif
