/* nucleus chat: a conversation with the model through its chat template, in the terminal. Each
 * turn renders the whole conversation and generates the reply, streamed; the earlier turns' keys
 * and values come back from the prefix cache, so a turn computes only what is new. A template
 * whose family writes its reasoning apart (nc_chat_reply_parse, as the server reads it) has the
 * reasoning shown dimmed as it streams (between markers where stdout is no terminal), or hidden,
 * and kept out of the reply's content: it goes back to the template as the message's reasoning
 * field, which the template renders or drops as its family does. Ctrl-C stops
 * a reply (what was said stays in the conversation) and not the program; Ctrl-D at the prompt
 * ends it. The prompt's input, edited on a terminal: chat_input.c. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_input.h"
#include "cli.h"
#include "common.h" /* nc_open_regular */

typedef struct chat_opts {
    const char *model, *system;
    const char *template_path;  /* --chat-template */
    char *template_src;         /* its text */
    size_t template_len;
    bool hide_thinking;
    long threads, ctx;
    bool fast;
    nc_cache_type type_k, type_v;
    int32_t n_gpu_layers;
    cli_decoding dec;
    cli_spec spec;
    cli_hf hf;
    cli_lora lora;
} chat_opts;

static const char COMMANDS[] =
    "commands:\n"
    "  /system TEXT   set the system message (the conversation goes on)\n"
    "  /clear         forget the conversation (the system message stays)\n"
    "  /save FILE     write the conversation as JSON ({\"messages\": [...]})\n"
    "  /load FILE     read a conversation written by /save (or any such JSON)\n"
    "  /set NAME V    temp, top_k, top_p, min_p, repeat_penalty, seed, n (reply tokens at most; -1: no limit)\n"
    "  /help, /quit   (Ctrl-D quits too; Ctrl-C stops a reply, drops a line being typed, and at an empty\n"
    "                 prompt says how to quit: a second Ctrl-C there quits)\n"
    "input: end a line with \\ to go on on the next one, or put the text between lines of \"\"\"; on a terminal,\n"
    "  lines are edited (arrow keys, emacs keys or ~/.editrc's) and Up recalls earlier ones, kept in\n"
    "  $NUCLEUS_CHAT_HISTORY, else $XDG_STATE_HOME/nucleus/chat_history, else ~/.local/state/nucleus/chat_history\n";

static void usage_to(FILE *out) {
    fprintf(out,
            "usage: nucleus chat [-m MODEL | -hf USER/REPO[:QUANT]] [--system TEXT] [-n N] [-t THREADS] [-c CTX] " CLI_CACHE_USAGE " " CLI_DEVICE_USAGE " [--fast]\n"
            "                    " CLI_LORA_USAGE " [decoding options] [speculative options]\n"
            CLI_HF_HELP
            "  --system TEXT      the system message\n"
            "  --chat-template FILE  a Jinja chat template used instead of the model's\n"
            "  --hide-thinking    do not show the model's reasoning (a template whose family separates it: shown\n"
            "                     dimmed by default, between [thinking] and [/thinking] when stdout is no terminal)\n"
            "  -n N               tokens per reply at most (default -1: until the model ends its turn)\n"
            "  -c CTX             the conversation's context (default: the model's, at most 4096)\n" CLI_CACHE_HELP CLI_DEVICE_HELP CLI_FAST_HELP
            CLI_LORA_HELP "%s%s%s",
            COMMANDS, cli_decoding_usage(), cli_spec_usage());
}

