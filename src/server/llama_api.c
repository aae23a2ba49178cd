/* llama.cpp's /completion, /infill, /props and /slots (see llama_api.h). A /completion body is
 * mostly the fields /v1/completions already takes under llama.cpp's names; what differs (the
 * defaults, seed -1, logit_bias as pairs, return_tokens, response_fields, n_indent, the infill
 * parts) is settled here before request.c checks the rest. */
#include "server/llama_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/prepare.h"

static bool is_int(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble); }

/* ---- The request --------------------------------------------------------------------------- */

/* What the writer needs of the request. */
typedef struct llama_writer {
    char *model;
    const nc_model *m;     /* token pieces (completion_probabilities) */
    bool return_tokens, probs, stream;
    cJSON *fields;         /* response_fields, or NULL: every field */
    cJSON *settings;       /* generation_settings */
    int32_t n_ctx;
    size_t sent;           /* bytes of content streamed */
} llama_writer;

static void writer_free(void *st) {
    llama_writer *w = st;
    if (!w) return;
    free(w->model);
    cJSON_Delete(w->fields);
    cJSON_Delete(w->settings);
    free(w);
}

void srv_infill_free(srv_infill *f) {
    free(f->prefix);
    free(f->suffix);
    for (int32_t i = 0; i < f->n_extra; i++) {
        free(f->extra_names[i]);
        free(f->extra_texts[i]);
    }
    free(f->extra_names);
    free(f->extra_texts);
    memset(f, 0, sizeof *f);
}

static int string_field(const cJSON *root, const char *name, char **out, srv_error *e) {
    const cJSON *v = srv_member(root, name);
    if (v && !cJSON_IsString(v)) return srv_refuse(e, name, "'%s' must be a string", name);
    return (*out = strdup(v ? v->valuestring : "")) ? 0 : srv_oom(e);
}

/* input_extra: [{"filename"?, "text"}]. */
static int infill_parts(const cJSON *root, srv_infill *f, srv_error *e) {
    if (string_field(root, "input_prefix", &f->prefix, e) || string_field(root, "input_suffix", &f->suffix, e)) return -1;
    const cJSON *x = srv_member(root, "input_extra");
    if (!x) return 0;
    int n = cJSON_GetArraySize(x);
    if (!cJSON_IsArray(x) || n > 1024) return srv_refuse(e, "input_extra", "'input_extra' must be an array of at most 1024 chunks");
    if (!(f->extra_names = calloc((size_t)n + 1, sizeof *f->extra_names)) ||
        !(f->extra_texts = calloc((size_t)n + 1, sizeof *f->extra_texts)))
        return srv_oom(e);
    int i = 0;
    for (const cJSON *c = x->child; c; c = c->next, i++) {
        const cJSON *name = cJSON_IsObject(c) ? srv_member(c, "filename") : NULL, *text = cJSON_IsObject(c) ? srv_member(c, "text") : NULL;
        bool extra = false;
        for (const cJSON *k = cJSON_IsObject(c) ? c->child : NULL; k; k = k->next)
            extra = extra || (strcmp(k->string, "filename") && strcmp(k->string, "text"));
        if (!cJSON_IsObject(c) || extra || !cJSON_IsString(text) || (name && !cJSON_IsString(name)))
            return srv_refuse(e, "input_extra", "'input_extra[%d]' must be {\"filename\"?: string, \"text\": string}", i);
        f->n_extra = i + 1;
        if (!(f->extra_names[i] = strdup(name ? name->valuestring : "tmp")) || !(f->extra_texts[i] = strdup(text->valuestring)))
            return srv_oom(e);
    }
    return 0;
}

/* llama.cpp's logit_bias pairs [[id, bias | false], ...] as OpenAI's object; string keys (a
 * text's tokens) are not taken. */
