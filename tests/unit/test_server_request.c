/* The server's request parser: OpenAI bodies into srv_request, defaults, and a 400 naming the
 * field for every invalid value. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "test.h"

static const srv_limits lim = {.n_vocab = 1000, .max_n = 8};

static int parse(srv_api api, const char *body, srv_request *r, srv_error *e) {
    memset(e, 0, sizeof *e);
    return srv_request_parse(api, body, strlen(body), &lim, r, e);
}

/* The body must be refused with a 400 whose param is `param` ("" for none). */
static void expect_refusal(srv_api api, const char *body, const char *param) {
    srv_request r;
    srv_error e;
    int rc = parse(api, body, &r, &e);
    CHECK_MSG(rc == -1, "accepted: %s", body);
    CHECK_MSG(e.status == 400 && !strcmp(e.type, "invalid_request_error"), "status %d for %s", e.status, body);
    CHECK_MSG(!strcmp(e.param, param), "param '%s' instead of '%s' for %s (%s)", e.param, param, body, e.message);
    CHECK_MSG(e.message[0] != 0, "no message for %s", body);
    CHECK(r.prompts == NULL && r.messages_json == NULL && r.stop == NULL && r.logit_bias == NULL);
    srv_request_free(&r);
}

static void test_completion_defaults(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"Once upon\"}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].text && !strcmp(r.prompts[0].text, "Once upon"));
    CHECK(r.prompts[0].text_len == 9 && r.prompts[0].tokens == NULL);
    CHECK(r.model && !strcmp(r.model, "m"));
    CHECK(r.max_tokens == 16 && r.n == 1 && r.best_of == 1 && !r.stream && !r.logprobs);
    CHECK(r.temperature == 1.0f && r.top_p == 1.0f && r.top_k == 0 && r.min_p == 0 && r.typical_p == 1.0f);
    CHECK(r.epsilon_cutoff == 0 && r.eta_cutoff == 0 && r.dynatemp_range == 0 && r.dynatemp_exponent == 1.0f);
    CHECK(r.repetition_penalty == 1.0f && r.presence_penalty == 0 && r.frequency_penalty == 0);
    CHECK(!r.seed_given && r.n_stop == 0 && r.n_logit_bias == 0 && !r.use_beam_search);
    srv_request_free(&r);
}

static void test_completion_fields(void) {
    srv_request r;
    srv_error e;
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":5,\"temperature\":0.5,\"top_p\":0.9,\"n\":3,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\",\"\",\"bc\"],\"presence_penalty\":1,"
                       "\"frequency_penalty\":-1.5,\"logit_bias\":{\"5\":-100,\"7\":2.5},\"logprobs\":3,\"seed\":-1,"
                       "\"top_k\":40,\"min_p\":0.05,\"typical_p\":0.9,\"repetition_penalty\":1.1,"
                       "\"no_repeat_ngram_size\":3,\"min_tokens\":2,\"ignore_eos\":true,\"user\":\"ignored\","
                       "\"epsilon_cutoff\":3e-4,\"eta_cutoff\":2e-3,\"dynatemp_range\":0.5,\"dynatemp_exponent\":2}";
    CHECK(parse(SRV_API_COMPLETIONS, body, &r, &e) == 0);
    CHECK(r.max_tokens == 5 && r.n == 3 && r.best_of == 3 && r.stream && r.include_usage);
    CHECK_NEAR(r.temperature, 0.5, 1e-6);
    CHECK_NEAR(r.top_p, 0.9, 1e-6);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "a") && !strcmp(r.stop[1], "bc"));
    CHECK(r.presence_penalty == 1.0f && r.frequency_penalty == -1.5f);
    CHECK(r.n_logit_bias == 2 && r.logit_bias[0].token == 5 && r.logit_bias[0].bias == -INFINITY);
    CHECK(r.logit_bias[1].token == 7 && r.logit_bias[1].bias == 2.5f);
    CHECK(r.logprobs && r.top_logprobs == 3);
    CHECK(r.seed_given && r.seed == UINT64_MAX);
    CHECK(r.top_k == 40 && r.no_repeat_ngram_size == 3 && r.min_tokens == 2 && r.ignore_eos);
    CHECK_NEAR(r.min_p, 0.05, 1e-6);
    CHECK_NEAR(r.repetition_penalty, 1.1, 1e-6);
    CHECK(r.epsilon_cutoff == 3e-4f && r.eta_cutoff == 2e-3f && r.dynatemp_range == 0.5f && r.dynatemp_exponent == 2);
    srv_request_free(&r);

    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":0,\"seed\":42,\"stop\":\"\\n\"}", &r, &e) == 0);
    CHECK(r.logprobs && r.top_logprobs == 0 && r.seed == 42 && r.n_stop == 1 && !strcmp(r.stop[0], "\n"));
    srv_request_free(&r);

    /* null means "not given" */
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":null,\"stop\":null,\"logprobs\":null,"
                                     "\"max_tokens\":null,\"seed\":null,\"suffix\":\"\",\"echo\":false}",
                &r, &e) == 0);
    CHECK(r.temperature == 1.0f && r.n_stop == 0 && !r.logprobs && r.max_tokens == 16 && !r.seed_given);
    srv_request_free(&r);
}