static int parse(int argc, char **argv, chat_opts *o) {
    *o = (chat_opts){0};
    cli_decoding_init(&o->dec);
    o->dec.stop.max_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_to(stdout);
            return -1;
        }
        int r = cli_decoding_arg(argc, argv, &i, &o->dec);
        if (r == 0) r = cli_cache_arg(argc, argv, &i, &o->type_k, &o->type_v);
        if (r == 0) r = cli_device_arg(argc, argv, &i, &o->n_gpu_layers);
        if (r == 0) r = cli_spec_arg(argc, argv, &i, &o->spec);
        if (r == 0) r = cli_hf_arg(argc, argv, &i, &o->hf);
        if (r == 0) r = cli_lora_arg(argc, argv, &i, &o->lora);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--system")) { if (!(o->system = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--chat-template")) { if (!(o->template_path = cli_value(argc, argv, &i))) return 2; }
        else if (!strcmp(a, "--hide-thinking")) o->hide_thinking = true;
        else if (!strcmp(a, "--fast")) o->fast = true;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, -1, 1 << 24, &n)) return 2;
            o->dec.stop.max_tokens = n < 0 ? 0 : (int32_t)n;
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 512, &o->threads)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 16, 1 << 24, &o->ctx)) return 2; }
        else { fprintf(stderr, "error: chat: unknown option '%s'\n", a); usage_to(stderr); return 2; }
    }
    if (!cli_decoding_finish(&o->dec) || !cli_spec_finish(&o->spec)) return 2;
    if (o->dec.use_beams || o->dec.use_contrastive || o->dec.n_samples > 1) {
        fprintf(stderr, "error: chat: replies are sampled (or greedy), one at a time: no --beams, --penalty-alpha or -N\n");
        return 2;
    }
    if (o->template_path && !(o->template_src = cli_read_text(o->template_path, &o->template_len))) return 2;
    int rc = cli_model_path(&o->model, &o->hf);
    if (rc) return rc;
    if (!o->dec.seed_given) o->dec.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    return 0;
}

/* ---- the conversation ---- */

typedef struct chat {
    nc_model *m;
    nc_context *c;
    nc_chat_template *tmpl;
    nc_spec_params spec;
    chat_opts *o;
    cJSON *messages;       /* [{"role", "content"[, "reasoning_content"]}] */
    char *reply;           /* the reply being streamed */
    size_t n_reply;
    int turn;
    /* a template that separates reasoning: its field for earlier reasoning (else NULL), the prompt
       the reply follows (whether it opened the reasoning), what of the reply was shown so far */
    const char *reasoning_field;
    char *prompt;
    size_t n_prompt, shown_reasoning, shown_content;
    bool tty, thinking_open;
} chat;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static bool add_message(chat *ch, const char *role, const char *content) {
    cJSON *msg = cJSON_CreateObject();
    if (!msg || !cJSON_AddStringToObject(msg, "role", role) || !cJSON_AddStringToObject(msg, "content", content)) {
        cJSON_Delete(msg);
        return false;
    }
    return cJSON_AddItemToArray(ch->messages, msg);
}

/* The system message first, or none. */
static bool set_system(chat *ch, const char *text) {
    cJSON *first = cJSON_GetArrayItem(ch->messages, 0);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
    if (first && cJSON_IsString(role) && !strcmp(role->valuestring, "system")) cJSON_DeleteItemFromArray(ch->messages, 0);
    if (!text || !*text) return true;
    cJSON *msg = cJSON_CreateObject();
    if (!msg || !cJSON_AddStringToObject(msg, "role", "system") || !cJSON_AddStringToObject(msg, "content", text)) {
        cJSON_Delete(msg);
        return false;
    }
    return cJSON_InsertItemInArray(ch->messages, 0, msg);
}

/* Faint (SGR 2) on a terminal; markers elsewhere. */
static void close_thinking(chat *ch) {
    if (!ch->thinking_open) return;
    fputs(ch->tty ? "\x1b[22m\n\n" : "\n[/thinking]\n", stdout);
    ch->thinking_open = false;
}

