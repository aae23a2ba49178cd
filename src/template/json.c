/* JSON text or cJSON trees → caller-owned template values. */
#include <math.h>
#include <string.h>

#include "template/internal.h"

#define JSON_MAX_DEPTH 200

/* cJSON keeps numbers as doubles: integral values within the exactly representable range become
 * ints (json.loads would make "1.0" a float; cJSON cannot tell the two apart). */
static tmpl_value *number_value(const cJSON *j) {
    double d = j->valuedouble;
    if (d == floor(d) && fabs(d) <= 9007199254740992.0 && !(d == 0 && signbit(d)))
        return tv_int(NULL, (int64_t)d);
    return tv_float(NULL, d);
}

static tmpl_value *convert(const cJSON *j, int depth, nc_err *err);

static tmpl_value *convert_array(const cJSON *j, int depth, nc_err *err) {
    tmpl_value *list = tv_list(NULL, 0);
    if (!list) return NULL;
    for (const cJSON *c = j->child; c; c = c->next) {
        tmpl_value *item = convert(c, depth + 1, err);
        if (!item || tv_list_push(NULL, list, item)) {
            tv_free_caller(list);
            return NULL;
        }
    }
    return list;
}

static tmpl_value *convert_object(const cJSON *j, int depth, nc_err *err) {
    tmpl_value *dict = tv_dict_new(NULL);
    if (!dict) return NULL;
    for (const cJSON *c = j->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        tmpl_value *key = tv_str(NULL, name, strlen(name));
        tmpl_value *val = key ? convert(c, depth + 1, err) : NULL;
        if (!val) {
            tv_free_caller(key);
            tv_free_caller(dict);
            return NULL;
        }
        if (tv_dict_set(NULL, dict, key, val)) {
            tv_free_caller(dict);
            return NULL;
        }
    }
    return dict;
}

static tmpl_value *convert(const cJSON *j, int depth, nc_err *err) {
    if (depth > JSON_MAX_DEPTH) {
        nc_fail(err, "JSON nested deeper than %d levels", JSON_MAX_DEPTH);
        return NULL;
    }
    tmpl_value *v = NULL;
    if (cJSON_IsNull(j)) v = tv_new(NULL, TV_NONE);
    else if (cJSON_IsBool(j)) v = tmpl_value_new_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) v = number_value(j);
    else if (cJSON_IsString(j)) v = tv_str(NULL, j->valuestring, strlen(j->valuestring));
    else if (cJSON_IsArray(j)) return convert_array(j, depth, err);
    else if (cJSON_IsObject(j)) return convert_object(j, depth, err);
    else {
        nc_fail(err, "unsupported JSON value");
        return NULL;
    }
    if (!v) nc_fail(err, "out of memory");
    return v;
}

tmpl_value *tmpl_value_from_cjson(const cJSON *json, nc_err *err) {
    if (!json) {
        nc_fail(err, "no JSON value");
        return NULL;
    }
    if (err) err->msg[0] = 0;
    tmpl_value *v = convert(json, 0, err);
    if (!v && err && !err->msg[0]) nc_fail(err, "out of memory");
    return v;
}

tmpl_value *tmpl_value_from_json(const char *json, size_t len, nc_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    size_t at = end && end >= json ? (size_t)(end - json) : 0;
    while (root && at < len && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) at++;
    if (!root || at != len) {
        cJSON_Delete(root);
        nc_fail(err, "invalid JSON at byte %zu", at);
        return NULL;
    }
    tmpl_value *v = tmpl_value_from_cjson(root, err);
    cJSON_Delete(root);
    return v;
}
