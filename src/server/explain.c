/* nucleus_explain steps (see explain.h). */
#include "server/explain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

int32_t srv_top_logits(const float *x, int32_t n, int32_t k, int32_t *ids) {
    int32_t have = 0;
    for (int32_t i = 0; i < n && k > 0; i++) {
        if (isnan(x[i]) || (have == k && !(x[i] > x[ids[have - 1]]))) continue;
        int32_t at = have < k ? have++ : k - 1; /* full: the smallest kept gives way */
        /* strictly greater moves up, so an equal logit met later (a higher id) stays below */
        while (at > 0 && x[i] > x[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = i;
    }
    return have;
}

double srv_logsumexp(const float *x, int32_t n) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return mx;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    return mx + log(sum);
}

/* A number with the digits its source holds (a float's 7, a double's 10 here): cJSON prints a
 * double's shortest exact form, which for a float widened to double is 17 digits of noise.
 * JSON has no infinities nor NaN: null. */
static cJSON *number(double v, int digits) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[32];
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    return cJSON_CreateNumber(strtod(buf, NULL));
}

/* "token": id, "piece": its text (bytes that are not UTF-8 on their own become U+FFFD). */
static bool put_token(cJSON *o, int32_t token, srv_piece_fn piece, void *ctx) {
    char buf[256];
    int n = piece ? piece(ctx, token, buf, sizeof buf) : 0;
    char *clean = srv_utf8_clean(buf, n > 0 && n <= (int)sizeof buf ? (size_t)n : 0);
    bool ok = clean && srv_json_put(o, "token", cJSON_CreateNumber(token)) && srv_json_put(o, "piece", cJSON_CreateString(clean));
    free(clean);
    return ok;
}

/* The shape of `nucleus run --explain=json`'s stages. */
static cJSON *stage_item(const nc_explain_stage *s) {
    cJSON *o = cJSON_CreateObject();
    bool ok = srv_json_put(o, "name", cJSON_CreateString(s->name)) && srv_json_put(o, "param", number(s->param, 7)) &&
              srv_json_put(o, "n_before", cJSON_CreateNumber(s->n_before)) && srv_json_put(o, "n_after", cJSON_CreateNumber(s->n_after)) &&
              srv_json_put(o, "mass", number(s->mass, 7)) && srv_json_put(o, "what", cJSON_CreateString(s->what));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool put_report(cJSON *o, const nc_explain *ex, srv_piece_fn piece, void *ctx) {
    cJSON *stages = cJSON_CreateArray(), *top = NULL;
    bool ok = srv_json_put(o, "stages", stages);
    for (int32_t i = 0; ok && ex && i < ex->n_stages; i++) ok = srv_json_append(stages, stage_item(&ex->stage[i]));
    ok = ok && srv_json_put(o, "p", number(ex ? ex->p : NAN, 7)) &&
         srv_json_put(o, "n_candidates", cJSON_CreateNumber(ex ? ex->n_candidates : 0)) && srv_json_put(o, "top", top = cJSON_CreateArray());
    for (int32_t i = 0; ok && ex && i < ex->n_top; i++) {
        cJSON *t = cJSON_CreateObject();
        ok = srv_json_append(top, t) && put_token(t, ex->top[i].token, piece, ctx) && srv_json_put(t, "p", number(ex->top[i].p, 7));
    }
    return ok;
}

/* "raw": the model's logits: n_vocab, logsumexp, the chosen token's logit and the top_n. */
static bool put_raw(cJSON *o, const srv_explain_step *in, srv_piece_fn piece, void *ctx) {
    int32_t *ids = malloc((size_t)(in->top_n > 0 ? in->top_n : 1) * sizeof *ids);
    if (!ids) return false;
    int32_t k = srv_top_logits(in->logits, in->n_vocab, in->top_n, ids);
    double lse = srv_logsumexp(in->logits, in->n_vocab);
    cJSON *raw = cJSON_CreateObject(), *top = NULL;
    bool ok = srv_json_put(o, "raw", raw) && srv_json_put(raw, "n_vocab", cJSON_CreateNumber(in->n_vocab)) &&
              srv_json_put(raw, "logsumexp", number(lse, 10)) && srv_json_put(raw, "token_logit", number(in->logits[in->token], 7)) &&
              srv_json_put(raw, "top", top = cJSON_CreateArray());
    for (int32_t i = 0; ok && i < k; i++) {
        cJSON *t = cJSON_CreateObject();
        float x = in->logits[ids[i]];
        ok = srv_json_append(top, t) && put_token(t, ids[i], piece, ctx) && srv_json_put(t, "logit", number(x, 7)) &&
             srv_json_put(t, "logprob", number((double)x - lse, 7));
    }
    free(ids);
    return ok;
}

char *srv_json_explain_step(const srv_explain_step *in, srv_piece_fn piece, void *piece_ctx) {
    cJSON *o = cJSON_CreateObject();
    bool ok = srv_json_put(o, "sample", cJSON_CreateNumber(in->choice)) && srv_json_put(o, "step", cJSON_CreateNumber(in->step)) &&
              put_report(o, in->ex, piece, piece_ctx) && put_token(o, in->token, piece, piece_ctx) &&
              srv_json_put(o, "eog", cJSON_CreateBool(in->eog)) &&
              srv_json_put(o, "finish", cJSON_CreateString(nc_finish_name(in->finish))) && put_raw(o, in, piece, piece_ctx);
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}