/* The reply read so far (done: whole) as reasoning and content; what each grew by is shown. */
static int show_reply(chat *ch, bool done, nc_chat_reply *r) {
    nc_reply_params p = {.prompt = ch->prompt, .prompt_len = ch->n_prompt};
    nc_err err;
    if (nc_chat_reply_parse(ch->tmpl, &p, ch->reply ? ch->reply : "", ch->n_reply, done, r, &err)) return -1;
    if (r->n_reasoning > ch->shown_reasoning) {
        if (!ch->o->hide_thinking) {
            if (!ch->thinking_open) fputs(ch->tty ? "\x1b[2m" : "[thinking]\n", stdout);
            ch->thinking_open = true;
            fwrite(r->reasoning + ch->shown_reasoning, 1, r->n_reasoning - ch->shown_reasoning, stdout);
        }
        ch->shown_reasoning = r->n_reasoning;
    }
    if (r->n_content > ch->shown_content || done) close_thinking(ch);
    if (r->n_content > ch->shown_content) {
        fwrite(r->content + ch->shown_content, 1, r->n_content - ch->shown_content, stdout);
        ch->shown_content = r->n_content;
    }
    fflush(stdout);
    return 0;
}

static int on_token(const nc_gen_event *ev, void *user) {
    chat *ch = user;
    if (ev->n_text > 0) {
        char *grown = realloc(ch->reply, ch->n_reply + (size_t)ev->n_text + 1);
        if (!grown) return 1;
        memcpy(grown + ch->n_reply, ev->text, (size_t)ev->n_text);
        ch->n_reply += (size_t)ev->n_text;
        grown[ch->n_reply] = 0;
        ch->reply = grown;
        if (ch->reasoning_field) {
            nc_chat_reply r;
            if (show_reply(ch, false, &r)) return 1;
            nc_chat_reply_free(&r);
        } else {
            fwrite(ev->text, 1, (size_t)ev->n_text, stdout);
            fflush(stdout);
        }
    }
    return interrupted != 0;
}

/* The messages as the template reads them: earlier reasoning under the template's own field
 * (gpt-oss's "thinking"), as the server gives it. malloc'd JSON; NULL when out of memory. */
static char *template_messages(const chat *ch) {
    if (!ch->reasoning_field || !strcmp(ch->reasoning_field, "reasoning_content"))
        return cJSON_PrintUnformatted(ch->messages);
    cJSON *copy = cJSON_Duplicate(ch->messages, true), *m;
    bool ok = copy != NULL;
    cJSON_ArrayForEach(m, copy) {
        cJSON *rc = cJSON_DetachItemFromObjectCaseSensitive(m, "reasoning_content");
        if (rc) ok = ok && cJSON_AddItemToObject(m, ch->reasoning_field, rc);
    }
    char *json = ok ? cJSON_PrintUnformatted(copy) : NULL;
    cJSON_Delete(copy);
    return json;
}

/* The conversation so far, the assistant's turn opened, as tokens (malloc'd); -1 with err set. */
static int prompt_tokens(chat *ch, int32_t **ids, nc_err *err) {
    char *json = template_messages(ch), *text = NULL;
    size_t len = 0;
    bool add_bos;
    if (!json) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    int rc = nc_chat_render(ch->tmpl, json, NULL, true, &text, &len, &add_bos, err);
    free(json);
    if (rc) return -1;
    int cap = (int)len + 16, n = -1;
    *ids = malloc((size_t)cap * sizeof **ids);
    if (*ids) n = nc_tokenize(ch->m, text, len, add_bos, true, *ids, cap, err);
    else snprintf(err->msg, sizeof err->msg, "out of memory");
    free(ch->prompt);
    ch->prompt = text;
    ch->n_prompt = len;
    if (n < 0 || n > cap) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return n;
}

