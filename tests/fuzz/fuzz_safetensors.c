/* libFuzzer harness for the safetensors reader: parse the input as a file and, when it is
 * accepted, look every tensor up by name, read the first and last byte of its data, check its
 * description (sizes, offsets inside the buffer) and walk the metadata. libFuzzer hands over an
 * exactly-sized heap buffer, so AddressSanitizer catches any read past its end. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/safetensors.h"

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void walk_tensor(const st_file *f, const st_tensor *t, const uint8_t *data, size_t size) {
    char buf[24];
    if (st_find_tensor(f, t->t.name) != t || st_tensor_of(&t->t) != t) __builtin_trap();
    if (t->t.data_offset + t->t.n_bytes > size || t->t.data != data + t->t.data_offset) __builtin_trap();
    if (t->t.data_offset < st_data_offset(f) || t->end - t->begin != t->t.n_bytes) __builtin_trap();
    uint64_t n = 1;
    for (int i = 0; i < 4; i++) n *= t->t.ne[i];
    if (n != t->t.n_elems || t->rank > ST_MAX_DIMS) __builtin_trap();
    if (t->t.n_bytes) sink += ((const uint8_t *)t->t.data)[0] + ((const uint8_t *)t->t.data)[t->t.n_bytes - 1];
    sink += strlen(st_type_name(t->t.type, buf)) + strlen(st_dtype_name(t->dtype));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f;
    nc_err err;
    if (st_open_buffer(&f, data, size, "fuzz.safetensors", &err) != 0) {
        if (f != NULL || strncmp(err.msg, "fuzz.safetensors: ", 18) != 0) __builtin_trap();
        return 0;
    }
    for (size_t i = 0; i < st_n_tensors(f); i++) walk_tensor(f, st_tensor_at(f, i), data, size);
    for (size_t i = 0; i < st_n_metadata(f); i++) {
        const char *k, *v;
        if (st_metadata_at(f, i, &k, &v) != 0 || !st_metadata(f, k)) __builtin_trap();
        sink += strlen(k) + strlen(v);
    }
    st_close(f);
    return 0;
}
