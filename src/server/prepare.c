/* Requests into jobs: chat template, tokenization, context checks, decoding parameters. */
#include "server/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common.h"

int srv_model_ctx_init(srv_model_ctx *mc, const nc_model *m, int32_t n_ctx, int32_t n_slots, const char *template_src,
                       char *note, size_t note_cap, nc_err *err) {
    nc_model_info info;
    nc_model_get_info(m, &info);
    *mc = (srv_model_ctx){.m = m, .n_ctx = n_ctx, .n_vocab = info.n_vocab, .n_slots = n_slots};
    if (template_src && note_cap) note[0] = 0;
    int rc = template_src ? nc_chat_template_from_source(&mc->chat, m, template_src, strlen(template_src), err)
                          : nc_chat_template_new(&mc->chat, m, note, note_cap, err);
    if (!rc) mc->fmt = srv_chat_format_of(nc_chat_template_source(mc->chat));
    mc->split_reasoning = true;
    mc->reasoning_budget = -1;
    return rc;
}

void srv_model_ctx_free(srv_model_ctx *mc) {
    nc_chat_template_free(mc->chat);
    memset(mc, 0, sizeof *mc);
}

int srv_tokenize(const nc_model *m, const char *text, size_t len, bool add_special, bool parse_special, int32_t **ids,
                 int32_t *n, srv_error *e) {
    *ids = NULL;
    *n = 0;
    int cap = len < (1u << 28) ? (int)len + 16 : 1 << 28;
    for (;;) {
        int32_t *buf = realloc(*ids, (size_t)cap * sizeof *buf);
        if (!buf) {
            free(*ids);
            *ids = NULL;
            srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory while tokenizing");
            return -1;
        }
        *ids = buf;
        nc_err err;
        int got = nc_tokenize(m, text, len, add_special, parse_special, buf, cap, &err);
        if (got < 0) {
            free(*ids);
            *ids = NULL;
            srv_error_set(e, 400, "invalid_request_error", NULL, NULL, "cannot tokenize: %s", err.msg);
            return -1;
        }
        if (got <= cap) {
            *n = got;
            return 0;
        }
        cap = got;
    }
}

static bool reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = 2 * need;
    char *grown = c < (1u << 30) ? realloc(*buf, c) : NULL;
    if (!grown) return false;
    *buf = grown;
    *cap = c;
    return true;
}

int srv_detokenize(const nc_model *m, const int32_t *ids, int32_t n, char **text, size_t *len, srv_error *e) {
    nc_detok *d = nc_detok_new(m);
    size_t cap = 256, used = 0, need = 0;
    char *buf = malloc(cap);
    bool ok = d && buf;
    /* i == n flushes what the detokenizer still holds (it needs 8 bytes of room) */
    for (int32_t i = 0; ok && i <= n; i++) {
        int got;
        do {
            ok = reserve(&buf, &cap, used + need + 9);
            int room = ok ? (int)(cap - used - 1) : 0;
            got = !ok ? 0 : i < n ? nc_detok_push(d, ids[i], buf + used, room) : nc_detok_flush(d, buf + used, room);
            need = got > room ? (size_t)got : 0; /* too long: nothing consumed, retry with room */
        } while (ok && need);
        used += got > 0 ? (size_t)got : 0;
    }
    nc_detok_free(d);
    if (!ok) {
        free(buf);
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory while detokenizing");
        return -1;
    }
    buf[used] = 0;
    *text = buf;
    *len = used;
    return 0;
}

uint64_t srv_random_u64(void) {
    uint64_t v;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v) return v;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    v ^= v >> 33; /* splitmix64's finaliser */
    v *= 0xff51afd7ed558ccdULL;
    return v ^ (v >> 33);
}

/* ---- Prompts ------------------------------------------------------------------------------- */

/* The messages as the template reads them: an assistant's earlier reasoning under the field
 * the template renders it from (gpt-oss's "thinking"). malloc'd; NULL when out of memory. */