/* Reply to the conversation; the reply (or what was said of it) joins it. */
static void respond(chat *ch) {
    nc_err err;
    int32_t *ids = NULL;
    int n = prompt_tokens(ch, &ids, &err);
    int32_t n_ctx = nc_context_n_ctx(ch->c);
    if (n < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        cJSON_DeleteItemFromArray(ch->messages, cJSON_GetArraySize(ch->messages) - 1);
        return;
    }
    if (n >= n_ctx) {
        fprintf(stderr, "[the conversation has %d tokens and the context %d: nothing is left for a reply; /clear "
                        "starts again, -c N runs a larger context]\n", n, n_ctx);
        cJSON_DeleteItemFromArray(ch->messages, cJSON_GetArraySize(ch->messages) - 1);
        free(ids);
        return;
    }
    nc_gen_params gp = {.sampling = ch->o->dec.sp, .stop = ch->o->dec.stop, .context = ch->o->dec.context.policy,
                        .spec = ch->spec};
    gp.sampling.seed += (uint64_t)ch->turn++;
    nc_gen_result res;
    ch->n_reply = ch->shown_reasoning = ch->shown_content = 0;
    interrupted = 0;
    int rc = nc_generate(ch->c, ch->m, ids, n, &gp, on_token, ch, &res, &err);
    free(ids);
    bool stored;
    if (ch->reasoning_field) { /* the whole reply: its content joins the conversation, its reasoning beside */
        nc_chat_reply r = {0};
        stored = !show_reply(ch, true, &r) && add_message(ch, "assistant", r.content);
        cJSON *msg = cJSON_GetArrayItem(ch->messages, cJSON_GetArraySize(ch->messages) - 1);
        if (stored && r.n_reasoning) stored = cJSON_AddStringToObject(msg, "reasoning_content", r.reasoning) != NULL;
        nc_chat_reply_free(&r);
    } else {
        stored = add_message(ch, "assistant", ch->reply && ch->n_reply ? ch->reply : "");
    }
    putchar('\n');
    if (!stored) fprintf(stderr, "error: out of memory\n");
    if (rc && interrupted) fprintf(stderr, "[stopped]\n");
    else if (rc) fprintf(stderr, "error: %s\n", err.msg);
    else {
        const nc_gen_sample *s = &res.samples[0];
        if (s->finish == NC_FINISH_CONTEXT)
            fprintf(stderr, "[the context is full (%d tokens): /clear starts again, -c N runs a larger context]\n", n_ctx);
        fprintf(stderr, "[%d tokens, %.1f tok/s; prompt %d tokens, %d of them cached]\n", s->n_tokens,
                s->n_tokens / (res.t_gen > 0 ? res.t_gen : 1e-9), n, res.n_cached);
        if (cli_spec_on(&ch->o->spec)) cli_spec_report(&res.spec);
        nc_gen_result_free(&res);
    }
    interrupted = 0;
}

/* ---- commands ---- */

static void save(chat *ch, const char *path) {
    cJSON *root = cJSON_CreateObject();
    char *text = NULL;
    if (root && cJSON_AddItemReferenceToObject(root, "messages", ch->messages)) text = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) fprintf(stderr, "error: /save %s: %s\n", path, text ? strerror(errno) : "out of memory");
    else fprintf(stderr, "[saved %d messages to %s]\n", cJSON_GetArraySize(ch->messages), path);
    if (f) fclose(f);
    free(text);
}

/* {"messages": [{"role": string, "content": string}, ...]} or the bare array. */
static void load(chat *ch, const char *path) {
    nc_err err;
    int fd = nc_open_regular(path, &err);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        fprintf(stderr, "error: /load %s\n", fd < 0 ? err.msg : strerror(errno));
        return;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (size_t got; (buf = len + 4096 > cap ? realloc(buf, cap = 2 * cap + 4096) : buf) &&
                     (got = fread(buf + len, 1, cap - len - 1, f)) > 0;)
        len += got;
    fclose(f);
    cJSON *root = buf ? cJSON_ParseWithLength(buf, len) : NULL;
    free(buf);
    cJSON *msgs = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "messages");
    const char *why = !root ? "not JSON" : !cJSON_IsArray(msgs) ? "no \"messages\" array" : NULL;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!why && (!cJSON_IsString(role) || !cJSON_IsString(content))) why = "a message without a string role and content";
    }
    if (why) fprintf(stderr, "error: /load %s: %s\n", path, why);
    else {
        cJSON *copy = cJSON_Duplicate(msgs, true);
        if (!copy) fprintf(stderr, "error: out of memory\n");
        else {
            cJSON_Delete(ch->messages);
            ch->messages = copy;
            fprintf(stderr, "[loaded %d messages from %s]\n", cJSON_GetArraySize(copy), path);
        }
    }
    cJSON_Delete(root);
}