static void test_prompt_forms(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":[1,2,999]}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_tokens == 3 && r.prompts[0].tokens[2] == 999 && !r.prompts[0].text);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",\"bb\",[4,5]]}", &r, &e) == 0);
    CHECK(r.n_prompts == 3 && !strcmp(r.prompts[1].text, "bb") && r.prompts[2].n_tokens == 2);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"\"}", &r, &e) == 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].text_len == 0);
    srv_request_free(&r);

    expect_refusal(SRV_API_COMPLETIONS, "{}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":null}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[]}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":5}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[1,1000]}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[1,-1]}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[1,2.5]}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[1,\"a\"]}", "prompt");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",7]}", "prompt[1]");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",[]]}", "prompt[1]");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":[[1],[2,5000]]}", "prompt[1]");
}

static void test_chat(void) {
    srv_request r;
    srv_error e;
    const char *body = "{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":\"text\","
                       "\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}],"
                       "\"logprobs\":true,\"top_logprobs\":2,\"max_tokens\":9,\"max_completion_tokens\":7}";
    CHECK(parse(SRV_API_CHAT, body, &r, &e) == 0);
    CHECK_MSG(r.messages_json && !strcmp(r.messages_json, "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                                          "{\"role\":\"user\",\"content\":\"Hi\\nthere\"},"
                                                          "{\"role\":\"assistant\",\"content\":\"\"}]"),
              "%s", r.messages_json ? r.messages_json : "(null)");
    CHECK(r.logprobs && r.top_logprobs == 2 && r.max_tokens == 7 && r.prompts == NULL);
    srv_request_free(&r);

    CHECK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", &r, &e) == 0);
    CHECK(r.max_tokens == 0 && !r.logprobs);
    srv_request_free(&r);

    expect_refusal(SRV_API_CHAT, "{\"prompt\":\"x\"}", "prompt"); /* it belongs to /v1/completions */
    expect_refusal(SRV_API_CHAT, "{\"max_tokens\":3}", "messages");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[]}", "messages");
    expect_refusal(SRV_API_CHAT, "{\"messages\":{}}", "messages");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[5]}", "messages[0]");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\",\"content\":\"b\"}]}",
                   "messages[1].role");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"content\":\"a\"}]}", "messages[0].role");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content");
    expect_refusal(SRV_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                   "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                   "messages[0].content[1]");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
                   "messages[0].content[0]");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"top_logprobs\":2}",
                   "top_logprobs");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"logprobs\":1}", "logprobs");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"max_completion_tokens\":0}",
                   "max_completion_tokens");
}

static void test_invalid_values(void) {
    expect_refusal(SRV_API_COMPLETIONS, "", "");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":", "");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\"} x", "");
    expect_refusal(SRV_API_COMPLETIONS, "[1]", "");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"model\":5}", "model");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":2.5}", "temperature");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":1.5}", "top_k");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"min_p\":-0.1}", "min_p");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"typical_p\":2}", "typical_p");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"epsilon_cutoff\":1}", "epsilon_cutoff");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"eta_cutoff\":-0.5}", "eta_cutoff");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"dynatemp_range\":\"a\"}", "dynatemp_range");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"frequency_penalty\":-2.01}", "frequency_penalty");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"no_repeat_ngram_size\":-1}", "no_repeat_ngram_size");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"min_tokens\":true}", "min_tokens");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"ignore_eos\":1}", "ignore_eos");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1e40}", "max_tokens");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":0}", "n");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":9}", "n");
    /* Above the slots, the refusal names the flag that sets them. */
    {
        srv_request r;
        srv_error e;
        CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":9}", &r, &e) == -1);
        CHECK_MSG(strstr(e.message, "--parallel 8"), "%s", e.message);
        srv_request_free(&r);
        CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"best_of\":12,\"use_beam_search\":true}", &r, &e) == -1);
        CHECK_MSG(!strcmp(e.param, "best_of") && strstr(e.message, "--parallel"), "%s: %s", e.param, e.message);
        srv_request_free(&r);
        CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"n\":0}", &r, &e) == -1);
        CHECK_MSG(!strstr(e.message, "--parallel"), "%s", e.message); /* below 1 is no matter of slots */
        srv_request_free(&r);
    }
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}",
                   "stream_options");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
                   "stream_options.include_usage");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":5}", "stop");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",3]}", "stop");
    expect_refusal(SRV_API_COMPLETIONS,
                   "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\","
                   "\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
                   "stop");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"1000\":1}}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"a\"}}", "logit_bias");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1.5}", "seed");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":\"7\"}", "seed");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1e30}", "seed");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":true}", "echo");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix");
}

