/* Hugging Face directories: every shared one (shared/archs/<name>/hf, TinyStories) against its
 * safetensors header and config.json read independently here; a sharded directory built here
 * from one of them, and every way its index can be wrong; missing files; chat templates. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/hf_dir.h"
#include "test.h"
#include "test_files.h"

static const char *const DIRS[] = {
    "archs/gemma2/hf", "archs/gemma3/hf", "archs/gptoss/hf",  "archs/granite/hf", "archs/llama3/hf",
    "archs/mixtral/hf", "archs/olmo2/hf", "archs/phi3/hf",    "archs/qwen2/hf",   "archs/qwen3/hf",
    "archs/qwen3moe/hf", "archs/smollm3/hf", "models/tinystories-656k/hf"};

static void remove_file(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
}

static float bf16_to_f32(const unsigned char *p) {
    uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ---- the shared directories ------------------------------------------------------------------ */

/* One tensor of the header as this test reads it, against what hf_dir says. */
static void check_tensor(const hf_dir *d, const cJSON *entry, const unsigned char *file, uint64_t data_start,
                         const char *where) {
    const char *name = entry->string, *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype")->valuestring;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    uint64_t begin = (uint64_t)offs->child->valuedouble, end = (uint64_t)offs->child->next->valuedouble;
    const fmt_tensor *t = hf_dir_find_tensor(d, name);
    const st_tensor *st = hf_dir_find_st_tensor(d, name);
    CHECK_MSG(t && st && &st->t == t, "%s: tensor %s not found", where, name);
    if (!t) return;
    int rank = cJSON_GetArraySize(shape);
    bool shape_ok = (int)st->rank == rank && (int)t->n_dims == (rank ? rank : 1);
    for (int i = 0; i < rank && shape_ok && i < 4; i++)
        shape_ok = t->ne[i] == (uint64_t)cJSON_GetArrayItem(shape, rank - 1 - i)->valuedouble;
    char buf[24];
    CHECK_MSG(shape_ok, "%s: %s: shape", where, name);
    CHECK_MSG(strcmp(st_dtype_name(st->dtype), dtype) == 0 && strcmp(st_type_name(t->type, buf), dtype) == 0,
              "%s: %s: dtype %s", where, name, dtype);
    CHECK_MSG(t->n_bytes == end - begin && t->data_offset == data_start + begin, "%s: %s: offsets", where, name);
    size_t k = t->n_bytes < 64 ? (size_t)t->n_bytes : 64;
    CHECK_MSG(memcmp(t->data, file + data_start + begin, k) == 0, "%s: %s: data", where, name);
    if (strcmp(dtype, "BF16") == 0 && t->n_bytes >= 2) {
        float a = bf16_to_f32(t->data), b = bf16_to_f32(file + data_start + begin);
        CHECK_MSG(isfinite(a) && a == b, "%s: %s: first value %g vs %g", where, name, a, b);
    }
}

