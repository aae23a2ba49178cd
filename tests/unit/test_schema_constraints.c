/* JSON Schema's value constraints as grammars: integer and number bounds, patterns (ECMAScript
 * regular expressions), formats and property counts. For each schema, JSON texts valid against
 * it (by the specification; for formats, by ajv-formats' definitions) must be sentences of the
 * grammar when they are of the kind the grammar writes, and invalid ones must never be; what is
 * not supported is refused by name. The schemas are as pydantic and zod write them. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "nucleus.h"
#include "test.h"

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

static void schema_case(const char *schema, const char *const *valid, const char *const *invalid) {
    char *gbnf;
    nc_err err;
    if (nc_json_schema_to_grammar(schema, NULL, &gbnf, &err)) {
        CHECK_MSG(0, "schema %s: %s", schema, err.msg);
        return;
    }
    for (int i = 0; valid && valid[i]; i++)
        CHECK_MSG(accepts(gbnf, valid[i]) == 1, "schema %s should accept %s", schema, valid[i]);
    for (int i = 0; invalid && invalid[i]; i++)
        CHECK_MSG(accepts(gbnf, invalid[i]) == 0, "schema %s should refuse %s", schema, invalid[i]);
    free(gbnf);
}

static void check_refused(const char *schema, const char *want) {
    char *g = NULL;
    nc_err err = {{0}};
    int rc = nc_json_schema_to_grammar(schema, NULL, &g, &err);
    CHECK_MSG(rc == -1 && !g && strstr(err.msg, want), "schema %s: got '%s', want '%s'", schema, rc ? err.msg : "success", want);
    free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Every integer of [lo, hi] and none just outside, for a range of bounds. */
static void integer_sweep(long lo, long hi, const char *schema) {
    char *gbnf;
    nc_err err;
    if (nc_json_schema_to_grammar(schema, NULL, &gbnf, &err)) {
        CHECK_MSG(0, "schema %s: %s", schema, err.msg);
        return;
    }
    int bad = 0;
    for (long v = lo - 30; v <= hi + 30; v++) {
        char t[32];
        snprintf(t, sizeof t, "%ld", v);
        if (accepts(gbnf, t) != (v >= lo && v <= hi)) bad++, fprintf(stderr, "%s: %ld\n", schema, v);
    }
    CHECK_MSG(bad == 0, "%s: %d integers misjudged", schema, bad);
    free(gbnf);
}

static void test_integer_bounds(void) {
    integer_sweep(0, 120, "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}");      /* pydantic ge=0, le=120 */
    integer_sweep(1, 99, "{\"type\": \"integer\", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 100}"); /* gt, lt */
    integer_sweep(-57, 1234, "{\"type\": \"integer\", \"minimum\": -57, \"maximum\": 1234}");
    integer_sweep(-300, -17, "{\"type\": \"integer\", \"minimum\": -300, \"maximum\": -17}");
    integer_sweep(5, 5, "{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 5}");
    integer_sweep(2, 7, "{\"type\": \"integer\", \"minimum\": 1.5, \"maximum\": 7.9}");
    integer_sweep(199, 20001, "{\"type\": \"integer\", \"minimum\": 199, \"maximum\": 20001}");
    /* one side: zod's .int().positive(), .nonnegative(); no leading zeros, no "-0" */
    schema_case("{\"type\": \"integer\", \"exclusiveMinimum\": 0}", L("1", "9", "10", "123456789", "999999999999999"),
                L("0", "-1", "01", "1.5", "-0", "1e3"));
    schema_case("{\"type\": \"integer\", \"minimum\": 0}", L("0", "7", "100"), L("-1", "00", "-0"));
    schema_case("{\"type\": \"integer\", \"maximum\": -2}", L("-2", "-3", "-1000"), L("-1", "0", "5", "-02"));
    schema_case("{\"type\": [\"integer\", \"null\"], \"minimum\": 3}", L("3", "null", "4"), L("2", "0"));
    /* the tighter of two bounds on one side */
    integer_sweep(4, 10, "{\"type\": \"integer\", \"minimum\": 2, \"exclusiveMinimum\": 3, \"maximum\": 10}");
    check_refused("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer is within the bounds");
    check_refused("{\"type\": \"integer\", \"minimum\": 1.2, \"maximum\": 1.8}", "no integer is within the bounds");
    check_refused("{\"type\": \"integer\", \"minimum\": \"3\"}", "'minimum' must be a number");
    check_refused("{\"type\": \"integer\", \"minimum\": 0, \"exclusiveMinimum\": true}", "draft 4's boolean form");
}