static void test_beams(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.6,\"top_k\":4}", &r, &e) == 0);
    CHECK(r.contrastive && r.penalty_alpha == 0.6f && r.top_k == 4);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":4}", &r, &e) == 0);
    CHECK(!r.contrastive);
    srv_request_free(&r);
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.6}", "top_k");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.6,\"top_k\":99}", "top_k");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":1.5,\"top_k\":4}", "penalty_alpha");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.5,\"top_k\":4,\"n\":2}", "n");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.5,\"top_k\":4,\"logprobs\":1}",
                   "logprobs");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.5,\"top_k\":2,\"use_beam_search\":true}",
                   "use_beam_search");
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"best_of\":4,\"n\":2,"
                                     "\"length_penalty\":0.5}",
                &r, &e) == 0);
    CHECK(r.use_beam_search && r.best_of == 4 && r.n == 2 && r.length_penalty == 0.5f);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"n\":3}", &r, &e) == 0);
    CHECK(r.best_of == 3);
    CHECK(r.early_stopping == NC_EARLY_STOP_HEURISTIC && r.num_beam_groups == 1 && r.diversity_penalty == 0);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"best_of\":4,\"early_stopping\":\"never\","
                                     "\"num_beam_groups\":2,\"diversity_penalty\":0.5}",
                &r, &e) == 0);
    CHECK(r.early_stopping == NC_EARLY_STOP_NEVER && r.num_beam_groups == 2 && r.diversity_penalty == 0.5f);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"early_stopping\":true}", &r, &e) == 0);
    CHECK(r.early_stopping == NC_EARLY_STOP_FIRST);
    srv_request_free(&r);
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"early_stopping\":\"always\"}",
                   "early_stopping");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"best_of\":3,\"num_beam_groups\":2}",
                   "num_beam_groups");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"diversity_penalty\":-1}",
                   "diversity_penalty");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"stream\":true}", "stream");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"logprobs\":1}", "logprobs");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"best_of\":1,\"n\":2}",
                   "best_of");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"best_of\":3}", "best_of");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"best_of\":9,\"use_beam_search\":true}", "best_of");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"use_beam_search\":true,\"length_penalty\":\"a\"}",
                   "length_penalty");
}

static void test_tokenize_bodies(void) {
    srv_tokenize_req t;
    srv_detokenize_req d;
    srv_error e;
    const char *b1 = "{\"content\":\"Hello\",\"add_special\":true}";
    CHECK(srv_tokenize_parse(b1, strlen(b1), &t, &e) == 0);
    CHECK(t.len == 5 && !strcmp(t.content, "Hello") && t.add_special && t.parse_special);
    srv_tokenize_free(&t);
    const char *b2 = "{\"content\":3}";
    CHECK(srv_tokenize_parse(b2, strlen(b2), &t, &e) == -1 && !strcmp(e.param, "content") && t.content == NULL);
    const char *b3 = "{}";
    CHECK(srv_tokenize_parse(b3, strlen(b3), &t, &e) == -1 && !strcmp(e.param, "content"));
    const char *b4 = "{\"tokens\":[0,5,999]}";
    CHECK(srv_detokenize_parse(b4, strlen(b4), 1000, &d, &e) == 0 && d.n_tokens == 3 && d.tokens[1] == 5);
    srv_detokenize_free(&d);
    const char *b5 = "{\"tokens\":[0,1000]}";
    CHECK(srv_detokenize_parse(b5, strlen(b5), 1000, &d, &e) == -1 && !strcmp(e.param, "tokens") && !d.tokens);
    const char *b6 = "{\"tokens\":\"1 2\"}";
    CHECK(srv_detokenize_parse(b6, strlen(b6), 1000, &d, &e) == -1 && e.status == 400);
}

/* Host names: the port ignored, case ignored, brackets for IPv6, "*" for any, none for HTTP/1.0;
 * the defaults of a loopback and of a public bind. */
static void test_media_types(void) {
    CHECK(srv_json_media_type("application/json") && srv_json_media_type("Application/JSON"));
    CHECK(srv_json_media_type("application/json; charset=utf-8") && srv_json_media_type(" application/json ;x=y"));
    CHECK(!srv_json_media_type(NULL) && !srv_json_media_type("") && !srv_json_media_type("text/plain"));
    CHECK(!srv_json_media_type("application/x-www-form-urlencoded") && !srv_json_media_type("multipart/form-data"));
    CHECK(!srv_json_media_type("application/jsonx") && !srv_json_media_type("application/json-patch+json"));
}

static void test_hosts(void) {
    const char *lo = "localhost,127.0.0.1,[::1]";
    CHECK(srv_host_allowed("localhost:8080", lo) && srv_host_allowed("LOCALHOST", lo));
    CHECK(srv_host_allowed("127.0.0.1:1", lo) && srv_host_allowed("[::1]:8080", lo) && srv_host_allowed("[::1]", lo));
    CHECK(!srv_host_allowed("evil.example:8080", lo) && !srv_host_allowed("127.0.0.1.evil.example", lo));
    CHECK(!srv_host_allowed("localhos", lo) && !srv_host_allowed("localhostx", lo) && !srv_host_allowed("", lo));
    CHECK(!srv_host_allowed("[::1", lo) && !srv_host_allowed(":8080", lo));
    CHECK(srv_host_allowed(NULL, lo) && srv_host_allowed("anything", "*"));
    CHECK(srv_host_allowed("api.example.com", "api.example.com,other") && srv_host_allowed("other:1", "api.example.com,other"));
    /* after the name only a port: anything else makes it another name */
    CHECK(!srv_host_allowed("[::1]x.evil.com", lo) && !srv_host_allowed("[::1]:80x", lo) && !srv_host_allowed("[::1]:", lo));
    CHECK(!srv_host_allowed("localhost:80:81", lo) && !srv_host_allowed("localhost:123456", lo));
    CHECK(!srv_host_allowed("[::1].evil.com:80", lo) && srv_host_allowed("[::1]:65535", lo));
    char *d = srv_default_allowed_hosts("127.0.0.2");
    CHECK(d && srv_host_allowed("127.0.0.2:80", d) && srv_host_allowed("localhost", d) && !srv_host_allowed("evil", d));
    free(d);
    d = srv_default_allowed_hosts("::1");
    CHECK(d && srv_host_allowed("[::1]:80", d) && !srv_host_allowed("evil", d));
    free(d);
    d = srv_default_allowed_hosts("0.0.0.0");
    CHECK(d && !strcmp(d, "*"));
    free(d);
}