static void test_one_shared_dir(const char *rel) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", test_shared_dir(), rel);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    nc_err err;
    hf_dir *d = NULL;
    CHECK_MSG(hf_dir_open(&d, dir, &err) == 0, "%s", err.msg);
    size_t len = 0;
    unsigned char *file = (unsigned char *)test_read_all(path, &len);
    CHECK_MSG(file && len > 8, "%s: cannot read", path);
    if (!d || !file) {
        hf_dir_close(d);
        free(file);
        return;
    }
    uint64_t n;
    memcpy(&n, file, 8);
    cJSON *header = cJSON_ParseWithLength((const char *)file + 8, (size_t)n);
    CHECK_MSG(header, "%s: header", path);
    int entries = 0;
    const cJSON *e, *first = NULL, *last = NULL, *embed = NULL;
    cJSON_ArrayForEach(e, header) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        entries++;
        if (!first) first = e;
        last = e;
        if (strstr(e->string, "embed_tokens")) embed = e;
    }
    CHECK_MSG(hf_dir_n_tensors(d) == (size_t)entries && entries > 5, "%s: %zu tensors, the header has %d", rel,
              hf_dir_n_tensors(d), entries);
    CHECK(hf_dir_n_files(d) == 1 && hf_dir_file_bytes(d) == len && st_file_size(hf_dir_file_at(d, 0)) == len);
    if (first) check_tensor(d, first, file, 8 + n, rel);
    if (last) check_tensor(d, last, file, 8 + n, rel);
    if (embed) check_tensor(d, embed, file, 8 + n, rel);
    else { /* tied and saved once: __metadata__ names the copy kept */
        const cJSON *alias = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(header, "__metadata__"),
                                                              "model.embed_tokens.weight");
        CHECK_MSG(cJSON_IsString(alias) && hf_dir_find_tensor(d, "model.embed_tokens.weight") ==
                                               hf_dir_find_tensor(d, alias->valuestring),
                  "%s: no embedding", rel);
    }
    /* tensor_at lists them all, each found by name in its file */
    size_t found = 0;
    for (size_t i = 0; i < hf_dir_n_tensors(d); i++) {
        const fmt_tensor *t = hf_dir_tensor_at(d, i);
        found += hf_dir_find_tensor(d, t->name) == t && hf_dir_file_of(d, t) == hf_dir_file_at(d, 0);
    }
    CHECK(found == hf_dir_n_tensors(d) && !hf_dir_tensor_at(d, found) && !hf_dir_find_tensor(d, "nope"));
    /* config.json */
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = test_read_all(path, NULL);
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(hf_dir_config(d), "model_type");
    CHECK_MSG(cfg && cJSON_IsString(mt) &&
                  strcmp(mt->valuestring, cJSON_GetObjectItemCaseSensitive(cfg, "model_type")->valuestring) == 0 &&
                  cJSON_Compare(cfg, hf_dir_config(d), true),
              "%s: config.json", rel);
    /* chat template: chat_template.jinja where there is one */
    char *tmpl;
    size_t tlen;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    size_t jlen = 0;
    char *jinja = test_read_all(path, &jlen);
    int r = hf_dir_chat_template(d, &tmpl, &tlen, &err);
    if (jinja) CHECK_MSG(r == 1 && tlen == jlen && memcmp(tmpl, jinja, jlen) == 0, "%s: chat template", rel);
    else CHECK_MSG(r == 0 && !tmpl, "%s: no chat template expected (r %d)", rel, r);
    free(tmpl);
    free(jinja);
    cJSON_Delete(cfg);
    free(text);
    cJSON_Delete(header);
    free(file);
    CHECK(strstr(hf_dir_path(d), rel) != NULL);
    hf_dir_close(d);
}

/* ---- a sharded directory built here ----------------------------------------------------------- */

/* Writes the tensors [from, to) of src as a safetensors file (header padded to 8 bytes). */
static void write_shard(const char *dir, const char *name, const hf_dir *src, size_t from, size_t to) {
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (size_t i = from; i < to; i++) {
        const fmt_tensor *t = hf_dir_tensor_at(src, i);
        const st_tensor *st = st_tensor_of(t);
        cJSON *e = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(st->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (uint32_t k = 0; k < st->rank; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)st->shape[k]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t->n_bytes)));
        off += t->n_bytes;
    }
    char *text = cJSON_PrintUnformatted(h);
    size_t tl = strlen(text), hl = (tl + 7) / 8 * 8;
    unsigned char *buf = malloc(8 + hl + off);
    uint64_t hl64 = hl;
    memcpy(buf, &hl64, 8);
    memcpy(buf + 8, text, tl);
    memset(buf + 8 + tl, ' ', hl - tl);
    off = 0;
    for (size_t i = from; i < to; i++) {
        const fmt_tensor *t = hf_dir_tensor_at(src, i);
        memcpy(buf + 8 + hl + off, t->data, t->n_bytes);
        off += t->n_bytes;
    }
    test_write_file(dir, name, buf, 8 + hl + off);
    free(buf);
    free(text);
    cJSON_Delete(h);
}

