/* JSON Schema -> GBNF: for each schema, JSON texts written by hand that are valid against it (by
 * the JSON Schema specification) must be sentences of the grammar, and invalid ones must not;
 * rule naming under a root name (two conversions concatenated), the whitespace bound, and
 * refusals naming the keyword and its JSON pointer; a compilation whose caller is gone ends. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "nucleus.h"
#include "test.h"

/* 1 when text is a complete sentence of gbnf, 0 when not, -1 when the grammar does not parse. */
static int accepts(const char *gbnf, const char *text) {
    nc_err err;
    gr_grammar *g;
    gr_matcher *m;
    if (gr_parse(&g, gbnf, strlen(gbnf), &err)) {
        CHECK_MSG(0, "the grammar does not parse: %s\n%s", err.msg, gbnf);
        return -1;
    }
    if (gr_matcher_new(&m, g, &err)) {
        gr_free(g);
        return -1;
    }
    int r = gr_matcher_feed(m, (const uint8_t *)text, strlen(text)) && gr_matcher_can_end(m);
    gr_matcher_free(m);
    gr_free(g);
    return r;
}

/* valid and invalid: NULL-terminated lists of instances. */
static void schema_case(const char *schema, const char *const *valid, const char *const *invalid) {
    char *gbnf;
    nc_err err;
    if (nc_json_schema_to_grammar(schema, NULL, &gbnf, &err)) {
        CHECK_MSG(0, "schema %s: %s", schema, err.msg);
        return;
    }
    for (int i = 0; valid[i]; i++) CHECK_MSG(accepts(gbnf, valid[i]) == 1, "schema %s should accept %s", schema, valid[i]);
    for (int i = 0; invalid && invalid[i]; i++)
        CHECK_MSG(accepts(gbnf, invalid[i]) == 0, "schema %s should refuse %s", schema, invalid[i]);
    free(gbnf);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_any(void) {
    schema_case("{}",
                L("{\"a\": [1, 2.5, -3e2, true, false, null, \"x\\\"y\\u00e9\\n\"]}", "\"str\"", "42", "-0.5", "null", "[]",
                  "{}", "\"\xe6\x97\xa5\xe6\x9c\xac\"", "[{\"k\": {}}, []]"),
                L("{a: 1}", "[1,]", "01", "\"raw\ncontrol\"", "{\"a\":1}}", "1.", ".5", "\"\\x\"", "\"\\u12\"", "tru",
                  "{\"a\" 1}", "'s'"));
    schema_case("true", L("1", "{\"a\": null}"), L("x"));
    schema_case("{\"type\": \"object\"}", L("{}", "{\"k\": {\"n\": [1]}}", "{\"a\": 1, \"a\": 2}"), L("[]", "\"s\"", "1"));
}

static void test_objects(void) {
    const char *s = "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}, "
                    "\"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}";
    schema_case(s, L("{\"b\": \"x\"}", "{\"a\": 1, \"b\": \"x\"}", "{\"a\":1,\"b\":\"x\",\"c\":true}", "{\"b\":\"x\",\"c\":false}"),
                L("{}", "{\"a\": 1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"d\":1}", "{\"a\":1.5,\"b\":\"x\"}",
                  "{\"b\":\"x\",}", "{,\"b\":\"x\"}", "{\"a\":1,,\"b\":\"x\"}"));
    schema_case("{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": true}",
                L("{\"a\":1,\"z\":[null]}", "{\"z\":2}", "{}", "{\"a\": 1}", "{\"aa\": \"s\"}", "{\"\": 0}"),
                L("{\"a\": \"s\"}", "[]", "{\"a\": 1, \"a\": \"s\"}"));
    /* additional keys are any but the listed ones, which keep their schemas (\u00e9 as a character) */
    schema_case("{\"properties\": {\"\u00e9t\u00e9\": {\"type\": \"null\"}, \"\u00e9\": {\"type\": \"null\"}}, "
                "\"additionalProperties\": {\"type\": \"boolean\"}}",
                L("{\"\xc3\xa9\": null, \"\xc3\xa9t\": true}", "{\"\xc3\xa9t\xc3\xa9x\": false}", "{\"x\": true}"),
                L("{\"\xc3\xa9\": true}", "{\"\xc3\xa9t\xc3\xa9\": false}", "{\"x\": null}"));
    schema_case("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}", L("{\"x\":1,\"y\":2}", "{}"),
                L("{\"x\":\"s\"}"));
    schema_case("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"null\"}}, \"additionalProperties\": false}",
                L("{}", "{\"a\": null}"), L("{\"b\": null}"));
    /* required names without a schema: present, any value */
    schema_case("{\"type\": \"object\", \"required\": [\"id\"], \"properties\": {}}", L("{\"id\": [1]}"), L("{}"));
    /* all optional: any subset in order */
    schema_case("{\"properties\": {\"x\": {\"const\": 1}, \"y\": {\"const\": 2}, \"z\": {\"const\": 3}}}",
                L("{}", "{\"y\": 2}", "{\"x\": 1, \"z\": 3}", "{\"x\":1,\"y\":2,\"z\":3}"), L("{\"z\": 3, \"x\": 1}"));
}