static int logit_bias(const cJSON *v, cJSON *oa, srv_error *e) {
    if (cJSON_IsObject(v)) {
        cJSON *c = cJSON_Duplicate(v, true);
        return c && cJSON_AddItemToObject(oa, "logit_bias", c) ? 0 : (cJSON_Delete(c), srv_oom(e));
    }
    if (!cJSON_IsArray(v)) return srv_refuse(e, "logit_bias", "'logit_bias' must be an object or an array of [id, bias] pairs");
    cJSON *obj = cJSON_AddObjectToObject(oa, "logit_bias");
    if (!obj) return srv_oom(e);
    for (const cJSON *p = v->child; p; p = p->next) {
        const cJSON *id = cJSON_GetArrayItem(p, 0), *b = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !is_int(id) || id->valuedouble < 0 || id->valuedouble > 1e9 ||
            !(cJSON_IsNumber(b) || cJSON_IsFalse(b)))
            return srv_refuse(e, "logit_bias", "'logit_bias' pairs must be [token id, bias or false] (text keys are not supported)");
        char key[16];
        snprintf(key, sizeof key, "%d", (int)id->valuedouble);
        double bias = cJSON_IsFalse(b) ? -100 : b->valuedouble;
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        if (!cJSON_AddNumberToObject(obj, key, bias)) return srv_oom(e);
    }
    return 0;
}

static const char *const LLAMA_ONLY[] = {"input_prefix", "input_suffix", "input_extra", "return_tokens", "response_fields",
                                         "n_indent", "n_keep", "n_cmpl", "t_max_prompt_ms", "timings_per_token",
                                         "post_sampling_probs", "return_progress", "logit_bias", "seed", "n_predict",
                                         "prompt", NULL};