/* The index: tensors [0, half) in shard 1, the rest in shard 2; then patch applied to the map. */
static void write_index(const char *dir, const hf_dir *src, size_t half, const char *extra) {
    cJSON *idx = cJSON_CreateObject();
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size", 1);
    cJSON *map = cJSON_AddObjectToObject(idx, "weight_map");
    for (size_t i = 0; i < hf_dir_n_tensors(src); i++)
        cJSON_AddStringToObject(map, hf_dir_tensor_at(src, i)->name,
                                i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
    char *text = cJSON_PrintUnformatted(idx);
    if (extra) { /* "name": "file" pairs added at the start of the map */
        char *p = strstr(text, "\"weight_map\":{") + strlen("\"weight_map\":{");
        size_t pre = (size_t)(p - text);
        char *t2 = malloc(strlen(text) + strlen(extra) + 2);
        memcpy(t2, text, pre);
        strcpy(t2 + pre, extra);
        strcat(t2, ",");
        strcat(t2, p);
        free(text);
        text = t2;
    }
    test_write_text(dir, "model.safetensors.index.json", text);
    free(text);
    cJSON_Delete(idx);
}

static void expect_open_error(const char *dir, const char *n1, const char *n2, const char *what) {
    nc_err err = {{0}};
    hf_dir *d = NULL;
    int rc = hf_dir_open(&d, dir, &err);
    CHECK_MSG(rc == -1 && !d && strstr(err.msg, n1) && (!n2 || strstr(err.msg, n2)),
              "%s: expected an error naming '%s'%s%s, got '%s'", what, n1, n2 ? " and " : "", n2 ? n2 : "",
              d ? "(opened)" : err.msg);
    hf_dir_close(d);
}

static void test_sharded(const char *dir) {
    char src_dir[1024];
    snprintf(src_dir, sizeof src_dir, "%s/archs/llama3/hf", test_shared_dir());
    nc_err err;
    hf_dir *src = NULL;
    if (hf_dir_open(&src, src_dir, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    size_t n = hf_dir_n_tensors(src), half = n / 2;
    char *cfg = cJSON_PrintUnformatted(hf_dir_config(src));
    test_write_text(dir, "config.json", cfg);
    free(cfg);
    write_shard(dir, "model-00001-of-00002.safetensors", src, 0, half);
    write_shard(dir, "model-00002-of-00002.safetensors", src, half, n);
    write_index(dir, src, half, NULL);
    char with_slash[1100];
    snprintf(with_slash, sizeof with_slash, "%s//", dir);
    hf_dir *d = NULL;
    CHECK_MSG(hf_dir_open(&d, with_slash, &err) == 0, "%s", err.msg);
    if (d) {
        CHECK(strcmp(hf_dir_path(d), dir) == 0 && hf_dir_n_files(d) == 2 && hf_dir_n_tensors(d) == n);
        CHECK(hf_dir_file_bytes(d) == st_file_size(hf_dir_file_at(d, 0)) + st_file_size(hf_dir_file_at(d, 1)));
        size_t same = 0;
        for (size_t i = 0; i < n; i++) {
            const fmt_tensor *a = hf_dir_tensor_at(src, i), *b = hf_dir_find_tensor(d, a->name);
            const st_file *f = b ? hf_dir_file_of(d, b) : NULL;
            same += b && b->type == a->type && b->n_bytes == a->n_bytes && memcmp(b->ne, a->ne, sizeof a->ne) == 0 &&
                    memcmp(b->data, a->data, a->n_bytes) == 0 && f == hf_dir_file_at(d, i < half ? 0 : 1);
        }
        CHECK_MSG(same == n, "%zu of %zu tensors the same in the shards", same, n);
        hf_dir_close(d);
    }
    /* the index gone wrong */
    const char *t0 = hf_dir_tensor_at(src, 0)->name;
    char extra[512];
    snprintf(extra, sizeof extra, "\"%s\": \"model-00002-of-00002.safetensors\"", t0); /* shard 1 holds it */
    write_index(dir, src, half, extra);
    expect_open_error(dir, "weight_map names tensor", "but it is in 'model-00001-of-00002.safetensors'", "wrong shard");
    write_index(dir, src, half, "\"not.a.tensor\": \"model-00001-of-00002.safetensors\"");
    expect_open_error(dir, "'not.a.tensor' in shard 'model-00001-of-00002.safetensors', which does not hold it", NULL,
                      "tensor missing from its shard");
    write_index(dir, src, half, "\"x\": \"model-00003-of-00003.safetensors\"");
    expect_open_error(dir, "names shard 'model-00003-of-00003.safetensors' (for tensor 'x'), which is missing", NULL,
                      "missing shard");
    static const char *const escapes[] = {"../model-00001-of-00002.safetensors", "/etc/passwd", "a/../../b", "./x", "", "a//b"};
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        snprintf(extra, sizeof extra, "\"x\": \"%s\"", escapes[i]);
        write_index(dir, src, half, extra);
        expect_open_error(dir, "a path that leaves the directory", NULL, escapes[i]);
    }
    write_index(dir, src, half, "\"x\": 5");
    expect_open_error(dir, "the value of 'x' is not a file name", NULL, "shard not a string");
    test_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {}}");
    expect_open_error(dir, "\"weight_map\" is empty", NULL, "empty weight map");
    test_write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    expect_open_error(dir, "no \"weight_map\" object", NULL, "no weight map");
    test_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": ");
    expect_open_error(dir, "model.safetensors.index.json: not valid JSON", NULL, "bad index JSON");
    /* a tensor in both shards */
    write_shard(dir, "model-00002-of-00002.safetensors", src, half - 1, n);
    write_index(dir, src, half, NULL);
    snprintf(extra, sizeof extra, "tensor '%s' is in two files", hf_dir_tensor_at(src, half - 1)->name);
    expect_open_error(dir, extra, "model-00002-of-00002.safetensors (header offset", "tensor in two shards");
    /* a corrupt shard: its own error, naming the file */
    test_write_text(dir, "model-00002-of-00002.safetensors", "\x10\0\0\0\0\0\0\0{\"a\": 1}");
    expect_open_error(dir, "model-00002-of-00002.safetensors: header", NULL, "corrupt shard");
    /* model.safetensors wins over the index (as transformers prefers it) */
    write_shard(dir, "model.safetensors", src, 0, n);
    CHECK_MSG(hf_dir_open(&d, dir, &err) == 0 && hf_dir_n_files(d) == 1, "%s", d ? "" : err.msg);
    hf_dir_close(d);
    remove_file(dir, "model.safetensors");
    remove_file(dir, "model-00001-of-00002.safetensors");
    remove_file(dir, "model-00002-of-00002.safetensors");
    remove_file(dir, "model.safetensors.index.json");
    /* missing files */
    expect_open_error(dir, "no model.safetensors or model.safetensors.index.json", "a Hugging Face model directory holds",
                      "no weights");
    test_write_text(dir, "pytorch_model.bin", "x");
    expect_open_error(dir, "only pytorch_model.bin (only safetensors weights are supported)", NULL, "torch weights");
    remove_file(dir, "pytorch_model.bin");
    remove_file(dir, "config.json");
    expect_open_error(dir, "no config.json", "a Hugging Face model directory holds config.json", "no config");
    test_write_text(dir, "config.json", "[1]");
    expect_open_error(dir, "config.json: not a JSON object", NULL, "config not an object");
    test_write_text(dir, "config.json", "{\"a\": 1} x");
    expect_open_error(dir, "config.json: not valid JSON (error at byte offset 9", NULL, "config with garbage");
    remove_file(dir, "config.json");
    char file[1100];
    snprintf(file, sizeof file, "%s/archs/llama3/hf/config.json", test_shared_dir());
    expect_open_error(file, "not a directory", NULL, "a file");
    expect_open_error("/nonexistent-dir", "/nonexistent-dir: cannot open", NULL, "no directory");
    hf_dir_close(src);
}

