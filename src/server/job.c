/* Generation jobs: creation, reference counting, and the output the engine posts. */
#include "server/job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

srv_job *srv_job_new(int32_t n_prompts, int32_t n) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->n_prompts = n_prompts;
    j->n = n;
    j->n_choices = n_prompts * n;
    j->prompts = calloc((size_t)n_prompts, sizeof *j->prompts);
    j->n_prompt = calloc((size_t)n_prompts, sizeof *j->n_prompt);
    j->out = calloc((size_t)j->n_choices, sizeof *j->out);
    if (!j->prompts || !j->n_prompt || !j->out) {
        free(j->prompts);
        free(j->n_prompt);
        free(j->out);
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->cancelled, false);
    atomic_init(&j->refs, 1);
    return j;
}

void srv_job_ref(srv_job *j) { atomic_fetch_add(&j->refs, 1); }

static void job_free(srv_job *j) {
    for (int32_t i = 0; i < j->n_prompts; i++) free(j->prompts[i]);
    free(j->prompts);
    free(j->n_prompt);
    for (int32_t i = 0; i < j->n_choices; i++) {
        free(j->out[i].text);
        free(j->out[i].lp);
        for (int32_t k = 0; k < j->out[i].n_steps; k++) free(j->out[i].steps[k]);
        free(j->out[i].steps);
    }
    free(j->out);
    for (int32_t i = 0; j->stop_strings && i < j->stop.n_stop; i++) free(j->stop_strings[i]);
    free(j->stop_strings);
    free(j->bias);
    for (int32_t i = 0; i < j->n_breakers; i++) free(j->breakers[i]);
    free(j->breakers);
    free(j->samplers);
    free(j->grammar);
    free(j->tools_json);
    free(j->budget_end);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_unref(srv_job *j) {
    if (j && atomic_fetch_sub(&j->refs, 1) == 1) job_free(j);
}

void srv_job_set_prompt(srv_job *j, int32_t i, int32_t *ids, int32_t n) {
    free(j->prompts[i]);
    j->prompts[i] = ids;
    j->n_prompt[i] = n;
}

int srv_job_own_params(srv_job *j, const srv_request *r) {
    j->stop_strings = calloc((size_t)r->n_stop + 1, sizeof *j->stop_strings);
    j->bias = malloc(((size_t)r->n_logit_bias + 1) * sizeof *j->bias);
    j->breakers = calloc((size_t)r->n_dry_breakers + 1, sizeof *j->breakers);
    if (!j->stop_strings || !j->bias || !j->breakers || (r->samplers && !(j->samplers = strdup(r->samplers)))) return -1;
    for (int32_t i = 0; i < r->n_stop; i++) {
        if (!(j->stop_strings[i] = strdup(r->stop[i]))) return -1;
        j->stop.n_stop = i + 1;
    }
    for (; j->n_breakers < r->n_dry_breakers; j->n_breakers++)
        if (!(j->breakers[j->n_breakers] = strdup(r->dry_breakers[j->n_breakers]))) return -1;
    if (r->n_logit_bias) memcpy(j->bias, r->logit_bias, (size_t)r->n_logit_bias * sizeof *j->bias);
    j->stop.stop = (const char *const *)j->stop_strings;
    j->sampling.logit_bias = j->bias;
    j->sampling.n_logit_bias = r->n_logit_bias;
    if (r->dry_breakers_given) {
        j->sampling.dry_breakers = (const char *const *)j->breakers;
        j->sampling.n_dry_breakers = j->n_breakers;
    }
    j->sampling.samplers = j->samplers;
    return 0;
}

static bool grow(void **buf, size_t elem, size_t need, size_t *cap) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *p = realloc(*buf, c * elem);
    if (!p) return false;
    *buf = p;
    *cap = c;
    return true;
}

static void fail_locked(srv_job *j, const srv_error *e) {
    if (!j->failed) {
        j->failed = true;
        j->error = *e;
    }
    for (int32_t i = 0; i < j->n_choices; i++)
        if (!j->out[i].done) {
            j->out[i].done = true;
            j->n_done++;
        }
    j->version++;
    pthread_cond_broadcast(&j->cv);
}

static bool append_locked(srv_choice_out *o, const char *text, size_t n_text, const srv_logprob *lp) {
    if (!grow((void **)&o->text, 1, o->n_text + n_text + 1, &o->cap_text)) return false;
    memcpy(o->text + o->n_text, text, n_text);
    o->n_text += n_text;
    o->text[o->n_text] = 0;
    if (!lp) return true;
    size_t cap = (size_t)o->cap_lp;
    if (!grow((void **)&o->lp, sizeof *o->lp, (size_t)o->n_lp + 1, &cap)) return false;
    o->cap_lp = (int32_t)cap;
    o->lp[o->n_lp++] = *lp;
    return true;
}

static bool push_step_locked(srv_choice_out *o, char *step) {
    if (!step) return false;
    if (o->n_steps == o->cap_steps) {
        int32_t cap = o->cap_steps ? 2 * o->cap_steps : 64;
        char **grown = realloc(o->steps, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        o->steps = grown;
        o->cap_steps = cap;
    }
    o->steps[o->n_steps++] = step;
    return true;
}

void srv_job_post_step(srv_job *j, int32_t choice, char *step) {
    pthread_mutex_lock(&j->mu);
    srv_choice_out *o = &j->out[choice];
    size_t n = step ? strlen(step) : 0;
    srv_error e;
    if (o->done) {
        free(step);
    } else if (j->explain_bytes + n > SRV_MAX_EXPLAIN_BYTES) {
        free(step);
        srv_error_set(&e, 400, "invalid_request_error", "explain_too_large", "nucleus_explain",
                      "the nucleus_explain steps of this request passed the limit of %u MiB: ask for fewer "
                      "tokens (max_tokens), choices (n) or raw logits (nucleus_explain.top_n)",
                      SRV_MAX_EXPLAIN_BYTES >> 20);
        fail_locked(j, &e);
    } else if (!push_step_locked(o, step)) {
        free(step);
        srv_error_set(&e, 500, "server_error", NULL, NULL, "out of memory while explaining");
        fail_locked(j, &e);
    } else {
        j->explain_bytes += n;
    }
    pthread_mutex_unlock(&j->mu);
}

void srv_job_post(srv_job *j, int32_t choice, const char *text, size_t n_text, const srv_logprob *lp,
                  int32_t n_tokens, nc_finish finish) {
    pthread_mutex_lock(&j->mu);
    srv_choice_out *o = &j->out[choice];
    if (o->done) {
        pthread_mutex_unlock(&j->mu);
        return;
    }
    if (!append_locked(o, text, n_text, lp)) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL, "out of memory while generating");
        fail_locked(j, &e);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    o->n_tokens += n_tokens;
    if (finish != NC_FINISH_NONE) {
        o->finish = finish;
        o->done = true;
        j->n_done++;
    }
    j->version++;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(srv_job *j, const srv_error *e) {
    pthread_mutex_lock(&j->mu);
    fail_locked(j, e);
    pthread_mutex_unlock(&j->mu);
}

bool srv_job_finished(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool done = j->n_done == j->n_choices;
    pthread_mutex_unlock(&j->mu);
    return done;
}

uint64_t srv_job_wait(srv_job *j, uint64_t seen, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    until.tv_sec += timeout_ms / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    while (j->version == seen && j->n_done < j->n_choices && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&j->cv, &j->mu, &until);
    uint64_t version = j->version;
    pthread_mutex_unlock(&j->mu);
    return version;
}
