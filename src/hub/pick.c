/* Which files a name means: "USER/REPO[:QUANT]" parsed, a GGUF file's quant tag and split parts
 * read from its name (as llama.cpp's -hf reads them), and the choice among a repository's files. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hub/hub.h"

/* ---- names ---- */

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.'; }

/* One of USER and REPO: the hub's characters, not starting or ending with '-' or '.', no "..". */
static const char *name_problem(const char *s, size_t n) {
    if (n == 0) return "is empty";
    if (n > 96) return "is longer than 96 characters";
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i])) return "may hold only letters, digits, '_', '-' and '.'";
    if (s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') return "may not start or end with '-' or '.'";
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '.' && s[i + 1] == '.') return "may not hold \"..\"";
    return NULL;
}

int hub_ref_parse(const char *s, hub_ref *out, nc_err *err) {
    memset(out, 0, sizeof *out);
    const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
    size_t repo_len = colon ? (size_t)(colon - s) : strlen(s);
    if (!slash || slash > s + repo_len)
        return nc_fail(err, "'%s': a model on the hub is USER/REPO[:QUANT], e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", s);
    const char *why = name_problem(s, (size_t)(slash - s));
    if (why) return nc_fail(err, "'%s': the user %s", s, why);
    why = name_problem(slash + 1, repo_len - (size_t)(slash + 1 - s));
    if (why) return nc_fail(err, "'%s': the repository %s (USER/REPO[:QUANT])", s, why);
    memcpy(out->repo, s, repo_len);
    if (colon) {
        const char *q = colon + 1;
        if (!*q) return nc_fail(err, "'%s': nothing after ':' (USER/REPO:QUANT, e.g. :Q4_K_M)", s);
        if (strlen(q) >= sizeof out->quant) return nc_fail(err, "'%s': the quant is too long", s);
        for (const char *c = q; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == '\\' || *c == ':')
                return nc_fail(err, "'%s': the quant may not hold control characters, '\\' or ':'", s);
        strcpy(out->quant, q);
    }
    return 0;
}

bool hub_path_ok(const char *path) {
    size_t n = strlen(path);
    if (n == 0 || n > HUB_PATH_MAX || path[0] == '/') return false;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\') return false;
    for (const char *c = path; *c;) {
        size_t len = strcspn(c, "/");
        if (len == 0 || c[0] == '.') return false; /* empty, ".", ".." and hidden components */
        c += len;
        if (*c == '/') c++;
        if (*c == 0 && c[-1] == '/') return false;
    }
    return true;
}

/* ---- files ---- */

int hub_files_add(hub_files *fs, const char *path, uint64_t size, const char *oid, bool lfs, nc_err *err) {
    if (fs->n == fs->cap) {
        size_t cap = fs->cap ? 2 * fs->cap : 64;
        hub_file *v = realloc(fs->v, cap * sizeof *v);
        if (!v) return nc_fail(err, "out of memory");
        fs->v = v;
        fs->cap = cap;
    }
    hub_file *f = &fs->v[fs->n];
    *f = (hub_file){.size = size, .lfs = lfs};
    if (!(f->path = strdup(path))) return nc_fail(err, "out of memory");
    snprintf(f->oid, sizeof f->oid, "%s", oid ? oid : "");
    fs->n++;
    return 0;
}

const hub_file *hub_files_find(const hub_files *fs, const char *path) {
    for (size_t i = 0; i < fs->n; i++)
        if (!strcmp(fs->v[i].path, path)) return &fs->v[i];
    return NULL;
}

void hub_files_free(hub_files *fs) {
    for (size_t i = 0; i < fs->n; i++) free(fs->v[i].path);
    free(fs->v);
    *fs = (hub_files){0};
}

/* ---- GGUF names ---- */

static bool ends_with_ci(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !strncasecmp(s + n - k, suffix, k);
}