/* ---- chat templates ----------------------------------------------------------------------------- */

static void expect_template(const hf_dir *d, int want_rc, const char *want, const char *needle, const char *what) {
    char *t = NULL;
    size_t len = 0;
    nc_err err = {{0}};
    int r = hf_dir_chat_template(d, &t, &len, &err);
    bool ok = r == want_rc && (want ? t && len == strlen(want) && strcmp(t, want) == 0 : !t) &&
              (!needle || strstr(err.msg, needle));
    CHECK_MSG(ok, "%s: got %d '%s' / '%s'", what, r, t ? t : "(null)", err.msg);
    free(t);
}

static void test_templates(const char *dir) {
    char src[2048], cwd[512];
    if (test_shared_dir()[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(src, sizeof src, "%s/archs/gemma2/hf/model.safetensors", test_shared_dir());
    else snprintf(src, sizeof src, "%s/%s/archs/gemma2/hf/model.safetensors", cwd, test_shared_dir());
    char dst[1100];
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CHECK(symlink(src, dst) == 0); /* symlinked weights, as in the Hugging Face cache */
    test_write_text(dir, "config.json", "{}");
    nc_err err;
    hf_dir *d = NULL;
    CHECK_MSG(hf_dir_open(&d, dir, &err) == 0, "%s", err.msg);
    if (!d) return;
    expect_template(d, 0, NULL, NULL, "no template");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": null}");
    expect_template(d, 0, NULL, NULL, "null template");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": \"{{ x }}\"}");
    expect_template(d, 1, "{{ x }}", NULL, "tokenizer_config string");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                                             "{\"name\": \"default\", \"template\": \"D\"}]}");
    expect_template(d, 1, "D", NULL, "named list");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    expect_template(d, -1, NULL, "none named \"default\"", "list without default");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": 1}]}");
    expect_template(d, -1, NULL, "\"chat_template\"[0] is not an object", "bad list entry");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": 7}");
    expect_template(d, -1, NULL, "neither a string nor a list", "number");
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": ");
    expect_template(d, -1, NULL, "tokenizer_config.json: not valid JSON", "malformed tokenizer_config");
    test_write_text(dir, "chat_template.json", "{\"chat_template\": \"J\"}");
    expect_template(d, 1, "J", NULL, "chat_template.json first");
    test_write_text(dir, "chat_template.jinja", "{{ jinja }}\n");
    expect_template(d, 1, "{{ jinja }}\n", NULL, "chat_template.jinja first");
    hf_dir_close(d);
    remove_file(dir, "chat_template.jinja");
    remove_file(dir, "chat_template.json");
    remove_file(dir, "tokenizer_config.json");
    remove_file(dir, "config.json");
    remove_file(dir, "model.safetensors");
}