/* An escaped NUL would cut the text short inside cJSON: refused, naming where it is; an escaped
 * backslash before "u0000" is text. */
static void test_escaped_nul(void) {
    srv_tokenize_req t;
    srv_error e;
    const char *b1 = "{\"content\":\"Hello\\u0000 hidden\"}";
    CHECK(srv_tokenize_parse(b1, strlen(b1), &t, &e) == -1 && e.status == 400 && strstr(e.message, "NUL") &&
          strstr(e.message, "byte 17"));
    const char *b2 = "{\"content\":\"a\\\\u0000\"}";
    CHECK(srv_tokenize_parse(b2, strlen(b2), &t, &e) == 0 && !strcmp(t.content, "a\\u0000"));
    srv_tokenize_free(&t);
    const char *b3 = "{\"content\":\"\\u00001\"}";
    CHECK(srv_tokenize_parse(b3, strlen(b3), &t, &e) == -1);
    const char *b4 = "{\"content\":\"\\u0001\"}";
    CHECK(srv_tokenize_parse(b4, strlen(b4), &t, &e) == 0 && t.len == 1 && t.content[0] == 1);
    srv_tokenize_free(&t);
}

/* A key given twice means one thing to cJSON (the first) and maybe another to a proxy or a
 * client (the last): refused wherever it is, naming it and where. */
static void test_duplicate_keys(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": 1, \"max_tokens\": 900}", &r, &e) == -1);
    CHECK_MSG(e.status == 400 && strstr(e.message, "the key 'max_tokens' twice (in the top-level object)"), "%s", e.message);
    CHECK(parse(SRV_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"role\": \"system\"}]}", &r, &e) == -1);
    CHECK_MSG(strstr(e.message, "the key 'role' twice (in /messages/0)"), "%s", e.message);
    CHECK(parse(SRV_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"response_format\": {\"type\": "
                              "\"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"object\", "
                              "\"properties\": {\"a\": {}, \"b\": {}, \"a\": {}}}}}}",
                &r, &e) == -1);
    CHECK_MSG(strstr(e.message, "the key 'a' twice (in /response_format/json_schema/schema/properties)"), "%s", e.message);
    srv_tokenize_req t;
    const char *b = "{\"content\": \"x\", \"content\": \"y\"}";
    CHECK(srv_tokenize_parse(b, strlen(b), &t, &e) == -1 && e.status == 400 && strstr(e.message, "'content' twice"));
    /* the same key in two objects is no duplicate */
    CHECK(parse(SRV_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
                              "\"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
                &r, &e) == 0);
    srv_request_free(&r);
}

