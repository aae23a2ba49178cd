/* A chat loop on libnucleus: each line typed is the user's turn, the model's chat template renders
 * the conversation (ChatML when the model has none), and the reply streams. The earlier turns'
 * keys and values are taken from the prefix cache, so a turn computes only what is new.
 *   cc chat.c $(pkg-config --cflags --libs nucleus) -o chat && ./chat MODEL.gguf */
#include <nucleus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *s;
    size_t len;
} text;

static void append(text *t, const char *s, size_t n) {
    char *grown = realloc(t->s, t->len + n + 1);
    if (!grown) { perror("chat"); exit(1); }
    memcpy(grown + t->len, s, n);
    t->s = grown;
    t->len += n;
    t->s[t->len] = 0;
}

/* A message as JSON: {"role": ROLE, "content": CONTENT}, CONTENT escaped. */
static void append_message(text *conv, const char *role, const char *content) {
    char esc[8];
    append(conv, conv->len > 1 ? ",{\"role\":\"" : "{\"role\":\"", conv->len > 1 ? 10 : 9);
    append(conv, role, strlen(role));
    append(conv, "\",\"content\":\"", 13);
    for (const unsigned char *p = (const unsigned char *)content; *p; p++) {
        if (*p == '"' || *p == '\\') snprintf(esc, sizeof esc, "\\%c", *p);
        else if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p);
        else snprintf(esc, sizeof esc, "%c", *p);
        append(conv, esc, strlen(esc));
    }
    append(conv, "\"}", 2);
}

static int stream(const nc_gen_event *ev, void *reply) {
    fwrite(ev->text, 1, (size_t)ev->n_text, stdout);
    fflush(stdout);
    append(reply, ev->text, (size_t)ev->n_text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s MODEL\n", argv[0]); return 2; }
    nc_err err;
    nc_model *m = NULL;
    nc_context *c = NULL;
    nc_chat_template *t = NULL;
    if (nc_model_load(&m, argv[1], &err) || nc_context_new(&c, m, &(nc_context_params){0}, &err) ||
        nc_chat_template_new(&t, m, NULL, 0, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    nc_gen_params p = {.stop.max_tokens = 256};
    nc_sampler_params_default(&p.sampling);
    text conv = {0};
    append(&conv, "[", 1);
    char line[4096];
    int rc = 0;
    while (!rc && (fputs("> ", stdout), fflush(stdout), fgets(line, sizeof line, stdin))) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        append_message(&conv, "user", line);
        append(&conv, "]", 1); /* closed for the render, reopened after it */
        char *prompt = NULL;
        size_t len = 0;
        bool add_bos = false;
        int32_t ids[4096];
        int n = -1;
        if (!nc_chat_render(t, conv.s, NULL, true, &prompt, &len, &add_bos, &err))
            n = nc_tokenize(m, prompt, len, add_bos, true, ids, 4096, &err);
        conv.s[--conv.len] = 0;
        text reply = {0};
        append(&reply, "", 0);
        nc_gen_result res = {0};
        if (n > 4096) snprintf(err.msg, sizeof err.msg, "the conversation is longer than 4096 tokens");
        rc = n < 0 || n > 4096 || nc_generate(c, m, ids, n, &p, stream, &reply, &res, &err);
        if (rc) fprintf(stderr, "error: %s\n", err.msg);
        else append_message(&conv, "assistant", reply.s);
        printf("\n");
        free(prompt);
        free(reply.s);
        nc_gen_result_free(&res);
    }
    free(conv.s);
    nc_chat_template_free(t);
    nc_context_free(c);
    nc_model_free(m);
    return rc;
}