/* The body as OpenAI's completions body for request.c, the rest into w and the infill parts. */
static int translate(const cJSON *root, bool infill, cJSON *oa, llama_writer *w, int32_t *n_indent, int32_t *t_max_prompt,
                     srv_error *e) {
    for (const cJSON *f = root->child; f; f = f->next) {
        if (srv_listed(LLAMA_ONLY, f->string)) continue;
        if (!strcmp(f->string, "max_tokens") || !strcmp(f->string, "logprobs") || !strcmp(f->string, "echo") ||
            !strcmp(f->string, "suffix") || !strcmp(f->string, "best_of") || !strcmp(f->string, "n"))
            return srv_refuse(e, f->string, "'%s' belongs to /v1/completions (here: n_predict, n_probs, input_suffix, n_cmpl)",
                          f->string);
        cJSON *c = cJSON_Duplicate(f, true);
        if (!c || !cJSON_AddItemToObject(oa, f->string, c)) {
            cJSON_Delete(c);
            return srv_oom(e);
        }
    }
    if (!infill && (srv_member(root, "input_prefix") || srv_member(root, "input_suffix") || srv_member(root, "input_extra")))
        return srv_refuse(e, "input_prefix", "'input_prefix', 'input_suffix' and 'input_extra' belong to /infill");
    /* one prompt: a string or token ids (/infill: the text after the prefix, may be empty) */
    const cJSON *p = srv_member(root, "prompt");
    if (!p && !infill) return srv_refuse(e, "prompt", "'prompt' is required");
    if (p && !cJSON_IsString(p) && !(cJSON_IsArray(p) && (!p->child || cJSON_IsNumber(p->child))))
        return srv_refuse(e, "prompt", "'prompt' must be a string or an array of token ids (one prompt: /v1/completions takes several)");
    if (p && cJSON_IsArray(p))
        for (const cJSON *t = p->child; t; t = t->next)
            if (!cJSON_IsNumber(t))
                return srv_refuse(e, "prompt", "'prompt' mixes token ids and strings, which is not supported: give one or the other");
    if (infill && p && !cJSON_IsString(p)) return srv_refuse(e, "prompt", "/infill's 'prompt' must be a string");
    cJSON *pc = p ? cJSON_Duplicate(p, true) : cJSON_CreateString("");
    if (!pc || !cJSON_AddItemToObject(oa, "prompt", pc)) {
        cJSON_Delete(pc);
        return srv_oom(e);
    }
    /* llama.cpp's defaults where the request says nothing */
    static const struct { const char *k; double v; } defaults[] = {{"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95},
                                                                   {"min_p", 0.05}};
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
        if (!srv_member(root, defaults[i].k) && !cJSON_AddNumberToObject(oa, defaults[i].k, defaults[i].v)) return srv_oom(e);
    const cJSON *np = srv_member(root, "n_predict"), *seed = srv_member(root, "seed"), *lb = srv_member(root, "logit_bias"),
                *cmpl = srv_member(root, "n_cmpl"), *keep = srv_member(root, "n_keep"), *ind = srv_member(root, "n_indent"),
                *rt = srv_member(root, "return_tokens"), *rf = srv_member(root, "response_fields"), *tp = srv_member(root, "t_max_prompt_ms");
    if (np && !is_int(np)) return srv_refuse(e, "n_predict", "'n_predict' must be an integer");
    if (!cJSON_AddNumberToObject(oa, "n_predict", np && np->valuedouble != 0 ? np->valuedouble : -1)) return srv_oom(e);
    if (np && np->valuedouble == 0)
        return srv_refuse(e, "n_predict", "'n_predict': 0 (evaluate the prompt only) is not supported; give -1 or at least 1");
    if (seed && !(is_int(seed) && seed->valuedouble == -1) && !cJSON_AddItemToObject(oa, "seed", cJSON_Duplicate(seed, true)))
        return srv_oom(e);
    if (lb && logit_bias(lb, oa, e)) return -1;
    if (cmpl && (!is_int(cmpl) || cmpl->valuedouble != 1))
        return srv_refuse(e, "n_cmpl", "'n_cmpl' must be 1 here (/v1/completions' n gives several)");
    if (keep && !(is_int(keep) && keep->valuedouble == 0))
        return srv_refuse(e, "n_keep", "'n_keep' is not supported (a full context ends the reply; see --context-shift --keep)");
    if (ind && (!is_int(ind) || ind->valuedouble < 0 || ind->valuedouble > 1 << 20))
        return srv_refuse(e, "n_indent", "'n_indent' must be a non-negative integer");
    *n_indent = ind ? (int32_t)ind->valuedouble : 0;
    if (tp && (!is_int(tp) || tp->valuedouble > INT32_MAX))
        return srv_refuse(e, "t_max_prompt_ms", "'t_max_prompt_ms' must be an integer (milliseconds; 0 or less: no limit)");
    *t_max_prompt = tp && tp->valuedouble > 0 ? (int32_t)tp->valuedouble : 0;
    for (const char *const *k = (const char *const[]){"timings_per_token", "post_sampling_probs", "return_progress", NULL}; *k; k++)
        if (srv_member(root, *k) && !cJSON_IsFalse(srv_member(root, *k)))
            return srv_refuse(e, *k, "'%s' is not supported", *k);
    if (rt && !cJSON_IsBool(rt)) return srv_refuse(e, "return_tokens", "'return_tokens' must be a boolean");
    w->return_tokens = cJSON_IsTrue(rt);
    if (rf) {
        if (!cJSON_IsArray(rf) || cJSON_GetArraySize(rf) > 64)
            return srv_refuse(e, "response_fields", "'response_fields' must be an array of at most 64 names");
        for (const cJSON *x = rf->child; x; x = x->next)
            if (!cJSON_IsString(x) || strlen(x->valuestring) > 128)
                return srv_refuse(e, "response_fields", "'response_fields' must hold names (strings)");
        if (!(w->fields = cJSON_Duplicate(rf, true))) return srv_oom(e);
    }
    const cJSON *probs = srv_member(root, "n_probs");
    w->probs = is_int(probs) && probs->valuedouble > 0;
    w->stream = cJSON_IsTrue(srv_member(root, "stream"));
    return 0;
}

/* generation_settings: the request's decoding as it will run. */
static cJSON *settings_of(const srv_request *r, int32_t n_ctx, const char *model) {
    cJSON *s = cJSON_CreateObject(), *stop = NULL;
    bool ok = s && cJSON_AddNumberToObject(s, "n_ctx", n_ctx) && cJSON_AddStringToObject(s, "model", model) &&
              cJSON_AddNumberToObject(s, "n_predict", r->max_tokens ? r->max_tokens : -1) &&
              cJSON_AddNumberToObject(s, "temperature", r->temperature) && cJSON_AddNumberToObject(s, "top_k", r->top_k) &&
              cJSON_AddNumberToObject(s, "top_p", r->top_p) && cJSON_AddNumberToObject(s, "min_p", r->min_p) &&
              cJSON_AddNumberToObject(s, "typical_p", r->typical_p) &&
              cJSON_AddNumberToObject(s, "repeat_penalty", r->repetition_penalty) &&
              cJSON_AddNumberToObject(s, "repeat_last_n", r->repeat_last_n) &&
              cJSON_AddNumberToObject(s, "presence_penalty", r->presence_penalty) &&
              cJSON_AddNumberToObject(s, "frequency_penalty", r->frequency_penalty) &&
              cJSON_AddNumberToObject(s, "n_probs", r->logprobs ? r->top_logprobs : 0) &&
              cJSON_AddBoolToObject(s, "ignore_eos", r->ignore_eos) && cJSON_AddBoolToObject(s, "stream", r->stream) &&
              cJSON_AddBoolToObject(s, "cache_prompt", r->cache_prompt) && (stop = cJSON_AddArrayToObject(s, "stop"));
    for (int32_t i = 0; ok && i < r->n_stop; i++) ok = cJSON_AddItemToArray(stop, cJSON_CreateString(r->stop[i]));
    if (ok && r->seed_given) ok = cJSON_AddNumberToObject(s, "seed", (double)r->seed) != NULL;
    if (!ok) {
        cJSON_Delete(s);
        return NULL;
    }
    return s;
}

bool srv_llama_wants_tokens(const void *writer) {
    const llama_writer *w = writer;
    return w->return_tokens || w->probs || w->stream;
}

int srv_llama_request(const char *body, size_t len, const srv_limits *lim, const char *model, const nc_model *m,
                      int32_t n_ctx, srv_request *out, srv_infill *infill, void **writer, srv_error *e) {
    memset(out, 0, sizeof *out);
    *writer = NULL;
    if (infill) memset(infill, 0, sizeof *infill);
    cJSON *root = srv_json_parse_object(body, len, e);
    if (!root) return -1;
    llama_writer *w = calloc(1, sizeof *w);
    cJSON *oa = cJSON_CreateObject();
    int32_t n_indent = 0, t_max_prompt = 0;
    int rc = !w || !oa || !(w->model = strdup(model)) ? srv_oom(e) : 0;
    if (!rc) rc = translate(root, infill != NULL, oa, w, &n_indent, &t_max_prompt, e);
    if (!rc && infill) rc = infill_parts(root, infill, e);
    cJSON_Delete(root);
    if (!rc) rc = srv_request_from_json(SRV_API_COMPLETIONS, oa, lim, out, e);
    cJSON_Delete(oa);
    if (!rc) {
        out->n_indent = n_indent;
        out->t_max_prompt_ms = t_max_prompt;
        w->m = m;
        if (!(w->settings = settings_of(out, n_ctx, model))) rc = srv_oom(e);
    }
    if (rc) {
        srv_request_free(out);
        if (infill) srv_infill_free(infill);
        writer_free(w);
        return -1;
    }
    *writer = w;
    return 0;
}

/* ---- Fill in the middle -------------------------------------------------------------------- */

/* The id of the control token written text, or -1 when the vocabulary has none. */
static int32_t special_token(const nc_model *m, const char *text) {
    int32_t ids[4];
    nc_err err;
    int n = nc_tokenize(m, text, strlen(text), false, true, ids, 4, &err);
    if (n != 1) return -1;
    char piece[64];
    int k = nc_token_piece(m, ids[0], piece, sizeof piece - 1);
    return k == (int)strlen(text) && !memcmp(piece, text, (size_t)k) ? ids[0] : -1;
}

/* The first of names the vocabulary has, or -1. */
static int32_t first_of(const nc_model *m, const char *const *names) {
    for (; *names; names++) {
        int32_t id = special_token(m, *names);
        if (id >= 0) return id;
    }
    return -1;
}

bool srv_fim_tokens_of(const nc_model *m, srv_fim_tokens *out) {
    /* the families' markers (Qwen, StarCoder / Granite, CodeLlama, DeepSeek, GLM-4.5) */
    static const char *const pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
                                      "<PRE>", "<|code_prefix|>", NULL};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
                                      "<SUF>", "<|code_suffix|>", NULL};
    static const char *const mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
                                      "<MID>", "<|code_middle|>", NULL};
    static const char *const rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const sep[] = {"<|file_sep|>", "<file_sep>", NULL};
    *out = (srv_fim_tokens){.pre = first_of(m, pre), .suf = first_of(m, suf), .mid = first_of(m, mid),
                            .rep = first_of(m, rep), .sep = first_of(m, sep)};
    return out->pre >= 0 && out->suf >= 0 && out->mid >= 0;
}