/* POST /slots/{id}?action=: the id from the path, the action from the query, a plain file name. */
/* /v1/embeddings: the four input forms, encoding_format, and refusals naming the field. */
static void test_embedding_bodies(void) {
    srv_embed_req r;
    srv_error e;
    const char *one = "{\"input\": \"hello\", \"model\": \"m\"}";
    CHECK(srv_embed_parse(one, strlen(one), &lim, &r, &e) == 0 && r.n_inputs == 1 && !strcmp(r.inputs[0].text, "hello") &&
          r.inputs[0].text_len == 5 && !strcmp(r.model, "m") && !r.base64);
    srv_embed_free(&r);
    const char *texts = "{\"input\": [\"a\", \"bc\"], \"encoding_format\": \"base64\"}";
    CHECK(srv_embed_parse(texts, strlen(texts), &lim, &r, &e) == 0 && r.n_inputs == 2 &&
          !strcmp(r.inputs[1].text, "bc") && r.base64 && !r.model);
    srv_embed_free(&r);
    const char *ids = "{\"input\": [1, 2, 999]}";
    CHECK(srv_embed_parse(ids, strlen(ids), &lim, &r, &e) == 0 && r.n_inputs == 1 && r.inputs[0].n_tokens == 3 &&
          r.inputs[0].tokens[2] == 999 && !r.inputs[0].text);
    srv_embed_free(&r);
    const char *lists = "{\"input\": [[1], [2, 3]], \"encoding_format\": \"float\"}";
    CHECK(srv_embed_parse(lists, strlen(lists), &lim, &r, &e) == 0 && r.n_inputs == 2 && r.inputs[1].n_tokens == 2 &&
          r.inputs[1].tokens[1] == 3 && !r.base64);
    srv_embed_free(&r);
    static const struct { const char *body, *param; } bad[] = {
        {"{}", "input"},
        {"{\"input\": null}", "input"},
        {"{\"input\": 7}", "input"},
        {"{\"input\": \"\"}", "input"},
        {"{\"input\": [\"a\", \"\"]}", "input"},
        {"{\"input\": []}", "input"},
        {"{\"input\": [1, 1000]}", "input"},
        {"{\"input\": [1, -1]}", "input"},
        {"{\"input\": [1.5]}", "input"},
        {"{\"input\": [[1], []]}", "input[1]"},
        {"{\"input\": [\"a\", {}]}", "input[1]"},
        {"{\"input\": \"a\", \"encoding_format\": \"int8\"}", "encoding_format"},
        {"{\"input\": \"a\", \"encoding_format\": 1}", "encoding_format"},
        {"{\"input\": \"a\", \"dimensions\": 8}", "dimensions"},
        {"{\"input\": \"a\", \"model\": 3}", "model"},
        {"[\"a\"]", ""},
        {"{\"input\": \"a\"", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = srv_embed_parse(bad[i].body, strlen(bad[i].body), &lim, &r, &e);
        CHECK(rc == -1 && e.status == 400 && !strcmp(e.param, bad[i].param) && !r.inputs && !r.model);
        if (rc != -1 || strcmp(e.param, bad[i].param)) fprintf(stderr, "  body %s: param '%s'\n", bad[i].body, e.param);
    }
    char many[8192] = "{\"input\": [";
    for (int i = 0; i <= SRV_MAX_PROMPTS; i++) strcat(many, i ? ",\"x\"" : "\"x\"");
    strcat(many, "]}");
    CHECK(srv_embed_parse(many, strlen(many), &lim, &r, &e) == -1 && !strcmp(e.param, "input"));
}

static void test_slot_bodies(void) {
    srv_slot_req r;
    srv_error e;
    const char *ok = "{\"filename\": \"slot-0_a.bin\"}";
    CHECK(srv_slot_parse("3", "save", ok, strlen(ok), 4, &r, &e) == 0 && r.id == 3 && r.op == SRV_SLOT_SAVE &&
          !strcmp(r.filename, "slot-0_a.bin"));
    CHECK(srv_slot_parse("0", "restore", ok, strlen(ok), 4, &r, &e) == 0 && r.id == 0 && r.op == SRV_SLOT_RESTORE);
    static const char *const bad_ids[] = {"4", "", "x", "1x", "-1", "00000000001", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++)
        CHECK(srv_slot_parse(bad_ids[i], "save", ok, strlen(ok), 4, &r, &e) == -1 && e.status == 400 &&
              !strcmp(e.param, "id_slot") && strstr(e.message, "expected a number from 0 to 3"));
    CHECK(srv_slot_parse("1", NULL, ok, strlen(ok), 4, &r, &e) == -1 && !strcmp(e.param, "action"));
    CHECK(srv_slot_parse("1", "erase", ok, strlen(ok), 4, &r, &e) == -1 && !strcmp(e.param, "action") &&
          strstr(e.message, "got 'erase'"));
    static const char *const bad_names[] = {
        "{\"filename\": \"../x\"}", "{\"filename\": \"a/b\"}", "{\"filename\": \"/etc/passwd\"}",
        "{\"filename\": \".hidden\"}", "{\"filename\": \"..\"}", "{\"filename\": \"a..b\"}",
        "{\"filename\": \"\"}", "{\"filename\": \"a b\"}", "{\"filename\": \"a\\\\b\"}",
        "{\"filename\": \"caf\u00e9\"}", "{\"filename\": 5}", "{}",
        "{\"filename\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++)
        CHECK_MSG(srv_slot_parse("1", "save", bad_names[i], strlen(bad_names[i]), 4, &r, &e) == -1 &&
                      !strcmp(e.param, "filename"),
                  "%s", bad_names[i]);
    const char *nul = "{\"filename\": \"a\\u0000b\"}"; /* the body's NUL, before the name is looked at */
    CHECK(srv_slot_parse("1", "save", nul, strlen(nul), 4, &r, &e) == -1 && strstr(e.message, "NUL"));
    const char *b = "[\"a.bin\"]";
    CHECK(srv_slot_parse("1", "save", b, strlen(b), 4, &r, &e) == -1 && strstr(e.message, "JSON object"));
}

/* Ids echoed as they came (UUIDs, nginx's $request_id, trace ids) and ids replaced. */
static void test_request_ids(void) {
    CHECK(srv_request_id_sane("0f8fad5b-d9cb-469f-a165-70867728950e"));
    CHECK(srv_request_id_sane("9e107d9d372bb6826bd81d3542a419d6"));
    CHECK(srv_request_id_sane("a") && srv_request_id_sane("trace:span/1+x=y@z_w.v"));
    char longest[SRV_REQUEST_ID_MAX + 2];
    memset(longest, 'x', sizeof longest);
    longest[SRV_REQUEST_ID_MAX] = 0;
    CHECK(srv_request_id_sane(longest));
    longest[SRV_REQUEST_ID_MAX] = 'x';
    longest[SRV_REQUEST_ID_MAX + 1] = 0;
    CHECK(!srv_request_id_sane(longest));
    const char *refused[] = {"", "a b", "a\"b", "a\r\nSet-Cookie: x", "a\tb", "<script>", "id;rm", "\xc3\xa9", "a,b"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        CHECK_MSG(!srv_request_id_sane(refused[i]), "accepted: %s", refused[i]);
}

#define CHAT(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]" extra "}"
#define TOOL(name) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"parameters\":{\"type\":\"object\"}}}"

/* Fields the server does not implement are refused by name, never ignored; null is absent. */
static void test_unknown_fields(void) {
    const char *unknown[] = {"modalities", "audio", "prediction", "functions", "function_call", "web_search_options",
                             "thinking", "enable_thinking", "x"};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"%s\":true}", unknown[i]);
        expect_refusal(SRV_API_CHAT, body, unknown[i]);
        snprintf(body, sizeof body, "{\"prompt\":\"q\",\"%s\":1}", unknown[i]);
        expect_refusal(SRV_API_COMPLETIONS, body, unknown[i]);
    }
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"tools\":[]}", "tools");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"max_completion_tokens\":3}", "max_completion_tokens");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"top_k\":3,\"top_k\":4}", "top_k");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"audio\":{}}]}", "messages[0]");
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_CHAT, CHAT(",\"store\":null,\"user\":\"u-1\""), &r, &e) == 0);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, CHAT(",\"user\":7"), "user");
}

