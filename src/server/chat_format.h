/* The chat formats of today's models, as data: how a family's replies mark their reasoning, and
 * how they write tool calls. Both are chosen from the chat template's own text (the markers it
 * renders earlier turns with), never from the model's name, so a fine-tune that keeps its
 * family's template gets its family's format.
 *
 * The markers are the templates' (llama.cpp's models/templates set and the families' model
 * cards); whitespace in a marker is where the template writes some, and a reply's whitespace
 * there may differ (none, or another run of blanks). */
#ifndef NC_SERVER_CHAT_FORMAT_H
#define NC_SERVER_CHAT_FORMAT_H

#include <stdbool.h>

/* How a family separates its reasoning from its answer. */
typedef struct srv_reasoning_style {
    const char *name;
    const char *open, *close;  /* the reasoning is between them: "<think>" ... "</think>" */
    const char *message_key;   /* the assistant message field a template renders earlier
                                  reasoning from ("reasoning_content"; gpt-oss: "thinking") */
    bool harmony;              /* gpt-oss's channels: analysis is reasoning, final the answer */
} srv_reasoning_style;

/* How calls are written. */
typedef enum srv_call_kind {
    SRV_CALLS_JSON_TAGGED,  /* call_open {"name", "arguments"} call_close, one block per call */
    SRV_CALLS_JSON_LIST,    /* section_open [{"name", "arguments"}, ...] section_close */
    SRV_CALLS_JSON_BARE,    /* the reply is {"name", "parameters"} (Llama 3.x) */
    SRV_CALLS_NAMED,        /* section_open? (call_open NAME name_end ARGUMENTS call_close)+
                               section_close?, the arguments one JSON object or parameters */
    SRV_CALLS_HARMONY,      /* gpt-oss: a commentary message to=functions.NAME */
    SRV_CALLS_PYTHONIC,     /* section_open [NAME(KEY=VALUE, ...), ...] section_close, the values
                               Python literals (LFM2) */
} srv_call_kind;

typedef struct srv_call_syntax {
    const char *name;
    srv_call_kind kind;
    const char *section_open, *section_close;  /* around all the calls; NULL: none */
    const char *call_open, *name_end, *call_close;  /* around one call (NAMED, JSON_TAGGED) */
    const char *name_key, *args_key;  /* the JSON objects' members ("name", "arguments"); a NULL
                                         name_key: {"NAME": arguments} (Apertus) */
    const char *param_open, *param_name_end, *param_close;  /* NAMED with parameters one by one
                                         (param_open KEY param_name_end VALUE param_close); NULL:
                                         the arguments are one JSON object */
    const char *text_recipient;       /* the template's generation prompt ends with call_open
                                         (Functionary v3.2's ">>>"): the reply opens with a
                                         recipient, this one ("all", then a newline) before text,
                                         else a call's name; NULL: the reply opens freely */
    bool args_text;                   /* calls go back to the template with their arguments as
                                         JSON text (it joins them to strings), not a mapping */
    bool one_call;                    /* the format holds one call per reply */
    bool short_ids;                   /* call ids of 9 letters and digits (Mistral's templates
                                         refuse others) */
} srv_call_syntax;

/* A '*' in a marker stands for text the model chooses (an index, a call id): any run of
 * letters, digits and "_.:-". */
#define SRV_MARKER_ANY '*'

/* What a template does: its reasoning style (NULL: none), its call syntax, and whether it renders
 * the `tools` variable itself (else nucleus describes the tools in the Hermes syntax). */
typedef struct srv_chat_format {
    const srv_reasoning_style *reasoning;
    const srv_call_syntax *calls;
    bool template_takes_tools;
} srv_chat_format;

/* The format of a template (Jinja source; NULL: ChatML, nucleus's fallback). */
srv_chat_format srv_chat_format_of(const char *template_src);

/* The syntax nucleus describes tools in to templates that take none (Hermes's <tool_call>). */
const srv_call_syntax *srv_call_syntax_hermes(void);
/* A syntax by name (tests); NULL when there is none. */
const srv_call_syntax *srv_call_syntax_named(const char *name);
const srv_reasoning_style *srv_reasoning_style_named(const char *name);

#endif
