/* libFuzzer harness for the GGUF reader: parse the input as a file and, when it is accepted,
 * read every key through every getter, every array element, every tensor's first and last data
 * byte, and list it all with gguf_dump. libFuzzer hands over an exactly-sized heap buffer, so
 * AddressSanitizer catches any read past its end. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/gguf.h"
#include "format/gguf_dump.h"

static volatile uint64_t sink; /* keeps the reads from being optimised away */

static void walk_array(const gguf_kv *kv) {
    char buf[64];
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        if (kv->v.arr.type == GGUF_T_STRING) sink += gguf_escape(buf, sizeof buf, gguf_arr_str(kv, i));
        else if (kv->v.arr.type != GGUF_T_ARRAY) sink += (uint64_t)gguf_arr_int(kv, i) + (gguf_arr_float(kv, i) > 0);
    }
}

static void walk_kv(const gguf_file *f, const gguf_kv *kv) {
    nc_err err;
    int64_t i;
    uint32_t u;
    double d;
    bool b;
    gguf_str s;
    const gguf_kv *arr;
    char buf[64];
    if (gguf_find_kv(f, kv->key) != kv) __builtin_trap();
    sink += (uint64_t)gguf_get_int(f, kv->key, &i, &err) + (uint64_t)gguf_get_uint32(f, kv->key, &u, &err);
    sink += (uint64_t)gguf_get_float(f, kv->key, &d, &err) + (uint64_t)gguf_get_bool(f, kv->key, &b, &err);
    if (gguf_get_str(f, kv->key, &s, &err) == 1) sink += gguf_escape(buf, sizeof buf, s);
    static const gguf_vtype elems[] = {GGUF_T_INT32, GGUF_T_FLOAT32, GGUF_T_STRING, GGUF_T_BOOL, GGUF_T_ARRAY};
    for (size_t e = 0; e < sizeof elems / sizeof elems[0]; e++)
        if (gguf_get_arr(f, kv->key, elems[e], &arr, &err) == 1) walk_array(arr);
}

static void walk_tensor(const gguf_file *f, const gguf_tensor *t) {
    if (gguf_find_tensor(f, t->name) != t) __builtin_trap();
    const uint8_t *data = t->data;
    sink += data[0] + data[t->n_bytes - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) return 0;
    gguf_file *f;
    nc_err err;
    if (gguf_open_buffer(&f, data, size, "fuzz.gguf", &err) != 0) {
        if (f != NULL || strncmp(err.msg, "fuzz.gguf: ", 11) != 0) __builtin_trap();
        return 0;
    }
    for (size_t i = 0; i < gguf_n_kv(f); i++) walk_kv(f, gguf_kv_at(f, i));
    for (size_t i = 0; i < gguf_n_tensors(f); i++) walk_tensor(f, gguf_tensor_at(f, i));
    gguf_dump(f, devnull);
    gguf_close(f);
    return 0;
}