/* Fields other servers' clients send, accepted with their meaning; their values checked. */
static void test_compat_fields(void) {
    srv_request r;
    srv_error e;
    srv_limits small = {.n_vocab = 1000, .max_n = 4};
    const char *ok = CHAT(",\"store\":false,\"metadata\":{\"team\":\"a\"},\"service_tier\":\"auto\",\"user\":\"u\","
                          "\"cache_prompt\":false,\"n_predict\":7,\"n_probs\":3,\"id_slot\":2,\"t_max_predict_ms\":500");
    CHECK(srv_request_parse(SRV_API_CHAT, ok, strlen(ok), &small, &r, &e) == 0);
    CHECK(!r.cache_prompt && r.max_tokens == 7 && r.logprobs && r.top_logprobs == 3 && r.id_slot == 2 &&
          r.t_max_predict_ms == 500);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(""), &r, &e) == 0);
    CHECK(r.cache_prompt && r.id_slot == -1 && r.t_max_predict_ms == 0 && r.max_tokens == 0);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"n_predict\":-1,\"n_probs\":2}", &r, &e) == 0);
    CHECK(r.max_tokens == 0 && r.logprobs && r.top_logprobs == 2);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, CHAT(",\"store\":true"), "store");
    expect_refusal(SRV_API_CHAT, CHAT(",\"store\":1"), "store");
    expect_refusal(SRV_API_CHAT, CHAT(",\"service_tier\":\"flex\""), "service_tier");
    expect_refusal(SRV_API_CHAT, CHAT(",\"metadata\":{\"a\":1}"), "metadata");
    expect_refusal(SRV_API_CHAT, CHAT(",\"metadata\":[]"), "metadata");
    expect_refusal(SRV_API_CHAT, CHAT(",\"n_predict\":0"), "n_predict");
    expect_refusal(SRV_API_CHAT, CHAT(",\"n_predict\":5,\"max_tokens\":5"), "n_predict");
    expect_refusal(SRV_API_CHAT, CHAT(",\"n_probs\":2,\"logprobs\":true"), "n_probs");
    expect_refusal(SRV_API_CHAT, CHAT(",\"n_probs\":21"), "n_probs");
    expect_refusal(SRV_API_CHAT, CHAT(",\"cache_prompt\":1"), "cache_prompt");
    expect_refusal(SRV_API_CHAT, CHAT(",\"id_slot\":8"), "id_slot");
    expect_refusal(SRV_API_CHAT, CHAT(",\"id_slot\":0,\"n\":2"), "id_slot");
    expect_refusal(SRV_API_CHAT, CHAT(",\"t_max_predict_ms\":-1"), "t_max_predict_ms");
}

/* Reasoning: the split asked for, the template's variables, earlier turns' reasoning. */
static void test_reasoning_fields(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_CHAT, CHAT(",\"reasoning_format\":\"none\",\"reasoning_effort\":\"high\","
                                   "\"chat_template_kwargs\":{\"enable_thinking\":false,\"x\":[1]}"), &r, &e) == 0);
    CHECK(r.reasoning_format == SRV_REASONING_NONE && r.reasoning_effort && !strcmp(r.reasoning_effort, "high"));
    CHECK(r.template_kwargs_json && !strcmp(r.template_kwargs_json, "{\"enable_thinking\":false,\"x\":[1]}"));
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(",\"reasoning_format\":\"deepseek\""), &r, &e) == 0);
    CHECK(r.reasoning_format == SRV_REASONING_AUTO);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(""), &r, &e) == 0);
    CHECK(r.reasoning_format == SRV_REASONING_DEFAULT && !r.reasoning_effort && !r.template_kwargs_json);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, CHAT(",\"reasoning_format\":\"deepseek-legacy\""), "reasoning_format");
    expect_refusal(SRV_API_CHAT, CHAT(",\"reasoning_effort\":\"max\""), "reasoning_effort");
    expect_refusal(SRV_API_CHAT, CHAT(",\"chat_template_kwargs\":[]"), "chat_template_kwargs");
    expect_refusal(SRV_API_CHAT, CHAT(",\"chat_template_kwargs\":{\"messages\":[]}"), "chat_template_kwargs");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"reasoning_effort\":\"low\"}", "reasoning_effort");
    /* an assistant's reasoning, under either name, kept as reasoning_content */
    const char *msgs = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\","
                       "\"reasoning\":\"r\"},{\"role\":\"user\",\"content\":\"q2\"}]}";
    CHECK(parse(SRV_API_CHAT, msgs, &r, &e) == 0);
    CHECK_MSG(r.messages_json && strstr(r.messages_json, "\"reasoning_content\":\"r\""), "%s", r.messages_json);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"reasoning_content\":\"r\"}]}",
                   "messages[0].reasoning_content");
    expect_refusal(SRV_API_CHAT,
                   "{\"messages\":[{\"role\":\"assistant\",\"content\":\"q\",\"reasoning_content\":3}]}",
                   "messages[0].reasoning_content");
}