bool hub_gguf_name_parse(const char *path, hub_gguf_name *out) {
    *out = (hub_gguf_name){.index = 1, .count = 1};
    size_t n = strlen(path);
    if (!ends_with_ci(path, n, ".gguf")) return false;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    /* projectors (multimodal) and importance matrices are GGUF files but not models */
    if (strstr(base, "mmproj") || strstr(base, "imatrix")) return false;
    size_t stem = n - 5;
    /* "-00001-of-00003": five digits each, as llama.cpp's gguf-split names the parts */
    const char *s = stem >= 15 ? path + stem - 15 : NULL;
    if (s && s[0] == '-' && !strncasecmp(s + 6, "-of-", 4)) {
        bool digits = true;
        for (int i = 0; i < 5; i++) digits = digits && isdigit((unsigned char)s[1 + i]) && isdigit((unsigned char)s[10 + i]);
        if (digits) {
            out->index = atoi(s + 1);
            out->count = atoi(s + 10);
            stem -= 15;
        }
    }
    out->stem_len = stem;
    /* the tag: the last run of [A-Za-z0-9_] after a '-' or '.' */
    size_t start = stem;
    while (start > 0 && (isalnum((unsigned char)path[start - 1]) || path[start - 1] == '_')) start--;
    if (start > 0 && start < stem && (path[start - 1] == '-' || path[start - 1] == '.') &&
        stem - start < sizeof out->tag) {
        for (size_t i = start; i < stem; i++) out->tag[i - start] = (char)toupper((unsigned char)path[i]);
        out->tag[stem - start] = 0;
    }
    return true;
}

/* ---- the choice ---- */

static int plan_add(hub_plan *p, size_t i, nc_err *err) {
    for (size_t k = 0; k < p->n; k++)
        if (p->files[k] == i) return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        size_t *v = realloc(p->files, cap * sizeof *v);
        if (!v) return nc_fail(err, "out of memory");
        p->files = v;
        p->cap = cap;
    }
    p->files[p->n++] = i;
    return 0;
}

void hub_plan_free(hub_plan *plan) {
    free(plan->files);
    *plan = (hub_plan){0};
}

/* Without a quant, Q4_K_M; else the nearest of these that is present: the other 4- and 5-bit
 * types first, then 6, 3 and 8 bits, then 2, then unquantised. */
static const char *const PREFERENCE[] = {"Q4_K_M", "Q4_K_S", "Q4_K", "Q5_K_M", "Q5_K_S", "Q5_K", "Q4_0", "IQ4_XS",
                                         "IQ4_NL", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q3_K_L", "Q3_K_M", "Q3_K_S",
                                         "Q3_K", "IQ3_S", "Q8_0", "MXFP4", "Q2_K", "BF16", "F16", "F32"};

/* The first whole file (the first part of a split) whose tag is tag, or whose path is tag when it
 * ends in ".gguf". */
static bool find_gguf(const hub_files *fs, const char *tag, size_t *at) {
    bool by_path = ends_with_ci(tag, strlen(tag), ".gguf");
    for (size_t i = 0; i < fs->n; i++) {
        hub_gguf_name g;
        if (!hub_gguf_name_parse(fs->v[i].path, &g) || g.index != 1) continue;
        const char *base = strrchr(fs->v[i].path, '/');
        if (by_path ? !strcmp(fs->v[i].path, tag) || (base && !strcmp(base + 1, tag)) : !strcasecmp(g.tag, tag)) {
            *at = i;
            return true;
        }
    }
    return false;
}

/* "Q2_K (1.1 GB), Q4_K_M (...), ..." : each tag present once, for an error. */
static void list_tags(const hub_files *fs, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < fs->n && n + 1 < cap; i++) {
        hub_gguf_name g;
        if (!hub_gguf_name_parse(fs->v[i].path, &g)) continue;
        const char *name = *g.tag ? g.tag : fs->v[i].path;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++) {
            hub_gguf_name h;
            seen = hub_gguf_name_parse(fs->v[k].path, &h) && !strcmp(*h.tag ? h.tag : fs->v[k].path, name);
        }
        if (seen) continue;
        uint64_t bytes = 0; /* every part of every file with this tag */
        for (size_t k = i; k < fs->n; k++) {
            hub_gguf_name h;
            if (hub_gguf_name_parse(fs->v[k].path, &h) && !strcmp(*h.tag ? h.tag : fs->v[k].path, name) &&
                h.count == g.count && h.stem_len == g.stem_len && !strncmp(fs->v[k].path, fs->v[i].path, g.stem_len))
                bytes += fs->v[k].size;
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%s (%.1f MB)", n ? ", " : "", name, bytes / 1e6);
    }
    if (n >= cap && cap > 4) strcpy(buf + cap - 4, "...");
}