typedef struct ids {
    int32_t *v;
    int32_t n, cap;
    bool oom;
} ids;

static void push(ids *b, const int32_t *v, int32_t n) {
    if (b->oom || n <= 0) return;
    if (b->n + n > b->cap) {
        int32_t cap = 2 * (b->n + n);
        int32_t *g = realloc(b->v, (size_t)cap * sizeof *g);
        if (!g) {
            b->oom = true;
            return;
        }
        b->v = g;
        b->cap = cap;
    }
    memcpy(b->v + b->n, v, (size_t)n * sizeof *v);
    b->n += n;
}

static void push_one(ids *b, int32_t t) { push(b, &t, 1); }

/* Text's tokens (no BOS, special tokens not parsed: code may hold marker-like text) onto b. */
static int push_text(ids *b, const nc_model *m, const char *text, srv_error *e) {
    int32_t *t, n;
    if (srv_tokenize(m, text, strlen(text), false, false, &t, &n, e)) return -1;
    push(b, t, n);
    free(t);
    return 0;
}

int srv_infill_prompt(const nc_model *m, int32_t n_ctx, const srv_infill *f, const char *prompt, size_t prompt_len,
                      int32_t n_predict, int32_t **out, int32_t *n_out, srv_error *e) {
    srv_fim_tokens fim;
    if (!srv_fim_tokens_of(m, &fim))
        return srv_refuse(e, "input_prefix", "this model has no fill-in-the-middle tokens (<|fim_prefix|>, <fim_prefix>, <PRE> "
                      "...): /infill needs a code model trained for it");
    ids extra = {0}, pre = {0}, suf = {0}, mid = {0};
    int rc = 0;
    if (fim.rep >= 0) {
        push_one(&extra, fim.rep);
        rc = push_text(&extra, m, "myproject\n", e);
    }
    for (int32_t i = 0; !rc && i < f->n_extra; i++) {
        if (fim.sep >= 0) {
            push_one(&extra, fim.sep);
            char *name = malloc(strlen(f->extra_names[i]) + 2);
            if (!name) rc = srv_oom(e);
            else {
                sprintf(name, "%s\n", f->extra_names[i]);
                rc = push_text(&extra, m, name, e);
                free(name);
            }
        } else {
            rc = push_text(&extra, m, "\n\n--- snippet ---\n\n", e);
        }
        if (!rc) rc = push_text(&extra, m, f->extra_texts[i], e);
    }
    if (!rc && fim.sep >= 0) {
        push_one(&extra, fim.sep);
        rc = push_text(&extra, m, "filename\n", e);
    }
    if (!rc) rc = push_text(&pre, m, f->prefix, e);
    if (!rc) rc = push_text(&suf, m, f->suffix, e);
    char *p = rc ? NULL : strndup(prompt, prompt_len);
    if (!rc && !p) rc = srv_oom(e);
    if (!rc) rc = push_text(&mid, m, p, e);
    free(p);
    /* what must fit: the markers, the prompt and room for the reply; then the prefix's end and the
       suffix's start, and the extra context last */
    int32_t bos = nc_vocab_adds_bos(m) ? nc_token_bos(m) : -1;
    int32_t room = n_predict > 0 ? n_predict : n_ctx / 4;
    int32_t budget = n_ctx - room - 3 - (bos >= 0) - mid.n;
    if (!rc && budget < 1)
        rc = srv_refuse(e, "prompt", "the prompt and n_predict (%d) leave no room in the context of %d tokens", room, n_ctx);
    if (!rc) {
        int32_t take_pre = pre.n < budget * 3 / 4 ? pre.n : budget * 3 / 4;
        int32_t take_suf = suf.n < budget - take_pre ? suf.n : budget - take_pre;
        if (take_pre < pre.n && take_suf == suf.n) take_pre = pre.n < budget - take_suf ? pre.n : budget - take_suf;
        int32_t take_extra = budget - take_pre - take_suf;
        if (take_extra > extra.n) take_extra = extra.n;
        ids all = {0};
        if (bos >= 0) push_one(&all, bos);
        push(&all, extra.v + extra.n - take_extra, take_extra);
        push_one(&all, fim.pre);
        push(&all, pre.v + pre.n - take_pre, take_pre);
        push(&all, mid.v, mid.n);
        push_one(&all, fim.suf);
        push(&all, suf.v, take_suf);
        push_one(&all, fim.mid);
        if (all.oom || extra.oom || pre.oom || suf.oom || mid.oom) {
            free(all.v);
            rc = srv_oom(e);
        } else {
            *out = all.v;
            *n_out = all.n;
        }
    }
    free(extra.v);
    free(pre.v);
    free(suf.v);
    free(mid.v);
    return rc;
}