static char *template_messages(const srv_model_ctx *mc, const char *messages_json) {
    const char *key = mc->fmt.reasoning ? mc->fmt.reasoning->message_key : "reasoning_content";
    if (!strcmp(key, "reasoning_content")) return strdup(messages_json);
    cJSON *arr = cJSON_Parse(messages_json);
    bool ok = arr != NULL;
    cJSON *m;
    cJSON_ArrayForEach(m, arr) {
        cJSON *rc = cJSON_DetachItemFromObjectCaseSensitive(m, "reasoning_content");
        if (rc) ok = ok && cJSON_AddItemToObject(m, key, rc);
    }
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return out;
}

/* The messages for the template: the tools described to one that takes none; the calls of
 * earlier turns as the template can render them (LFM2's render none: they go into the content as
 * the model wrote them; Functionary v3.2's join the arguments to strings). malloc'd; NULL when
 * out of memory. */
static char *chat_messages(const srv_model_ctx *mc, const srv_request *r, const char *tools) {
    const srv_call_syntax *sx = mc->fmt.calls;
    if (!mc->fmt.template_takes_tools) return srv_tools_describe(r->messages_json, tools);
    if (sx->kind == SRV_CALLS_PYTHONIC) return srv_calls_python_into_content(sx, r->messages_json);
    if (sx->args_text) return srv_calls_args_as_text(r->messages_json);
    return strdup(r->messages_json);
}

/* The request's reasoning budget, else the server's. */
static int32_t reasoning_budget(const srv_model_ctx *mc, const srv_request *r) {
    return r->reasoning_budget != SRV_BUDGET_SERVER ? r->reasoning_budget : mc->reasoning_budget;
}

/* The variables beside the messages: the tools (for a template that takes them), the request's
 * chat_template_kwargs, reasoning_effort, and enable_thinking false under --reasoning-budget 0
 * unless the request says otherwise. */
static char *template_extra(const srv_model_ctx *mc, const srv_request *r, const char *tools) {
    cJSON *x = r->template_kwargs_json ? cJSON_Parse(r->template_kwargs_json) : cJSON_CreateObject();
    bool ok = x != NULL;
    if (ok && tools && mc->fmt.template_takes_tools) {
        cJSON *t = cJSON_Parse(tools);
        ok = t && cJSON_AddItemToObject(x, "tools", t);
    }
    if (ok && r->reasoning_effort && !cJSON_GetObjectItemCaseSensitive(x, "reasoning_effort"))
        ok = cJSON_AddStringToObject(x, "reasoning_effort", r->reasoning_effort) != NULL;
    if (ok && reasoning_budget(mc, r) == 0 && !cJSON_GetObjectItemCaseSensitive(x, "enable_thinking"))
        ok = cJSON_AddFalseToObject(x, "enable_thinking") != NULL;
    char *out = ok ? cJSON_PrintUnformatted(x) : NULL;
    cJSON_Delete(x);
    return out;
}

int srv_render_chat(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, char **text,
                    size_t *len, bool *add_bos, bool *opened, srv_error *e) {
    /* tool_choice "none" leaves the tools out, so that no call can be made; a template that does
       not take tools gets them described in the conversation */
    const char *tools = r->tool_choice == SRV_TOOLS_NONE ? NULL : r->tools_json;
    char *prepared = chat_messages(mc, r, tools);
    char *msgs = prepared ? template_messages(mc, prepared) : NULL;
    char *extra = msgs ? template_extra(mc, r, tools) : NULL;
    free(prepared);
    *text = NULL;
    if (!extra) {
        free(msgs);
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    nc_err err;
    int rc = nc_chat_render_watched(mc->chat, msgs, extra, true, gone, user, text, len, add_bos, &err);
    free(msgs);
    free(extra);
    if (rc && gone && gone(user)) {
        srv_error_set(e, 499, "invalid_request_error", NULL, NULL, "the client closed the connection");
        return -1;
    }
    if (rc) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "messages", "the chat template failed: %s", err.msg);
        return -1;
    }
    *opened = srv_reasoning_opened(mc->fmt.reasoning, *text, *len);
    return 0;
}