/* Every part of the split whose first part is fs->v[first], in order. */
static int add_parts(const hub_files *fs, size_t first, const char *where, hub_plan *plan, nc_err *err) {
    hub_gguf_name g;
    hub_gguf_name_parse(fs->v[first].path, &g);
    const char *path = fs->v[first].path;
    for (int part = 1; part <= g.count; part++) {
        bool found = false;
        for (size_t i = 0; i < fs->n && !found; i++) {
            hub_gguf_name h;
            if (hub_gguf_name_parse(fs->v[i].path, &h) && h.index == part && h.count == g.count &&
                h.stem_len == g.stem_len && !strncmp(fs->v[i].path, path, g.stem_len)) {
                if (plan_add(plan, i, err)) return -1;
                found = true;
            }
        }
        if (!found)
            return nc_fail(err, "%s has part 1 of %s's %d parts but not part %d (%.*s-%05d-of-%05d.gguf)", where, path,
                           g.count, part, (int)g.stem_len, path, part, g.count);
    }
    return 0;
}

/* The files besides the weights that a Hugging Face directory may use (config, tokenizer,
 * generation defaults, chat template), fetched when the repository has them. */
static const char *const HF_FILES[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
                                       "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                                       "chat_template.jinja", "chat_template.json"};

int hub_pick(const hub_files *fs, const hub_ref *ref, const char *where, hub_plan *plan, nc_err *err) {
    *plan = (hub_plan){0};
    bool any_gguf = false;
    for (size_t i = 0; i < fs->n && !any_gguf; i++) {
        hub_gguf_name g;
        any_gguf = hub_gguf_name_parse(fs->v[i].path, &g);
    }
    if (any_gguf) {
        char tags[512];
        size_t at = 0;
        bool found = false;
        if (*ref->quant) found = find_gguf(fs, ref->quant, &at);
        else {
            for (size_t k = 0; k < sizeof PREFERENCE / sizeof *PREFERENCE && !found; k++) found = find_gguf(fs, PREFERENCE[k], &at);
            for (size_t i = 0; i < fs->n && !found; i++) { /* none of them: the first model file */
                hub_gguf_name g;
                if (hub_gguf_name_parse(fs->v[i].path, &g) && g.index == 1) {
                    at = i;
                    found = true;
                }
            }
        }
        if (!found) {
            list_tags(fs, tags, sizeof tags);
            if (*ref->quant)
                return nc_fail(err, "%s has no GGUF file of %s; it has: %s", where, ref->quant, tags);
            return nc_fail(err, "%s has GGUF files only in parts without their first part: %s", where, tags);
        }
        plan->kind = HUB_GGUF;
        if (add_parts(fs, at, where, plan, err)) {
            hub_plan_free(plan);
            return -1;
        }
        plan->main = at;
        return 0;
    }
    const hub_file *config = hub_files_find(fs, "config.json"), *single = hub_files_find(fs, "model.safetensors"),
                   *index = hub_files_find(fs, "model.safetensors.index.json");
    if (!config || (!single && !index)) {
        if (*ref->quant) return nc_fail(err, "%s has no GGUF files (so no %s), nor a safetensors model", where, ref->quant);
        return nc_fail(err, "%s has no GGUF files, nor a safetensors model (config.json with model.safetensors or "
                            "model.safetensors.index.json)", where);
    }
    if (*ref->quant)
        return nc_fail(err, "%s has no GGUF files: it is a safetensors model, taken whole (drop ':%s'; `nucleus "
                            "quantize` makes a GGUF file of it)", where, ref->quant);
    plan->kind = HUB_SAFETENSORS;
    plan->index = !single;
    for (size_t k = 0; k < sizeof HF_FILES / sizeof *HF_FILES; k++) {
        const hub_file *f = hub_files_find(fs, HF_FILES[k]);
        if (f && plan_add(plan, (size_t)(f - fs->v), err)) goto oom;
    }
    if (plan_add(plan, (size_t)((single ? single : index) - fs->v), err)) goto oom;
    return 0;
oom:
    hub_plan_free(plan);
    return -1;
}

int hub_pick_shards(const hub_files *fs, const char *index_json, size_t len, const char *where, hub_plan *plan,
                    nc_err *err) {
    cJSON *root = cJSON_ParseWithLength(index_json, len);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return nc_fail(err, "model.safetensors.index.json: %s", root ? "no \"weight_map\" object" : "not JSON");
    }
    int rc = 0;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !hub_path_ok(e->valuestring)) {
            rc = nc_fail(err, "model.safetensors.index.json: the weight_map's entry for '%.64s' is not a file of the "
                              "repository's directory", e->string ? e->string : "");
            break;
        }
        const hub_file *f = hub_files_find(fs, e->valuestring);
        if (!f) {
            rc = nc_fail(err, "model.safetensors.index.json names the shard %s, which %s does not have", e->valuestring, where);
            break;
        }
        if ((rc = plan_add(plan, (size_t)(f - fs->v), err))) break;
    }
    cJSON_Delete(root);
    return rc;
}