static void set_option(chat *ch, const char *name, const char *value) {
    nc_sampler_params *sp = &ch->o->dec.sp, trial = *sp;
    double f;
    long n;
    uint64_t u;
    bool ok = true;
    if (!strcmp(name, "temp")) ok = cli_float("temp", value, 0, 100, &f) && ((trial.temp = (float)f), true);
    else if (!strcmp(name, "top_k")) ok = cli_int("top_k", value, 0, 1 << 30, &n) && ((trial.top_k = (int32_t)n), true);
    else if (!strcmp(name, "top_p")) ok = cli_float("top_p", value, 0, 1, &f) && ((trial.top_p = (float)f), true);
    else if (!strcmp(name, "min_p")) ok = cli_float("min_p", value, 0, 1, &f) && ((trial.min_p = (float)f), true);
    else if (!strcmp(name, "repeat_penalty"))
        ok = cli_float("repeat_penalty", value, 0.01, 100, &f) && ((trial.repeat_penalty = (float)f), true);
    else if (!strcmp(name, "seed")) ok = cli_u64("seed", value, &u) && ((trial.seed = u), true);
    else if (!strcmp(name, "n")) {
        if (!cli_int("n", value, -1, 1 << 24, &n)) return;
        ch->o->dec.stop.max_tokens = n <= 0 ? 0 : (int32_t)n;
        fprintf(stderr, "[n = %ld]\n", n);
        return;
    } else {
        fprintf(stderr, "error: /set: unknown setting '%s' (temp, top_k, top_p, min_p, repeat_penalty, seed, n)\n", name);
        return;
    }
    if (!ok) return;
    *sp = trial;
    ch->turn = 0; /* a new seed starts counting again */
    fprintf(stderr, "[%s = %s]\n", name, value);
}

/* Returns false to quit. */
static bool command(chat *ch, char *line) {
    char *arg = line + strcspn(line, " ");
    if (*arg) *arg++ = 0;
    while (*arg == ' ') arg++;
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return false;
    if (!strcmp(line, "/help")) fputs(COMMANDS, stderr);
    else if (!strcmp(line, "/clear")) {
        cJSON *first = cJSON_GetArrayItem(ch->messages, 0);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
        bool keep = first && cJSON_IsString(role) && !strcmp(role->valuestring, "system");
        while (cJSON_GetArraySize(ch->messages) > (keep ? 1 : 0))
            cJSON_DeleteItemFromArray(ch->messages, cJSON_GetArraySize(ch->messages) - 1);
        fprintf(stderr, "[cleared]\n");
    } else if (!strcmp(line, "/system")) {
        if (!set_system(ch, arg)) fprintf(stderr, "error: out of memory\n");
        else fprintf(stderr, *arg ? "[system message set]\n" : "[no system message]\n");
    } else if (!strcmp(line, "/save") || !strcmp(line, "/load")) {
        if (!*arg) fprintf(stderr, "error: %s FILE: the file is missing\n", line);
        else if (line[1] == 's') save(ch, arg);
        else load(ch, arg);
    } else if (!strcmp(line, "/set")) {
        char *value = arg + strcspn(arg, " ");
        if (*value) *value++ = 0;
        if (!*arg || !*value) fprintf(stderr, "error: /set NAME VALUE\n");
        else set_option(ch, arg, value);
    } else fprintf(stderr, "error: unknown command '%s' (/help lists them)\n", line);
    return true;
}