/* ---- JSON helpers ---------------------------------------------------------------------------------- */

static void test_helpers(const char *dir) {
    cJSON *j = NULL;
    nc_err err;
    CHECK(hf_read_json(dir, "absent.json", false, &j, &err) == 0 && !j);
    test_write_text(dir, "a.json", " [1, 2] \n");
    CHECK(hf_read_json(dir, "a.json", false, &j, &err) == 1 && cJSON_GetArraySize(j) == 2);
    cJSON_Delete(j);
    CHECK(hf_read_json(dir, "a.json", true, &j, &err) == -1 && strstr(err.msg, "a.json: not a JSON object"));
    remove_file(dir, "a.json");
    char buf[8];
    CHECK(hf_join(buf, sizeof buf, "ab", "cd") && strcmp(buf, "ab/cd") == 0 && !hf_join(buf, sizeof buf, "abcd", "efgh"));
    char *text;
    size_t len;
    test_write_text(dir, "big.txt", "0123456789");
    CHECK(hf_read_file(dir, "big.txt", 5, &text, &len, &err) == -1 && strstr(err.msg, "more than the 5 allowed"));
    CHECK(hf_read_file(dir, "big.txt", 10, &text, &len, &err) == 1 && len == 10 && text[10] == 0);
    free(text);
    remove_file(dir, "big.txt");
    /* anything but a regular file is refused before a read could block on it: a FIFO (which a
     * plain open would wait on for a writer) or a directory */
    char path[1024];
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(hf_read_json(dir, "fifo.json", false, &j, &err) == -1 && strstr(err.msg, "fifo.json: a FIFO, not a regular file"));
    snprintf(path, sizeof path, "%s/sub", dir);
    CHECK(mkdir(path, 0700) == 0);
    CHECK(hf_read_file(dir, "sub", 10, &text, &len, &err) == -1 && strstr(err.msg, "sub: a directory, not a regular file"));
    CHECK(rmdir(path) == 0);
    remove_file(dir, "fifo.json");
}

int main(void) {
    for (size_t i = 0; i < sizeof DIRS / sizeof DIRS[0]; i++) test_one_shared_dir(DIRS[i]);
    char dir[] = "/tmp/nc_test_hf_dir_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp");
        return test_summary("hf_dir");
    }
    test_sharded(dir);
    test_templates(dir);
    test_helpers(dir);
    CHECK_MSG(rmdir(dir) == 0, "the test left files in %s", dir);
    return test_summary("hf_dir");
}