/* ---- The reply ----------------------------------------------------------------------------- */

/* A token's record: {"id", "token", "bytes", "logprob"}. */
static cJSON *token_record(const llama_writer *w, int32_t id, double logprob) {
    char piece[256];
    int n = nc_token_piece(w->m, id, piece, sizeof piece);
    if (n < 0 || n > (int)sizeof piece) n = 0;
    cJSON *o = cJSON_CreateObject(), *bytes = NULL;
    bool ok = o && cJSON_AddNumberToObject(o, "id", id) && srv_put_text(o, "token", piece, (size_t)n) &&
              cJSON_AddNumberToObject(o, "logprob", logprob) && (bytes = cJSON_AddArrayToObject(o, "bytes"));
    for (int i = 0; ok && i < n; i++) ok = cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool put_tokens(const llama_writer *w, cJSON *o, const srv_logprob *lp, int32_t n) {
    cJSON *t = cJSON_AddArrayToObject(o, "tokens");
    bool ok = t != NULL;
    for (int32_t i = 0; ok && w->return_tokens && i < n; i++) ok = cJSON_AddItemToArray(t, cJSON_CreateNumber(lp[i].token));
    if (!ok || !w->probs) return ok;
    cJSON *probs = cJSON_AddArrayToObject(o, "completion_probabilities");
    for (int32_t i = 0; probs && i < n; i++) {
        cJSON *rec = token_record(w, lp[i].token, lp[i].logprob), *top = rec ? cJSON_AddArrayToObject(rec, "top_logprobs") : NULL;
        if (!top || !cJSON_AddItemToArray(probs, rec)) {
            cJSON_Delete(rec);
            return false;
        }
        for (int32_t k = 0; k < lp[i].n_top; k++) {
            cJSON *alt = token_record(w, lp[i].top[k].token, lp[i].top[k].logprob);
            if (!alt || !cJSON_AddItemToArray(top, alt)) {
                cJSON_Delete(alt);
                return false;
            }
        }
    }
    return probs != NULL;
}

/* response_fields: only the fields named, "a/b" taken out of object a under the name "a/b"; a
 * stream's last event keeps "stop", which tells the client it is the last. */
static cJSON *only_fields(const llama_writer *w, cJSON *full, bool stream) {
    if (!w->fields || !full) return full;
    cJSON *out = cJSON_CreateObject();
    if (out && stream && !cJSON_AddTrueToObject(out, "stop")) {
        cJSON_Delete(out);
        out = NULL;
    }
    for (const cJSON *f = w->fields->child; out && f; f = f->next) {
        const char *name = f->valuestring, *slash = strchr(name, '/');
        const cJSON *v;
        if (slash) {
            char head[130];
            snprintf(head, sizeof head, "%.*s", (int)(slash - name), name);
            v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(full, head), slash + 1);
        } else {
            v = cJSON_GetObjectItemCaseSensitive(full, name);
        }
        if (!v || cJSON_GetObjectItemCaseSensitive(out, name)) continue;
        cJSON *c = cJSON_Duplicate(v, true);
        if (!c || !cJSON_AddItemToObject(out, name, c)) {
            cJSON_Delete(c);
            cJSON_Delete(out);
            out = NULL;
        }
    }
    cJSON_Delete(full);
    return out;
}