/* The chat rendered by the template, tokenized with special tokens parsed. A BOS is added only
 * when the vocabulary wants one and the template did not write it. */
static int chat_prompt(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job *j,
                       int32_t **ids, int32_t *n, srv_error *e) {
    char *text;
    size_t len;
    bool add_bos;
    if (srv_render_chat(mc, r, gone, user, &text, &len, &add_bos, &j->reply.in_reasoning, e)) return -1;
    j->reply.opened = srv_call_opened(mc->fmt.calls, text, len) ? mc->fmt.calls : NULL;
    int rc = srv_tokenize(mc->m, text, len, add_bos, true, ids, n, e);
    free(text);
    return rc;
}

static int completion_prompt(const srv_model_ctx *mc, const srv_prompt *p, int32_t **ids, int32_t *n, srv_error *e) {
    if (p->text) return srv_tokenize(mc->m, p->text, p->text_len, true, true, ids, n, e);
    *ids = malloc((size_t)p->n_tokens * sizeof **ids);
    if (!*ids) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    memcpy(*ids, p->tokens, (size_t)p->n_tokens * sizeof **ids);
    *n = p->n_tokens;
    return 0;
}

static int check_length(const srv_model_ctx *mc, const srv_request *r, int32_t i, int32_t n, srv_error *e) {
    char param[32];
    if (r->api == SRV_API_CHAT) snprintf(param, sizeof param, "messages");
    else if (r->n_prompts == 1) snprintf(param, sizeof param, "prompt");
    else snprintf(param, sizeof param, "prompt[%d]", i);
    if (n == 0) {
        srv_error_set(e, 400, "invalid_request_error", NULL, param, "the prompt is empty (no tokens)");
        return -1;
    }
    if (n > mc->n_ctx) {
        srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                      "the prompt has %d tokens, more than the context of %d", n, mc->n_ctx);
        return -1;
    }
    return 0;
}

static int prepare_prompts(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job *j,
                           srv_error *e) {
    for (int32_t i = 0; i < j->n_prompts; i++) {
        int32_t *ids = NULL, n = 0;
        int rc = r->api == SRV_API_CHAT ? chat_prompt(mc, r, gone, user, j, &ids, &n, e)
                                        : completion_prompt(mc, &r->prompts[i], &ids, &n, e);
        if (rc) return -1;
        srv_job_set_prompt(j, i, ids, n);
        if (check_length(mc, r, i, n, e)) return -1;
    }
    return 0;
}

/* ---- Decoding ------------------------------------------------------------------------------ */

/* OpenAI's meaning: no truncation unless asked (top_k, top_p, min_p, typical_p from the request,
 * whose defaults are neutral), penalties over llama.cpp's window of the last 64 tokens. */
static void sampling_params(const srv_request *r, nc_sampler_params *p) {
    nc_sampler_params_default(p);
    p->seed = r->seed_given ? r->seed : srv_random_u64();
    p->temp = r->temperature;
    p->top_k = r->top_k;
    p->top_p = r->top_p;
    p->min_p = r->min_p;
    p->typical_p = r->typical_p;
    p->epsilon_cutoff = r->epsilon_cutoff;
    p->eta_cutoff = r->eta_cutoff;
    p->dynatemp_range = r->dynatemp_range;
    p->dynatemp_exponent = r->dynatemp_exponent;
    p->repeat_penalty = r->repetition_penalty;
    p->frequency_penalty = r->frequency_penalty;
    p->presence_penalty = r->presence_penalty;
    p->no_repeat_ngram = r->no_repeat_ngram_size;
    p->min_tokens = r->min_tokens;
    p->ignore_eos = r->ignore_eos;
    p->repeat_last_n = r->repeat_last_n;
    p->min_keep = r->min_keep;
    p->top_n_sigma = r->top_n_sigma;
    p->xtc_probability = r->xtc_probability;
    p->xtc_threshold = r->xtc_threshold;
    p->mirostat = r->mirostat;
    p->mirostat_tau = r->mirostat_tau;
    p->mirostat_eta = r->mirostat_eta;
    p->dry_multiplier = r->dry_multiplier;
    p->dry_base = r->dry_base;
    p->dry_allowed_length = r->dry_allowed_length;
    p->dry_penalty_last_n = r->dry_penalty_last_n;
    p->n_logprobs = r->logprobs ? r->top_logprobs : 0;
    p->explain = r->explain_top_n > 0;
}