static int loop(chat *ch, chat_input *in) {
    for (;;) {
        char *msg;
        chat_read r = chat_input_read(in, &msg);
        if (r == CHAT_QUIT) return 0;
        if (r == CHAT_CANCELLED) continue;
        bool go_on = true;
        if (msg[0] == '/') go_on = command(ch, msg);
        else if (*msg) {
            if (!add_message(ch, "user", msg)) fprintf(stderr, "error: out of memory\n");
            else respond(ch);
        }
        free(msg);
        if (!go_on) return 0;
    }
}

/* The model's template, or --chat-template's. */
static int open_template(chat *ch, char *note, size_t cap, nc_err *err) {
    *note = 0;
    if (!ch->o->template_src) return nc_chat_template_new(&ch->tmpl, ch->m, note, cap, err);
    if (!nc_chat_template_from_source(&ch->tmpl, ch->m, ch->o->template_src, ch->o->template_len, err)) return 0;
    char why[NC_ERR_MAX];
    memcpy(why, err->msg, sizeof why);
    snprintf(err->msg, sizeof err->msg, "--chat-template %.100s: %.380s", ch->o->template_path, why);
    return -1;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) {
        cli_decoding_free(&o.dec);
        free(o.template_src);
        return rc < 0 ? 0 : rc;
    }
    chat ch = {.o = &o, .messages = cJSON_CreateArray()};
    nc_context *dc = NULL;
    nc_model *dm = NULL;
    nc_err err;
    char note[512];
    rc = 1;
    if (!ch.messages) snprintf(err.msg, sizeof err.msg, "out of memory");
    else if (!cli_model_load(&ch.m, o.model, &o.lora, &err) && !open_template(&ch, note, sizeof note, &err)) {
        ch.reasoning_field = nc_chat_reasoning_field(ch.tmpl);
        ch.tty = isatty(STDOUT_FILENO);
        nc_model_info info;
        nc_model_get_info(ch.m, &info);
        long n_ctx = o.ctx ? o.ctx : info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
        nc_context_params cp = {.n_ctx = (int32_t)n_ctx, .n_threads = (int32_t)o.threads, .type_k = o.type_k,
                                .type_v = o.type_v, .fast = o.fast, .n_gpu_layers = o.n_gpu_layers};
        if (!nc_context_new(&ch.c, ch.m, &cp, &err) &&
            !cli_spec_open(&o.spec, ch.m, &cp, &ch.spec, &dm, &dc, &err)) {
            if (*note) fprintf(stderr, "note: %s\n", note);
            fprintf(stderr, "nucleus chat: %s, context %ld tokens, seed %llu; /help lists the commands\n", o.model,
                    n_ctx, (unsigned long long)o.dec.sp.seed);
            struct sigaction sa = {.sa_handler = on_sigint}; /* no SA_RESTART: Ctrl-C interrupts the prompt's wait */
            sigemptyset(&sa.sa_mask);
            sigaction(SIGINT, &sa, NULL);
            setvbuf(stdin, NULL, _IONBF, 0); /* no typed text may hide in stdio's buffer (chat_input.c) */
            chat_input *in = chat_input_open(&interrupted);
            if (in && (!o.system || set_system(&ch, o.system))) rc = loop(&ch, in);
            else snprintf(err.msg, sizeof err.msg, "out of memory");
            chat_input_close(in);
        }
    }
    if (rc) fprintf(stderr, "error: %s\n", err.msg);
    cJSON_Delete(ch.messages);
    free(ch.reply);
    free(ch.prompt);
    nc_chat_template_free(ch.tmpl);
    nc_context_free(ch.c);
    nc_model_free(ch.m);
    nc_context_free(dc);
    nc_model_free(dm);
    cli_decoding_free(&o.dec);
    free(o.template_src);
    return rc;
}
