/* Chat templates: an interpreter for the Jinja2 subset that Hugging Face chat templates use
 * (`tokenizer.chat_template`). It follows transformers' environment: Python Jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, the loopcontrols
 * extension ({% break %}, {% continue %}), {% generation %} blocks, autoescape off, the default
 * (lenient) Undefined, and the globals raise_exception() and strftime_now(); `tojson` is Python's
 * json.dumps with ensure_ascii=False.
 *
 * Parse once, render many times; a parsed template is read-only, so several threads may render
 * it at once. A render never crashes or hangs on a hostile template: output size, live memory,
 * evaluation steps and nesting depth are bounded, and going past a bound is an ordinary error.
 * Every error message names the template position as "template:LINE:COL: what went wrong". */
#ifndef NC_TEMPLATE_H
#define NC_TEMPLATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "nucleus.h" /* nc_err */

typedef struct tmpl tmpl;             /* a parsed template */
typedef struct tmpl_value tmpl_value; /* a value of the template language */

int tmpl_parse(tmpl **out, const char *src, size_t len, nc_err *err);
void tmpl_free(tmpl *t);

/* ---- Context values, built by the caller and read (never changed) by renders -------------
 * A tree made with these functions belongs to the caller until it is handed to a container
 * (tmpl_value_dict_set, tmpl_value_list_append), which then owns it; free the root with
 * tmpl_value_free. One tree may be read by several renders at once. */
tmpl_value *tmpl_value_from_json(const char *json, size_t len, nc_err *err);
tmpl_value *tmpl_value_from_cjson(const cJSON *json, nc_err *err);
tmpl_value *tmpl_value_new_dict(void);
tmpl_value *tmpl_value_new_list(void);
tmpl_value *tmpl_value_new_string(const char *s, size_t len);
tmpl_value *tmpl_value_new_bool(bool b);
tmpl_value *tmpl_value_new_int(int64_t i);
tmpl_value *tmpl_value_new_none(void);
/* Both take ownership of v (also on failure) and return 0, or -1 when out of memory. */
int tmpl_value_dict_set(tmpl_value *dict, const char *key, tmpl_value *v);
int tmpl_value_list_append(tmpl_value *list, tmpl_value *v);
void tmpl_value_free(tmpl_value *v);

/* ---- Rendering ------------------------------------------------------------------------- */
typedef struct tmpl_limits {
    size_t max_output;   /* bytes of rendered text */
    size_t max_memory;   /* bytes held at once by values a render makes */
    uint64_t max_steps;  /* work: expressions, loop iterations, elements compared or copied,
                          * bytes built or scanned / 16 */
    int max_depth;       /* nesting of evaluation: macro calls, nested expressions */
    double max_seconds;  /* wall-clock time of one render; 0: no time limit */
    /* When not NULL, the render fails soon after *cancel becomes true (set from another thread,
     * e.g. by a server that shuts down). */
    const atomic_bool *cancel;
    /* When not NULL, asked on the rendering thread every TMPL_GONE_EVERY seconds of the render
     * (the first time once that much has passed): when it returns true the render fails with
     * "the render was abandoned" (a server asks whether the request's client has left). */
    bool (*gone)(void *user);
    void *gone_user;
} tmpl_limits;
#define TMPL_GONE_EVERY 0.01
/* 16 MiB of output, 256 MiB of values, 20 million steps (about a second), depth 400, 10 s, no
 * cancel flag, no gone. */
void tmpl_limits_default(tmpl_limits *lim);

/* Memory held by all the renders of the process at once is bounded too (512 MiB unless set):
 * a render that would take the total past it fails as if it had reached its own max_memory. */
void tmpl_set_global_memory_limit(size_t bytes);
size_t tmpl_global_memory_in_use(void); /* bytes held by the renders running now */

/* Render with the variables of `context` (a dict from the functions above). On success *out
 * is a NUL-terminated malloc'd string (free it) of *out_len bytes. */
int tmpl_render(const tmpl *t, const tmpl_value *context, char **out, size_t *out_len, nc_err *err);
int tmpl_render_limits(const tmpl *t, const tmpl_value *context, const tmpl_limits *lim, char **out,
                       size_t *out_len, nc_err *err);

/* Render a chat the way transformers' apply_chat_template does: the variables are `messages`
 * (a JSON array of {role, content, ...}), `add_generation_prompt`, `bos_token` and `eos_token`
 * (left undefined when NULL), `tools` and `documents` (none unless given), plus every member of
 * the JSON object extra_json (tools, enable_thinking, ...; may be NULL). */
int tmpl_render_chat(const tmpl *t, const char *messages_json, bool add_generation_prompt,
                     const char *bos_token, const char *eos_token, const char *extra_json, char **out,
                     size_t *out_len, nc_err *err);
/* The same under the given limits (NULL: the defaults). */
int tmpl_render_chat_limits(const tmpl *t, const char *messages_json, bool add_generation_prompt,
                            const char *bos_token, const char *eos_token, const char *extra_json,
                            const tmpl_limits *lim, char **out, size_t *out_len, nc_err *err);

/* The ChatML template, used when a model ships no template of its own. */
const char *tmpl_chatml_source(void);

#endif