static void test_number_bounds(void) {
    /* pydantic's confloat(ge=0, le=1), zod's .min(0).max(1) */
    schema_case("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}", L("0", "1", "0.5", "0.25", "0.001"),
                L("-0.5", "1.5", "2", "-1", "1.0001", "0.50", "1e-3", "01"));
    /* gt=0: positive numbers, fractions of 0 included */
    schema_case("{\"type\": \"number\", \"exclusiveMinimum\": 0}", L("1", "0.5", "12.75", "3"), L("0", "-0.5", "-3"));
    schema_case("{\"type\": \"number\", \"minimum\": -2.5, \"exclusiveMaximum\": 3}",
                L("-2", "-1.5", "0", "2.9", "2", "-0.5"), L("3", "3.5", "-3", "-2.75", "2.999e1"));
    schema_case("{\"type\": \"number\", \"maximum\": 0}", L("0", "-1", "-0.5", "-1000.125"), L("0.5", "1"));
    schema_case("{\"type\": \"number\", \"minimum\": 10.5, \"maximum\": 12}", L("11", "12", "11.5"), L("10", "10.7", "12.1", "13"));
    check_refused("{\"type\": \"number\", \"minimum\": 0.2, \"maximum\": 0.8}", "no number is within the bounds");
    /* bounds imply a number */
    schema_case("{\"minimum\": 0, \"maximum\": 5}", L("3", "4.5"), L("\"3\"", "-1"));
}