/* What a grammar made here (a JSON Schema's, a required call's) lets come first: the rest of a
 * reasoning the prompt opened, or gpt-oss's analysis message. NULL: nothing (*e set when out of
 * memory). */
static char *grammar_lead(const srv_model_ctx *mc, const srv_job *j, srv_error *e) {
    const srv_reasoning_style *s = mc->fmt.reasoning;
    if (!s || (!j->reply.in_reasoning && !s->harmony)) return NULL;
    char *lead = srv_reasoning_lead(s);
    if (!lead) srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return lead;
}

/* A JSON Schema's grammar after the lead (gpt-oss: in the final channel). */
static int schema_grammar(const srv_model_ctx *mc, const char *lead, const char *schema, srv_gone_fn gone, void *user,
                          char **out, nc_err *err) {
    if (!lead) return nc_json_schema_to_grammar_watched(schema, NULL, gone, user, out, err);
    char *rules;
    if (nc_json_schema_to_grammar_watched(schema, "schema", gone, user, &rules, err)) return -1;
    const char *channel = mc->fmt.reasoning->harmony ? "\"<|channel|>final<|message|>\" " : "";
    size_t n = strlen(rules) + strlen(lead) + 64;
    if ((*out = malloc(n))) snprintf(*out, n, "root ::= lead %sschema\n%s%s", channel, rules, lead);
    free(rules);
    if (*out) return 0;
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return -1;
}

/* A compilation that failed: 499 when the caller stopped it (gone), else the request's 400. */
static void abandoned_or(srv_error *e, srv_gone_fn gone, void *user, const char *param, const nc_err *err) {
    if (gone && gone(user)) srv_error_set(e, 499, "invalid_request_error", NULL, NULL, "%s", NC_POLL_ABANDONED);
    else srv_error_set(e, 400, "invalid_request_error", NULL, param, "'%s': %s", param, err->msg);
}

/* The grammar the output is held to: the request's GBNF, its JSON Schema's, or for a required
 * tool call the calls' own; checked here, so that a grammar that does not parse is the
 * request's 400 rather than the engine's 500. A grammar given as GBNF holds the whole reply
 * (reasoning included); the others let the reasoning come first. */
static int output_grammar(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job *j,
                          srv_error *e) {
    nc_err err;
    const char *param = "grammar";
    bool forced_call = j->tool_calls && (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED);
    if (!r->grammar && !r->json_schema && !forced_call) return 0;
    char *lead = r->grammar ? NULL : grammar_lead(mc, j, e);
    if (!r->grammar && !lead && mc->fmt.reasoning && (j->reply.in_reasoning || mc->fmt.reasoning->harmony)) return -1;
    if (r->grammar) {
        j->grammar = strdup(r->grammar);
    } else if (r->json_schema) {
        param = r->schema_param;
        if (schema_grammar(mc, lead, r->json_schema, gone, user, &j->grammar, &err)) {
            abandoned_or(e, gone, user, param, &err);
            free(lead);
            return -1;
        }
    } else {
        param = "tools";
        j->grammar = srv_tool_grammar(j->reply.calls, r->tools_json, r->tool_choice_name, r->parallel_tool_calls, lead,
                                      gone, user, e);
        if (!j->grammar) {
            free(lead);
            return -1;
        }
    }
    free(lead);
    if (!j->grammar) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    j->sampling.grammar = j->grammar;
    if (nc_grammar_check_model_watched(mc->m, j->grammar, gone, user, &err)) {
        abandoned_or(e, gone, user, param, &err);
        return -1;
    }
    return 0;
}