/* The final result (content: the whole text, or "" for a stream's last event). */
static cJSON *final_object(llama_writer *w, const srv_dialect_end *d, const char *content, size_t n_content, bool stream) {
    const srv_usage *u = d->usage;
    const char *stop_type = d->finish == NC_FINISH_LENGTH || d->finish == NC_FINISH_CONTEXT ? "limit"
                            : d->stop_word ? "word" : "eos";
    cJSON *o = cJSON_CreateObject(), *t = NULL, *s = cJSON_Duplicate(w->settings, true);
    double pn = (double)u->prompt_tokens, gn = (double)u->completion_tokens;
    bool ok = o && s && cJSON_AddNumberToObject(o, "index", 0) && srv_put_text(o, "content", content, n_content) &&
              put_tokens(w, o, stream ? NULL : d->lp, stream ? 0 : d->n_lp) && cJSON_AddNumberToObject(o, "id_slot", -1) &&
              cJSON_AddTrueToObject(o, "stop") && cJSON_AddStringToObject(o, "model", w->model) &&
              cJSON_AddNumberToObject(o, "tokens_predicted", gn) && cJSON_AddNumberToObject(o, "tokens_evaluated", pn) &&
              cJSON_AddItemToObject(o, "generation_settings", s) && (s = NULL, true) &&
              cJSON_AddBoolToObject(o, "has_new_line", memchr(d->reply->content, '\n', d->reply->n_content) != NULL) &&
              cJSON_AddBoolToObject(o, "truncated", d->finish == NC_FINISH_CONTEXT) &&
              cJSON_AddStringToObject(o, "stop_type", stop_type) &&
              cJSON_AddStringToObject(o, "stopping_word", d->stop_word ? d->stop_word : "") &&
              cJSON_AddNumberToObject(o, "tokens_cached", (double)u->cached_tokens) &&
              (t = cJSON_AddObjectToObject(o, "timings")) && cJSON_AddNumberToObject(t, "prompt_n", pn) &&
              cJSON_AddNumberToObject(t, "prompt_ms", d->prompt_ms) &&
              cJSON_AddNumberToObject(t, "prompt_per_token_ms", pn > 0 ? d->prompt_ms / pn : 0) &&
              cJSON_AddNumberToObject(t, "prompt_per_second", d->prompt_ms > 0 ? pn * 1000 / d->prompt_ms : 0) &&
              cJSON_AddNumberToObject(t, "predicted_n", gn) && cJSON_AddNumberToObject(t, "predicted_ms", d->predicted_ms) &&
              cJSON_AddNumberToObject(t, "predicted_per_token_ms", gn > 0 ? d->predicted_ms / gn : 0) &&
              cJSON_AddNumberToObject(t, "predicted_per_second", d->predicted_ms > 0 ? gn * 1000 / d->predicted_ms : 0);
    cJSON_Delete(s);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return only_fields(w, o, stream);
}