static void test_patterns(void) {
    /* pydantic constr(pattern=...) and zod .regex(): anchored or not, the whole string matches */
    schema_case("{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}-\\\\d{3,4}$\"}", L("\"NO-123\"", "\"AB-9999\""),
                L("\"no-123\"", "\"NO-12\"", "\"NO-12345\"", "\"NO123\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^(cat|dog)s?$\"}", L("\"cat\"", "\"dogs\""), L("\"cow\"", "\"catss\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"\\\\w+@\\\\w+\\\\.com\"}", L("\"a_1@b.com\""), L("\"a@b.org\"", "\"@b.com\""));
    schema_case("{\"pattern\": \"^a.c$\"}", L("\"abc\"", "\"a-c\""), L("\"ac\"", "\"a\\nc\"", "\"a\\\"c\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^[^0-9]+$\"}", L("\"abc\"", "\"a b\""), L("\"a1\"", "\"\\\\\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^(?:\\\\+47)? ?[0-9]{8}$\"}", L("\"+47 12345678\"", "\"12345678\""),
                L("\"+4712345\"", "\"1234567\""));
    /* characters JSON escapes, written as JSON writes them */
    schema_case("{\"type\": \"string\", \"pattern\": \"^a\\\\\\\\b\\\"c\\\\td$\"}", L("\"a\\\\b\\\"c\\td\""), L("\"a\\\\b\\\"c d\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^\\\\u00e9+[\\\\u0100-\\\\u0101]$\"}", L("\"\xc3\xa9\xc3\xa9\xc4\x80\""),
                L("\"e\xc4\x80\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^x{2}y{1,}z{0,2}$\"}", L("\"xxy\"", "\"xxyyyzz\""), L("\"xy\"", "\"xxyzzz\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^\\\\D\\\\S\\\\W$\"}", L("\"ab!\""), L("\"1b!\"", "\"a b!\"", "\"abc\""));
    schema_case("{\"type\": \"string\", \"pattern\": \"^(?<year>\\\\d{4})-[01]\\\\d$\"}", L("\"2024-07\""), L("\"2024-27\""));
    /* not supported: refused, named */
    check_refused("{\"type\": \"string\", \"pattern\": \"^(?!\\\\.)[a-z.]+$\"}", "lookahead");
    check_refused("{\"type\": \"string\", \"pattern\": \"(?<=a)b\"}", "lookbehind");
    check_refused("{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "backreferences");
    check_refused("{\"type\": \"string\", \"pattern\": \"\\\\bword\"}", "word boundaries");
    check_refused("{\"type\": \"string\", \"pattern\": \"\\\\p{L}+\"}", "Unicode property escapes");
    check_refused("{\"type\": \"string\", \"pattern\": \"a^b\"}", "'^' is supported only at the start");
    check_refused("{\"type\": \"string\", \"pattern\": \"a{2000}\"}", "counts above 1000");
    check_refused("{\"type\": \"string\", \"pattern\": \"(ab\"}", "a group without its ')'");
    check_refused("{\"type\": \"string\", \"pattern\": \"[ab\"}", "a class without its ']'");
    check_refused("{\"type\": \"string\", \"pattern\": \"*a\"}", "'*' repeats nothing");
    check_refused("{\"type\": \"string\", \"pattern\": \"^a$\", \"maxLength\": 3}", "beside 'pattern'");
    check_refused("{\"type\": \"string\", \"pattern\": \"^a$\", \"format\": \"email\"}", "'pattern' beside 'format'");
}

static void test_formats(void) {
    /* pydantic's EmailStr, zod's .email() */
    schema_case("{\"type\": \"string\", \"format\": \"email\"}", L("\"ada@example.com\"", "\"a.b+c_d@mail.example.org\""),
                L("\"ada\"", "\"@example.com\"", "\"ada@example\"", "\".a@b.com\"", "\"a..b@c.com\"", "\"a@b.c0\""));
    /* zod's .url(); pydantic's HttpUrl adds minLength 1 and maxLength 2083 */
    schema_case("{\"type\": \"string\", \"format\": \"uri\"}", L("\"https://example.com\"", "\"http://a.b/c/d-e_f\""),
                L("\"example.com\"", "\"https:/x\"", "\"ftp//x\""));
    schema_case("{\"type\": \"string\", \"format\": \"uri\", \"minLength\": 1, \"maxLength\": 2083}", L("\"https://x.org/\""), NULL);
    schema_case("{\"type\": \"string\", \"format\": \"hostname\"}", L("\"localhost\"", "\"api.example.com\""),
                L("\"-a.com\"", "\"a_b.com\"", "\"a..b\""));
    schema_case("{\"type\": \"string\", \"format\": \"ipv4\"}", L("\"192.168.0.1\"", "\"0.0.0.0\"", "\"255.255.255.255\""),
                L("\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""));
    schema_case("{\"type\": \"string\", \"format\": \"ipv6\"}", L("\"2001:db8:0:0:0:0:2:1\"", "\"fe80:0:0:0:202:b3ff:fe1e:8329\""),
                L("\"2001:db8::2:1:2:3:4:5:6\"", "\"1.2.3.4\""));
    schema_case("{\"type\": \"string\", \"format\": \"date-time\"}", L("\"2024-02-28T12:30:00Z\"", "\"2024-12-31T23:59:59.5+02:00\""),
                L("\"2024-02-30T12:30:00Z\"", "\"2024-02-28 12:30:00Z\""));
    check_refused("{\"type\": \"string\", \"format\": \"email\", \"maxLength\": 20}", "must allow 6 to 142 characters");
    check_refused("{\"type\": \"string\", \"format\": \"uuid\", \"minLength\": 40}", "must allow 36 to 36 characters");
    check_refused("{\"type\": \"string\", \"format\": \"regex\"}", "format regex is not supported");
}

static void test_property_counts(void) {
    const char *abc = "\"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}, \"c\": {\"type\": \"integer\"}}";
    char s[512];
    snprintf(s, sizeof s, "{\"type\": \"object\", %s, \"minProperties\": 2}", abc);
    schema_case(s, L("{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"c\": 3}", "{\"b\": 2, \"c\": 3}", "{\"a\": 1, \"b\": 2, \"c\": 3}"),
                L("{}", "{\"a\": 1}", "{\"c\": 3}"));
    snprintf(s, sizeof s, "{\"type\": \"object\", %s, \"maxProperties\": 1}", abc);
    schema_case(s, L("{}", "{\"a\": 1}", "{\"b\": 2}"), L("{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": 2, \"c\": 3}"));
    snprintf(s, sizeof s, "{\"type\": \"object\", %s, \"required\": [\"b\"], \"minProperties\": 2, \"maxProperties\": 2}", abc);
    schema_case(s, L("{\"a\": 1, \"b\": 2}", "{\"b\": 2, \"c\": 3}"), L("{\"b\": 2}", "{\"a\": 1, \"c\": 3}", "{\"a\": 1, \"b\": 2, \"c\": 3}"));
    /* additional keys count too */
    schema_case("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}, \"minProperties\": 1, \"maxProperties\": 2}",
                L("{\"x\": 1}", "{\"x\": 1, \"y\": 2}"), L("{}", "{\"x\": 1, \"y\": 2, \"z\": 3}"));
    schema_case("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": true, "
                "\"minProperties\": 2}",
                L("{\"a\": 1, \"k\": null}", "{\"k\": 1, \"j\": 2}", "{\"a\": 1, \"k\": 2, \"j\": 3}"), L("{\"a\": 1}", "{}"));
    schema_case("{\"minProperties\": 1}", L("{\"k\": 1}"), L("{}"));
    snprintf(s, sizeof s, "{\"type\": \"object\", %s, \"minProperties\": 4}", abc);
    check_refused(s, "no object of these properties");
    snprintf(s, sizeof s, "{\"type\": \"object\", %s, \"required\": [\"a\", \"b\"], \"maxProperties\": 1}", abc);
    check_refused(s, "no object of these properties");
}

/* const and enum of any JSON value, as pydantic writes Literal and Enum. */
static void test_const_enum(void) {
    schema_case("{\"const\": {\"a\": [1, \"x\", null]}}", L("{\"a\":[1,\"x\",null]}"), L("{\"a\": [1]}", "{}"));
    schema_case("{\"enum\": [\"red\", 2, true, null, [1], {\"k\": \"v\"}, \"with \\\"quote\\\"\"]}",
                L("\"red\"", "2", "true", "null", "[1]", "{\"k\":\"v\"}", "\"with \\\"quote\\\"\""), L("\"blue\"", "3", "false"));
    schema_case("{\"title\": \"Color\", \"type\": \"string\", \"enum\": [\"red\", \"green\"], \"description\": \"d\"}",
                L("\"red\"", "\"green\""), L("\"blue\""));
    /* oneOf as anyOf (as llama.cpp) */
    schema_case("{\"oneOf\": [{\"type\": \"integer\", \"minimum\": 10}, {\"type\": \"string\", \"format\": \"email\"}]}",
                L("12", "\"a@b.co\""), L("9", "\"a\""));
}

int main(void) {
    test_integer_bounds();
    test_number_bounds();
    test_patterns();
    test_formats();
    test_property_counts();
    test_const_enum();
    return test_summary("test_schema_constraints");
}