/* The CLI's samplers under llama.cpp's server's names, with its defaults. */
static void test_llama_samplers(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"q\"}", &r, &e) == 0);
    CHECK(r.repeat_last_n == 64 && r.xtc_threshold == 0.1f && r.mirostat == 0 && r.mirostat_tau == 5.0f);
    CHECK(r.mirostat_eta == 0.1f && r.dry_multiplier == 0 && r.dry_base == 1.75f && r.dry_allowed_length == 2);
    CHECK(r.dry_penalty_last_n == -1 && !r.dry_breakers_given && r.samplers == NULL && r.top_n_sigma <= 0);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS,
                "{\"prompt\":\"q\",\"repeat_penalty\":1.1,\"repeat_last_n\":-1,\"top_n_sigma\":1.5,"
                "\"xtc_probability\":0.5,\"xtc_threshold\":0.2,\"mirostat\":2,\"mirostat_tau\":3,\"mirostat_eta\":0.2,"
                "\"dry_multiplier\":0.8,\"dry_base\":2,\"dry_allowed_length\":3,\"dry_penalty_last_n\":128,"
                "\"dry_sequence_breakers\":[\"\\n\",\"::\"],\"samplers\":[\"top_k\",\"temperature\"],\"min_keep\":2}",
                &r, &e) == 0);
    CHECK(r.repetition_penalty == 1.1f && r.repeat_last_n == -1 && r.top_n_sigma == 1.5f);
    CHECK(r.xtc_probability == 0.5f && r.xtc_threshold == 0.2f && r.mirostat == 2 && r.mirostat_tau == 3.0f);
    CHECK(r.mirostat_eta == 0.2f && r.dry_multiplier == 0.8f && r.dry_base == 2.0f && r.dry_allowed_length == 3);
    CHECK(r.dry_penalty_last_n == 128 && r.dry_breakers_given && r.n_dry_breakers == 2 && r.min_keep == 2);
    CHECK(!strcmp(r.dry_breakers[0], "\n") && !strcmp(r.dry_breakers[1], "::"));
    CHECK(r.samplers && !strcmp(r.samplers, "top_k;temperature"));
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"samplers\":\"min_p;dist\",\"dry_sequence_breakers\":[]}",
                &r, &e) == 0);
    CHECK(r.samplers && !strcmp(r.samplers, "min_p;dist") && r.dry_breakers_given && r.n_dry_breakers == 0);
    srv_request_free(&r);
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"mirostat\":3}", "mirostat");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"dry_base\":0.5}", "dry_base");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"xtc_probability\":-1}", "xtc_probability");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"dry_sequence_breakers\":[\"\"]}", "dry_sequence_breakers");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"dry_sequence_breakers\":[1]}", "dry_sequence_breakers");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"samplers\":{}}", "samplers");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"repeat_penalty\":1.1,\"repetition_penalty\":1.2}",
                   "repeat_penalty");
}

static void test_structured_output(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"json_object\"}"), &r, &e) == 0);
    CHECK(r.json_schema && !strcmp(r.json_schema, "{\"type\":\"object\"}") && !r.grammar);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"text\"}"), &r, &e) == 0);
    CHECK(!r.json_schema);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT,
                CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,"
                     "\"schema\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}}"),
                &r, &e) == 0);
    CHECK(r.json_schema && !strcmp(r.json_schema, "{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}"));
    CHECK(!strcmp(r.schema_param, "response_format.json_schema.schema"));
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"json_schema\":{\"enum\":[1,2]}}", &r, &e) == 0);
    CHECK(r.json_schema && !strcmp(r.json_schema, "{\"enum\":[1,2]}") && !strcmp(r.schema_param, "json_schema"));
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"grammar\":\"root ::= \\\"a\\\"\"}", &r, &e) == 0);
    CHECK(r.grammar && !strcmp(r.grammar, "root ::= \"a\"") && !r.json_schema);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"yaml\"}"), "response_format.type");
    expect_refusal(SRV_API_CHAT, CHAT(",\"response_format\":\"json\""), "response_format");
    expect_refusal(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"json_schema\"}"), "response_format.json_schema");
    expect_refusal(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}"),
                   "response_format.json_schema.name");
    expect_refusal(SRV_API_CHAT,
                   CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"x\":1}}"),
                   "response_format.json_schema");
    expect_refusal(SRV_API_CHAT, CHAT(",\"response_format\":{\"type\":\"json_object\"},\"json_schema\":{}"),
                   "json_schema");
    expect_refusal(SRV_API_CHAT, CHAT(",\"json_schema\":[1]"), "json_schema");
    expect_refusal(SRV_API_CHAT, CHAT(",\"grammar\":\"root ::= x\",\"json_schema\":{}"), "grammar");
    expect_refusal(SRV_API_CHAT, CHAT(",\"grammar\":5"), "grammar");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"grammar\":\"root ::= [a]\",\"use_beam_search\":true}",
                   "grammar");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"q\",\"json_schema\":{},\"penalty_alpha\":0.5,\"top_k\":2}",
                   "json_schema");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":\"required\",\"use_beam_search\":true"),
                   "tool_choice");
}