/* How the chat's output is read back, and the reasoning budget's forced end. */
static int reply_params(const srv_model_ctx *mc, const srv_request *r, srv_job *j, srv_error *e) {
    bool split = r->reasoning_format == SRV_REASONING_DEFAULT ? mc->split_reasoning
                                                              : r->reasoning_format == SRV_REASONING_AUTO;
    j->reply.reasoning = r->api == SRV_API_CHAT && split ? mc->fmt.reasoning : NULL;
    j->reply.calls = j->tool_calls ? mc->fmt.calls : NULL;
    if (r->tools_json && !(j->tools_json = strdup(r->tools_json))) goto oom;
    j->reply.tools_json = j->tools_json;
    j->reply.first_call_only = !r->parallel_tool_calls;
    j->reasoning_budget = -1;
    const srv_reasoning_style *s = mc->fmt.reasoning;
    if (r->api != SRV_API_CHAT || !s || reasoning_budget(mc, r) < 0) return 0;
    /* gpt-oss goes on in the final channel */
    char end[96];
    snprintf(end, sizeof end, "%s%s", s->close, s->harmony ? "<|start|>assistant<|channel|>final<|message|>" : "");
    if (srv_tokenize(mc->m, end, strlen(end), false, true, &j->budget_end, &j->n_budget_end, e)) return -1;
    j->reasoning_budget = reasoning_budget(mc, r);
    j->thinking = s;
    return 0;
oom:
    srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

static int decoding_params(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job *j,
                           srv_error *e) {
    sampling_params(r, &j->sampling);
    j->stop.max_tokens = r->max_tokens;
    j->logprobs = r->logprobs;
    j->tool_calls = r->tools_json && r->tool_choice != SRV_TOOLS_NONE;
    j->t_max_predict_ms = r->t_max_predict_ms;
    j->n_indent = r->n_indent;
    j->t_max_prompt_ms = r->t_max_prompt_ms;
    j->cache_prompt = r->cache_prompt;
    j->id_slot = r->id_slot;
    if (reply_params(mc, r, j, e)) return -1;
    j->explain_top_n = r->explain_top_n;
    j->beam = r->use_beam_search;
    j->contrastive = r->contrastive;
    j->contrastive_params = (nc_contrastive_params){.penalty_alpha = r->penalty_alpha, .top_k = r->top_k};
    j->beam_params = (nc_beam_params){.n_beams = r->best_of, .length_penalty = r->length_penalty, .n_best = r->n,
                                      .early_stopping = r->early_stopping, .n_groups = r->num_beam_groups,
                                      .diversity_penalty = r->diversity_penalty};
    if (srv_job_own_params(j, r)) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    nc_err err;
    if (nc_sampler_params_check(&j->sampling, &err)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", err.msg);
        return -1;
    }
    if (output_grammar(mc, r, gone, user, j, e)) return -1;
    /* the sampler the engine will build (the stage order, the breakers against the vocabulary),
       built once here so that what it refuses is this request's 400 */
    nc_sampler *s;
    if (nc_sampler_new(&s, mc->m, mc->n_vocab, &j->sampling, &err)) {
        srv_error_set(e, 400, "invalid_request_error", NULL, r->samplers ? "samplers" : NULL, "%s", err.msg);
        return -1;
    }
    nc_sampler_free(s);
    return 0;
}

int srv_prepare_job(const srv_model_ctx *mc, const srv_request *r, srv_gone_fn gone, void *user, srv_job **out,
                    srv_error *e) {
    *out = NULL;
    srv_job *j = srv_job_new(r->api == SRV_API_CHAT ? 1 : r->n_prompts, r->n);
    if (!j) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if (prepare_prompts(mc, r, gone, user, j, e) || decoding_params(mc, r, gone, user, j, e)) {
        srv_job_unref(j);
        return -1;
    }
    *out = j;
    return 0;
}