static void test_arrays_strings(void) {
    schema_case("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, \"maxItems\": 3}",
                L("[1,2]", "[1, 2, 3]", "[ -4 , 0 ]"), L("[1]", "[1,2,3,4]", "[]", "[1, \"2\"]"));
    schema_case("{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"number\"}], \"items\": false}",
                L("[\"a\", 1]", "[\"a\"]", "[]"), L("[\"a\",1,2]", "[1]"));
    schema_case("{\"prefixItems\": [{\"type\": \"boolean\"}], \"items\": {\"type\": \"null\"}, \"minItems\": 2}",
                L("[true, null]", "[false,null,null]"), L("[true]", "[null, null]"));
    schema_case("{\"type\": \"array\", \"maxItems\": 0}", L("[]"), L("[1]"));
    schema_case("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
                L("\"ab\"", "\"abc\"", "\"\xc3\xa9\xe6\x97\xa5\"", "\"\\n\\t\"", "\"\\u00e9x\""), L("\"a\"", "\"abcd\"", "\"\""));
}

static void test_enum_anyof_refs(void) {
    schema_case("{\"enum\": [\"a\", 1, null, {\"k\": [1]}]}", L("\"a\"", "1", "null", "{\"k\":[1]}"), L("\"b\"", "2", "{}"));
    schema_case("{\"const\": \"x\\\"y\", \"title\": \"t\", \"description\": \"d\", \"$comment\": \"c\", \"default\": 1, "
                "\"examples\": [1], \"$id\": \"i\", \"$schema\": \"s\"}",
                L("\"x\\\"y\""), L("\"x\""));
    schema_case("{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 2}]}", L("5", "\"ab\""),
                L("\"abc\"", "true"));
    schema_case("{\"oneOf\": [{\"type\": \"boolean\"}, {\"type\": \"null\"}]}", L("true", "null"), L("0"));
    schema_case("{\"type\": [\"integer\", \"null\"]}", L("3", "null"), L("\"3\"", "1.5"));
    const char *list = "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, \"next\": "
                       "{\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": [\"v\", \"next\"]}}, "
                       "\"$ref\": \"#/$defs/node\"}";
    schema_case(list, L("{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", "{\"v\": 1, \"next\": null}"),
                L("{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}"));
    schema_case("{\"definitions\": {\"a/b\": {\"type\": \"boolean\"}}, \"$ref\": \"#/definitions/a~1b\"}", L("true"), L("1"));
    schema_case("{\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}", L("[[],[[]]]", "[]"), L("[1]"));
    schema_case("{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}, "
                "{\"properties\": {\"b\": {\"type\": \"string\"}}, \"required\": [\"b\"]}]}",
                L("{\"a\":1,\"b\":\"x\"}"), L("{\"a\":1}", "{\"b\":\"x\"}"));
}

static void test_formats(void) {
    schema_case("{\"type\": \"string\", \"format\": \"date\"}", L("\"2024-02-28\"", "\"1999-12-31\"", "\"2024-04-30\""),
                L("\"2024-02-30\"", "\"2024-13-01\"", "\"2024-04-31\"", "\"24-01-01\"", "\"2024-00-10\""));
    schema_case("{\"type\": \"string\", \"format\": \"time\"}", L("\"12:34:56Z\"", "\"12:34:56.123+02:00\"", "\"00:00:00-11:30\""),
                L("\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:34:56\""));
    schema_case("{\"type\": \"string\", \"format\": \"date-time\"}", L("\"2024-01-31T23:59:59Z\""),
                L("\"2024-01-31 23:59:59Z\"", "\"2024-01-31\""));
    schema_case("{\"type\": \"string\", \"format\": \"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
                L("\"123e4567e89b\"", "\"123e4567-e89b-12d3-a456-42661417400g\""));
}

static void test_whitespace(void) {
    const char *s = "{\"type\": \"object\", \"properties\": {\"b\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}}}";
    schema_case(s, L("{ \"b\" : [ 1 , 2 ] }", "{\n  \"b\": [\n    1,\n    2\n  ]\n}", "{\"b\":[1,2]}", "{\n\t\"b\": []\n}"),
                L("{  \"b\": []}", "{\"b\": [1,  2]}", "{\n                 \"b\": []}", " {\"b\": []}", "{\"b\": []} ",
                  "{\n\n\"b\": []}"));
}

/* Every rule named root or root-..., so two conversions can share a grammar. */
static void test_naming(void) {
    char *a, *b;
    nc_err err;
    const char *sa = "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"format\": \"date\"}}, \"required\": [\"x\"]}";
    const char *sb = "{\"type\": \"array\", \"items\": {\"enum\": [1, 2]}}";
    CHECK(nc_json_schema_to_grammar(sa, "call-0-args", &a, &err) == 0);
    CHECK(nc_json_schema_to_grammar(sb, "call-1-args", &b, &err) == 0);
    if (!a || !b) return;
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        const char *root = k ? "call-1-args" : "call-0-args";
        for (const char *line = k ? b : a; *line; line = strchr(line, '\n') + 1) {
            size_t n = strcspn(line, " "), r = strlen(root);
            bool is_root = n == r && !strncmp(line, root, r);
            bool under_root = n > r && !strncmp(line, root, r) && line[r] == '-';
            if (!is_root && !under_root) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d rules not named after their root", bad);
    size_t n = strlen(a) + strlen(b) + 200;
    char *both = malloc(n);
    snprintf(both, n, "root ::= \"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \" (call-0-args | call-1-args) \"}\"\n%s%s", a, b);
    CHECK(accepts(both, "{\"name\": \"f\", \"arguments\": {\"x\": \"2020-01-01\"}}") == 1);
    CHECK(accepts(both, "{\"name\": \"f\", \"arguments\": [1, 2]}") == 1);
    CHECK(accepts(both, "{\"name\": \"f\", \"arguments\": [3]}") == 0);
    free(both), free(a), free(b);
    char *g;
    CHECK(nc_json_schema_to_grammar("{}", "a b", &g, &err) == -1 && strstr(err.msg, "root name 'a b'"));
}

static void check_refused(const char *schema, const char *want) {
    char *g = NULL;
    nc_err err = {{0}};
    int rc = nc_json_schema_to_grammar(schema, NULL, &g, &err);
    CHECK_MSG(rc == -1 && !g && strstr(err.msg, want), "schema %s: got '%s', want '%s'", schema, rc ? err.msg : "success", want);
    free(g);
}

static void test_refusals(void) {
    check_refused("{\"properties\": {\"x\": {\"type\": \"string\", \"contentEncoding\": \"a\"}}}",
                  "unsupported keyword 'contentEncoding' at /properties/x/contentEncoding");
    check_refused("{\"items\": {\"multipleOf\": 1}}", "unsupported keyword 'multipleOf' at /items/multipleOf");
    check_refused("{\"anyOf\": [{}, {\"not\": {}}]}", "unsupported keyword 'not' at /anyOf/1/not");
    check_refused("{\"$defs\": {\"a\": {\"uniqueItems\": true}}, \"$ref\": \"#/$defs/a\"}", "unsupported keyword 'uniqueItems' at /$defs/a/uniqueItems");
    check_refused("{\"type\":", "not valid JSON");
    check_refused("{\"type\": \"strin\"}", "unknown type 'strin' at / (the root)");
    check_refused("{\"enum\": []}", "'enum' must be a non-empty array");
    check_refused("{\"$ref\": \"http://example.com/s\"}", "$ref 'http://example.com/s' is not supported");
    check_refused("{\"$ref\": \"#/$defs/none\"}", "points to nothing");
    check_refused("{\"type\": \"string\", \"format\": \"idn-email\"}", "format idn-email is not supported");
    check_refused("{\"type\": \"string\", \"maxLength\": 100000}", "'maxLength' 100000 is above the supported 4096");
    check_refused("{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "maxItems is below minItems");
    check_refused("{\"type\": \"string\", \"minLength\": -1}", "'minLength' must be a non-negative integer");
    check_refused("{\"enum\": [1], \"minLength\": 2}", "'minLength' beside 'enum' is not supported");
    check_refused("false", "the schema false allows nothing");
    check_refused("{\"properties\": {\"\xff\": {}}}", "invalid UTF-8 at byte 17"); /* found by fuzz_json_schema */
    check_refused("{\"allOf\": [{\"type\": \"string\"}]}", "allOf: only object schemas");
    /* a schema that reaches itself before any value (found by fuzz_json_schema) */
    check_refused("{\"$ref\": \"#\"}", "refers to itself before any value");
    check_refused("{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}", "refers to itself before any value");
    check_refused("{\"anyOf\": [{\"type\": \"null\"}, {\"$ref\": \"#\"}]}", "refers to itself before any value");
    /* nesting past the limit */
    char deep[2000] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"items\": ");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    check_refused(deep, "schemas nested deeper than 64");
}

/* A schema of n members: {"type": "object", "KEY": {...n names...}} (a properties object or a
 * required array), malloc'd. */
static char *many_names(const char *key, int n, bool with_required) {
    size_t cap = (size_t)n * 48 + 128, k = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    k += (size_t)snprintf(s, cap, "{\"type\": \"object\", \"%s\": %s", key, strcmp(key, "required") ? "{" : "[");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, strcmp(key, "required") ? "%s\"p%d\": {\"type\": \"string\"}" : "%s\"p%d\"",
                              i ? ", " : "", i);
    k += (size_t)snprintf(s + k, cap - k, "%s", strcmp(key, "required") ? "}" : "]");
    if (with_required) {
        k += (size_t)snprintf(s + k, cap - k, ", \"required\": [");
        for (int i = 0; i < n; i++) k += (size_t)snprintf(s + k, cap - k, "%s\"p%d\"", i ? ", " : "", i);
        k += (size_t)snprintf(s + k, cap - k, "]");
    }
    snprintf(s + k, cap - k, "}");
    return s;
}

/* check_refused for a schema too long to print: what names it instead. */
static void big_refused(const char *what, const char *schema, const char *want) {
    char *g = NULL;
    nc_err err = {{0}};
    int rc = nc_json_schema_to_grammar(schema, NULL, &g, &err);
    CHECK_MSG(rc == -1 && !g && strstr(err.msg, want), "%s: got '%s', want '%s'", what, rc ? err.msg : "success", want);
    free(g);
}

/* What a schema from a request may cost: its members counted before any work, rules bounded,
 * each limit named (a 100,000-property schema took a minute, then said "out of memory"). */
static void test_budgets(void) {
    char *s = many_names("properties", 100000, true);
    big_refused("100000 properties", s, "'properties' lists 100000 names, more than the supported 4096 at / (the root)");
    free(s);
    s = many_names("required", 100000, false);
    big_refused("100000 required names", s, "'required' lists 100000 names, more than the supported 4096");
    free(s);
    /* the largest allowed, every property required: each looked up once */
    s = many_names("properties", 4096, true);
    char *g = NULL;
    nc_err err;
    CHECK_MSG(nc_json_schema_to_grammar(s, NULL, &g, &err) == 0, "4096 required properties: %s", err.msg);
    free(g), free(s);
    /* past the rule limit: the limit named, not "out of memory" */
    size_t cap = 25000 * 4 + 64, k = 0;
    s = malloc(cap);
    k += (size_t)snprintf(s, cap, "{\"anyOf\": [");
    for (int i = 0; i < 25000; i++) k += (size_t)snprintf(s + k, cap - k, "%s{}", i ? "," : "");
    snprintf(s + k, cap - k, "]}");
    big_refused("anyOf of 25000", s, "the schema needs more than 20000 grammar rules (the limit)");
    free(s);
    check_refused("{\"properties\": {\"a\": {}, \"a\": {}}}", "'properties' names 'a' twice at / (the root)");
    /* a required name given twice is one key */
    schema_case("{\"required\": [\"x\", \"x\"]}", L("{\"x\": 1}", "{\"x\": 1, \"y\": 2}"), L("{\"x\": 1, \"x\": 2}", "{}"));
    /* allOf: a later schema's property replaces an earlier one's and goes last */
    schema_case("{\"allOf\": [{\"properties\": {\"a\": {\"type\": \"string\"}, \"b\": {\"type\": \"null\"}}}, "
                "{\"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\", \"b\"]}]}",
                L("{\"b\": null, \"a\": 1}"), L("{\"a\": 1, \"b\": null}", "{\"b\": null, \"a\": \"s\"}"));
    /* many $refs to many definitions */
    cap = 3000 * 80 + 64, k = 0;
    s = malloc(cap);
    k += (size_t)snprintf(s, cap, "{\"$defs\": {");
    for (int i = 0; i < 3000; i++) k += (size_t)snprintf(s + k, cap - k, "%s\"d%d\": {\"type\": \"integer\"}", i ? "," : "", i);
    k += (size_t)snprintf(s + k, cap - k, "}, \"anyOf\": [");
    for (int i = 0; i < 3000; i++) k += (size_t)snprintf(s + k, cap - k, "%s{\"$ref\": \"#/$defs/d%d\"}", i ? "," : "", 2999 - i);
    snprintf(s + k, cap - k, "]}");
    CHECK_MSG(nc_json_schema_to_grammar(s, NULL, &g, &err) == 0, "3000 $refs: %s", err.msg);
    free(g), free(s);
}

static int asked;
static bool always_gone(void *user) { asked++; return *(bool *)user; }

/* A compilation whose caller is gone (its client left, its deadline passed, the server stops) ends
 * at its first question with NC_POLL_ABANDONED; one whose caller stays makes the same grammar. */
static void test_watched(void) {
    char *s = many_names("properties", 4096, true), *g = NULL, *plain = NULL;
    nc_err err;
    bool gone = true;
    asked = 0;
    CHECK(nc_json_schema_to_grammar_watched(s, NULL, always_gone, &gone, &g, &err) == -1 && !g);
    CHECK_MSG(!strcmp(err.msg, NC_POLL_ABANDONED) && asked == 1, "abandoned: '%s', asked %d times", err.msg, asked);
    gone = false;
    CHECK(nc_json_schema_to_grammar_watched(s, NULL, always_gone, &gone, &g, &err) == 0);
    CHECK(nc_json_schema_to_grammar(s, NULL, &plain, &err) == 0);
    CHECK(g && plain && !strcmp(g, plain));
    gr_grammar *gr = NULL;
    nc_poll poll = {.gone = always_gone, .user = &gone};
    gone = true;
    CHECK(gr_parse_watched(&gr, plain, strlen(plain), &poll, &err) == -1 && !gr);
    CHECK_MSG(!strcmp(err.msg, NC_POLL_ABANDONED), "the parse abandoned: '%s'", err.msg);
    free(g), free(plain), free(s);
}

int main(void) {
    test_any();
    test_objects();
    test_arrays_strings();
    test_enum_anyof_refs();
    test_formats();
    test_whitespace();
    test_naming();
    test_refusals();
    test_budgets();
    test_watched();
    return test_summary("test_json_schema");
}