static void test_tools(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("get_weather") "," TOOL("f-2") "]"), &r, &e) == 0);
    CHECK(r.n_tools == 2 && r.tools_json && strstr(r.tools_json, "get_weather") && r.tool_choice == SRV_TOOLS_AUTO);
    CHECK(r.parallel_tool_calls);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":{\"type\":\"function\",\"function\":"
                                   "{\"name\":\"a\"}},\"parallel_tool_calls\":false"),
                &r, &e) == 0);
    CHECK(r.tool_choice == SRV_TOOLS_NAMED && !strcmp(r.tool_choice_name, "a") && !r.parallel_tool_calls);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":\"required\""), &r, &e) == 0);
    CHECK(r.tool_choice == SRV_TOOLS_REQUIRED);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, CHAT(",\"tools\":[]"), &r, &e) == 0);
    CHECK(r.n_tools == 0 && !r.tools_json);
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":{}"), "tools");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[{\"type\":\"retrieval\"}]"), "tools[0]");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]"),
                   "tools[0].function");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "," TOOL("a") "]"), "tools[1].function");
    expect_refusal(SRV_API_CHAT,
                   CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]"),
                   "tools[0].function");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"x\":1}}]"),
                   "tools[0].function");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tool_choice\":\"auto\""), "tool_choice");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":\"always\""), "tool_choice");
    expect_refusal(SRV_API_CHAT,
                   CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}"),
                   "tool_choice");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"tool_choice\":\"required\",\"grammar\":\"x\""),
                   "tool_choice");
    expect_refusal(SRV_API_CHAT, CHAT(",\"tools\":[" TOOL("a") "],\"parallel_tool_calls\":1"), "parallel_tool_calls");

    /* tool calls and results in the conversation; arguments parsed for the template */
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":"
        "\"{\\\"city\\\": \\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"-3 C\"}]}";
    CHECK(parse(SRV_API_CHAT, body, &r, &e) == 0);
    CHECK_MSG(r.messages_json &&
                  !strcmp(r.messages_json,
                          "[{\"role\":\"user\",\"content\":\"weather?\"},{\"role\":\"assistant\",\"content\":\"\","
                          "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"w\","
                          "\"arguments\":{\"city\":\"Oslo\"}}}]},{\"role\":\"tool\",\"content\":\"-3 C\","
                          "\"tool_call_id\":\"call_1\"}]"),
              "%s", r.messages_json ? r.messages_json : "(null)");
    srv_request_free(&r);
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"tool_calls\":[{}]}]}",
                   "messages[0].tool_calls");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
                   "messages[0].tool_calls[0].function");
    expect_refusal(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"tool_call_id\":\"c\"}]}",
                   "messages[0].tool_call_id");
}

/* nucleus_explain: true (the default top_n), {"top_n": N} within 1..200, false; anything else a
 * 400 naming it; not with beam or contrastive search. */
static void test_explain(void) {
    srv_request r;
    srv_error e;
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\"}", &r, &e) == 0 && r.explain_top_n == 0);
    srv_request_free(&r);
    CHECK(parse(SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"nucleus_explain\":true}", &r, &e) == 0);
    CHECK(r.explain_top_n == SRV_EXPLAIN_TOP_N);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":{\"top_n\":200},\"stream\":true}", &r, &e) == 0);
    CHECK(r.explain_top_n == 200);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":{}}", &r, &e) == 0);
    CHECK(r.explain_top_n == SRV_EXPLAIN_TOP_N);
    srv_request_free(&r);
    CHECK(parse(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":false}", &r, &e) == 0 && r.explain_top_n == 0);
    srv_request_free(&r);
    static const char *const top_n[] = {"0", "201", "-1", "2.5", "1e9", "\"5\"", "null", "true"};
    char body[160];
    for (size_t i = 0; i < sizeof top_n / sizeof *top_n; i++) {
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"nucleus_explain\":{\"top_n\":%s}}", top_n[i]);
        if (strcmp(top_n[i], "null")) expect_refusal(SRV_API_COMPLETIONS, body, "nucleus_explain.top_n");
    }
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":{\"top_n\":3,\"x\":1}}", "nucleus_explain");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":\"yes\"}", "nucleus_explain");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":1}", "nucleus_explain");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"nucleus_explain\":[20]}", "nucleus_explain");
    expect_refusal(SRV_API_COMPLETIONS,
                   "{\"prompt\":\"x\",\"use_beam_search\":true,\"best_of\":2,\"nucleus_explain\":true}", "nucleus_explain");
    expect_refusal(SRV_API_COMPLETIONS, "{\"prompt\":\"x\",\"penalty_alpha\":0.5,\"top_k\":2,\"nucleus_explain\":true}",
                   "nucleus_explain");
}

int main(void) {
    test_completion_defaults();
    test_completion_fields();
    test_prompt_forms();
    test_chat();
    test_invalid_values();
    test_beams();
    test_tokenize_bodies();
    test_escaped_nul();
    test_duplicate_keys();
    test_hosts();
    test_media_types();
    test_slot_bodies();
    test_embedding_bodies();
    test_request_ids();
    test_unknown_fields();
    test_compat_fields();
    test_reasoning_fields();
    test_llama_samplers();
    test_structured_output();
    test_tools();
    test_explain();
    return test_summary("test_server_request");
}
