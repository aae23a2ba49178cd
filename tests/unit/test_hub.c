/* The hub layer's pure parts: SHA-256 against FIPS 180-4's examples, names (USER/REPO[:QUANT]),
 * paths the cache may hold, GGUF file names (quant tag, split parts) and the choice of files. */
#include <stdlib.h>
#include <string.h>

#include "hub/hub.h"
#include "hub/sha256.h"
#include "test.h"

static void sha(const char *text, size_t piece, char out[65]) {
    hub_sha256 s;
    hub_sha256_init(&s);
    size_t n = strlen(text);
    for (size_t at = 0; at < n; at += piece) hub_sha256_update(&s, text + at, n - at < piece ? n - at : piece);
    hub_sha256_hex(&s, out);
}

static void test_sha256(void) {
    char h[65];
    sha("", 1, h);
    CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    sha("abc", 1, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    /* 56 bytes: the padding needs a second block */
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    for (size_t piece = 1; piece <= 64; piece += 7) {
        sha(two, piece, h);
        CHECK_MSG(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "pieces of %zu", piece);
    }
    char *million = malloc(1000001);
    memset(million, 'a', 1000000);
    million[1000000] = 0;
    sha(million, 4096, h);
    CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    free(million);
    hub_sha256 s; /* the digest leaves the state as it was */
    hub_sha256_init(&s);
    hub_sha256_update(&s, "ab", 2);
    hub_sha256_hex(&s, h);
    hub_sha256_update(&s, "c", 1);
    hub_sha256_hex(&s, h);
    CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
}

static void test_ref(void) {
    hub_ref r;
    nc_err err;
    CHECK(hub_ref_parse("Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", &r, &err) == 0);
    CHECK(!strcmp(r.repo, "Qwen/Qwen2.5-0.5B-Instruct-GGUF") && !strcmp(r.quant, "Q4_K_M"));
    CHECK(hub_ref_parse("a_b/c.d", &r, &err) == 0 && !strcmp(r.repo, "a_b/c.d") && !*r.quant);
    const char *bad[] = {"noslash", "a/b/c", "/b", "a/", "a/.b", "a/b.", "a/b..c", "-a/b", "a b/c", "a/b:", "a/b:x:y",
                         "a/b:q\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(hub_ref_parse(bad[i], &r, &err) == -1, "%s", bad[i]);
    CHECK(hub_ref_parse("a", &r, &err) == -1 && strstr(err.msg, "USER/REPO[:QUANT]"));
}

static void test_paths(void) {
    CHECK(hub_path_ok("model.gguf") && hub_path_ok("Q4_K_M/model-00001-of-00002.gguf"));
    const char *bad[] = {"", "/etc/passwd", "../x", "a/../b", "a//b", "a/", ".gitattributes", "a/.hidden", "a\\b", "a\tb", "."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(!hub_path_ok(bad[i]), "'%s'", bad[i]);
}

static void test_gguf_names(void) {
    hub_gguf_name g;
    CHECK(hub_gguf_name_parse("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", &g) && !strcmp(g.tag, "Q4_K_M") && g.count == 1);
    CHECK(hub_gguf_name_parse("tinyllama-1.1b-chat-v1.0.q8_0.gguf", &g) && !strcmp(g.tag, "Q8_0"));
    CHECK(hub_gguf_name_parse("dir/Model-Q4_K_M-00002-of-00003.gguf", &g) && !strcmp(g.tag, "Q4_K_M") && g.index == 2 &&
          g.count == 3 && g.stem_len == strlen("dir/Model-Q4_K_M"));
    CHECK(hub_gguf_name_parse("Q4_K_M/model.gguf", &g) && !strcmp(g.tag, "")); /* the tag is the name's, not the folder's */
    CHECK(hub_gguf_name_parse("model.GGUF", &g));
    CHECK(!hub_gguf_name_parse("mmproj-model-f16.gguf", &g));
    CHECK(!hub_gguf_name_parse("imatrix.gguf", &g));
    CHECK(!hub_gguf_name_parse("model.safetensors", &g));
}

static hub_files files(const char *const *paths) {
    hub_files fs = {0};
    for (; *paths; paths++) hub_files_add(&fs, *paths, 100, "", false, NULL);
    return fs;
}

static const char *pick(const char *const *paths, const char *name, char *err_out) {
    static char got[256];
    hub_files fs = files(paths);
    hub_ref r;
    hub_plan p;
    nc_err err;
    got[0] = 0;
    if (hub_ref_parse(name, &r, &err) == 0 && hub_pick(&fs, &r, "repo", &p, &err) == 0) {
        for (size_t i = 0; i < p.n; i++) {
            strcat(got, i ? " " : "");
            strcat(got, fs.v[p.files[i]].path);
        }
        hub_plan_free(&p);
    } else if (err_out) strcpy(err_out, err.msg);
    hub_files_free(&fs);
    return got;
}

static void test_pick(void) {
    const char *repo[] = {"README.md", "m-Q2_K.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-f16.gguf", NULL};
    char err[NC_ERR_MAX];
    CHECK(!strcmp(pick(repo, "u/r", NULL), "m-Q4_K_M.gguf"));
    CHECK(!strcmp(pick(repo, "u/r:q8_0", NULL), "m-Q8_0.gguf"));
    CHECK(!strcmp(pick(repo, "u/r:m-Q2_K.gguf", NULL), "m-Q2_K.gguf"));
    CHECK(!strcmp(pick(repo, "u/r:Q5_K_M", err), "") && strstr(err, "has no GGUF file of Q5_K_M; it has: Q2_K"));
    const char *no_q4km[] = {"m-Q2_K.gguf", "m-F16.gguf", "m-Q8_0.gguf", "m-Q5_K_M.gguf", NULL};
    CHECK(!strcmp(pick(no_q4km, "u/r", NULL), "m-Q5_K_M.gguf")); /* the nearest */
    const char *unknown[] = {"m-IQ1_S.gguf", "m-IQ2_XXS.gguf", NULL};
    CHECK(!strcmp(pick(unknown, "u/r", NULL), "m-IQ1_S.gguf")); /* none preferred: the first */
    const char *split[] = {"s/m-Q4_K_M-00002-of-00003.gguf", "s/m-Q4_K_M-00001-of-00003.gguf", "s/m-Q4_K_M-00003-of-00003.gguf",
                           "m-Q8_0.gguf", NULL};
    CHECK(!strcmp(pick(split, "u/r", NULL), "s/m-Q4_K_M-00001-of-00003.gguf s/m-Q4_K_M-00002-of-00003.gguf s/m-Q4_K_M-00003-of-00003.gguf"));
    const char *gap[] = {"m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00003-of-00003.gguf", NULL};
    CHECK(!strcmp(pick(gap, "u/r", err), "") && strstr(err, "not part 2"));
    const char *st[] = {"config.json", "tokenizer.json", "model.safetensors", "README.md", "original/consolidated.pth", NULL};
    CHECK(!strcmp(pick(st, "u/r", NULL), "config.json tokenizer.json model.safetensors"));
    CHECK(!strcmp(pick(st, "u/r:Q4_K_M", err), "") && strstr(err, "it is a safetensors model"));
    const char *none[] = {"README.md", NULL};
    CHECK(!strcmp(pick(none, "u/r", err), "") && strstr(err, "no GGUF files, nor a safetensors model"));

    /* shards by the index */
    const char *sharded[] = {"config.json", "model.safetensors.index.json", "model-1.safetensors", "model-2.safetensors", NULL};
    hub_files fs = files(sharded);
    hub_ref r;
    hub_plan p;
    nc_err e;
    hub_ref_parse("u/r", &r, &e);
    CHECK(hub_pick(&fs, &r, "repo", &p, &e) == 0 && p.kind == HUB_SAFETENSORS && p.index);
    const char *index = "{\"weight_map\": {\"a\": \"model-1.safetensors\", \"b\": \"model-2.safetensors\", \"c\": \"model-1.safetensors\"}}";
    CHECK(hub_pick_shards(&fs, index, strlen(index), "repo", &p, &e) == 0 && p.n == 4);
    const char *missing = "{\"weight_map\": {\"a\": \"model-3.safetensors\"}}";
    CHECK(hub_pick_shards(&fs, missing, strlen(missing), "repo", &p, &e) == -1 && strstr(e.msg, "model-3.safetensors"));
    const char *escape = "{\"weight_map\": {\"a\": \"../model-1.safetensors\"}}";
    CHECK(hub_pick_shards(&fs, escape, strlen(escape), "repo", &p, &e) == -1);
    hub_plan_free(&p);
    hub_files_free(&fs);
}

int main(void) {
    test_sha256();
    test_ref();
    test_paths();
    test_gguf_names();
    test_pick();
    return test_summary("test_hub");
}