static char *whole(void *st, const srv_dialect_end *d) {
    llama_writer *w = st;
    cJSON *o = final_object(w, d, d->reply->content, d->reply->n_content, false);
    return srv_json_print(o, o != NULL);
}

/* "data: JSON\n\n" (llama.cpp's events carry no name). */
static char *data_event(char *json) {
    if (!json) return NULL;
    size_t n = strlen(json) + 9;
    char *out = malloc(n);
    if (out) snprintf(out, n, "data: %s\n\n", json);
    free(json);
    return out;
}

static char *begin(void *st, int64_t prompt_tokens) {
    (void)st, (void)prompt_tokens;
    return strdup("");
}

static char *delta(void *st, const char *reasoning, size_t n_reasoning, const char *content, size_t n_content,
                   const srv_logprob *lp, int32_t n_lp) {
    llama_writer *w = st;
    (void)reasoning, (void)n_reasoning;
    if (!n_content && !n_lp) return strdup("");
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "index", 0) && srv_put_text(o, "content", content, n_content) &&
              put_tokens(&(llama_writer){.m = w->m, .return_tokens = true, .probs = w->probs}, o, lp, n_lp) &&
              cJSON_AddFalseToObject(o, "stop") && cJSON_AddNumberToObject(o, "id_slot", -1);
    w->sent += n_content;
    return data_event(srv_json_print(o, ok));
}

static char *end(void *st, const srv_dialect_end *d) {
    llama_writer *w = st;
    cJSON *o = final_object(w, d, "", 0, true);
    return data_event(srv_json_print(o, o != NULL));
}

static char *stream_error(void *st, const srv_error *e) {
    (void)st;
    return data_event(srv_json_error(e));
}

const srv_dialect srv_llama = {.whole = whole, .begin = begin, .delta = delta, .end = end, .error = stream_error,
                               .error_body = srv_json_error, .free = writer_free};

/* ---- /props and /slots --------------------------------------------------------------------- */

/* The defaults of /v1 requests (OpenAI's: neutral), as llama.cpp's "params" shows them. */
static bool default_params(cJSON *p) {
    return cJSON_AddNumberToObject(p, "n_predict", -1) && cJSON_AddNumberToObject(p, "temperature", 1) &&
           cJSON_AddNumberToObject(p, "top_k", 0) && cJSON_AddNumberToObject(p, "top_p", 1) &&
           cJSON_AddNumberToObject(p, "min_p", 0) && cJSON_AddNumberToObject(p, "typical_p", 1) &&
           cJSON_AddNumberToObject(p, "repeat_penalty", 1) && cJSON_AddNumberToObject(p, "repeat_last_n", 64) &&
           cJSON_AddNumberToObject(p, "presence_penalty", 0) && cJSON_AddNumberToObject(p, "frequency_penalty", 0) &&
           cJSON_AddNumberToObject(p, "dry_multiplier", 0) && cJSON_AddNumberToObject(p, "dry_base", 1.75) &&
           cJSON_AddNumberToObject(p, "dry_allowed_length", 2) && cJSON_AddNumberToObject(p, "dry_penalty_last_n", -1) &&
           cJSON_AddNumberToObject(p, "xtc_probability", 0) && cJSON_AddNumberToObject(p, "xtc_threshold", 0.1) &&
           cJSON_AddNumberToObject(p, "mirostat", 0) && cJSON_AddNumberToObject(p, "mirostat_tau", 5) &&
           cJSON_AddNumberToObject(p, "mirostat_eta", 0.1) && cJSON_AddArrayToObject(p, "stop") &&
           cJSON_AddFalseToObject(p, "ignore_eos") && cJSON_AddNumberToObject(p, "n_probs", 0) &&
           cJSON_AddNumberToObject(p, "min_keep", 0);
}

char *srv_json_props(const srv_props *p) {
    cJSON *o = cJSON_CreateObject(), *dg = NULL, *params = NULL, *mod = NULL;
    bool ok = o && (dg = cJSON_AddObjectToObject(o, "default_generation_settings")) && cJSON_AddNumberToObject(dg, "id", 0) &&
              cJSON_AddNumberToObject(dg, "id_task", -1) && cJSON_AddNumberToObject(dg, "n_ctx", p->n_ctx) &&
              cJSON_AddBoolToObject(dg, "speculative", p->speculative) && cJSON_AddFalseToObject(dg, "is_processing") &&
              (params = cJSON_AddObjectToObject(dg, "params")) && default_params(params) &&
              cJSON_AddNumberToObject(o, "total_slots", p->n_slots) && cJSON_AddStringToObject(o, "model", p->model) &&
              cJSON_AddStringToObject(o, "model_alias", p->model) && cJSON_AddStringToObject(o, "model_path", p->path) &&
              cJSON_AddNumberToObject(o, "n_ctx", p->n_ctx) &&
              cJSON_AddStringToObject(o, "chat_template", p->chat_template ? p->chat_template : "") &&
              cJSON_AddObjectToObject(o, "chat_template_caps") && (mod = cJSON_AddObjectToObject(o, "modalities")) &&
              cJSON_AddFalseToObject(mod, "vision") && cJSON_AddFalseToObject(mod, "audio") &&
              cJSON_AddStringToObject(o, "build_info", "nucleus") && cJSON_AddFalseToObject(o, "is_sleeping");
    return srv_json_print(o, ok);
}

char *srv_json_lora_adapters(const char *const *paths, const float *scales, int32_t n) {
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (int32_t i = 0; ok && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(arr, o) && cJSON_AddNumberToObject(o, "id", i) &&
             cJSON_AddStringToObject(o, "path", paths[i]) && cJSON_AddNumberToObject(o, "scale", scales[i]);
    }
    return srv_json_print(arr, ok);
}

char *srv_json_slots(const srv_slot_info *slots, int32_t n, int32_t n_ctx, bool speculative) {
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (int32_t i = 0; ok && i < n; i++) {
        const srv_slot_info *s = &slots[i];
        cJSON *o = cJSON_CreateObject(), *next = NULL;
        ok = o && cJSON_AddItemToArray(arr, o) && cJSON_AddNumberToObject(o, "id", i) &&
             cJSON_AddNumberToObject(o, "id_task", s->busy ? (double)s->task : -1) && cJSON_AddNumberToObject(o, "n_ctx", n_ctx) &&
             cJSON_AddBoolToObject(o, "speculative", speculative) && cJSON_AddBoolToObject(o, "is_processing", s->busy) &&
             cJSON_AddBoolToObject(o, "is_prefilling", s->prefilling) && cJSON_AddNumberToObject(o, "n_prompt_tokens", s->n_prompt) &&
             (next = cJSON_AddObjectToObject(o, "next_token")) &&
             cJSON_AddBoolToObject(next, "has_next_token", s->busy) && cJSON_AddNumberToObject(next, "n_remain", s->n_remain) &&
             cJSON_AddNumberToObject(next, "n_decoded", s->n_decoded);
        if (!ok && o && !cJSON_GetArraySize(arr)) cJSON_Delete(o);
    }
    return srv_json_print(arr, ok);
}
