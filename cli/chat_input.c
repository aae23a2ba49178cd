/* What `nucleus chat` reads at its prompt: one message, a line, lines joined by a trailing
 * backslash, or the lines between two lines of """. On a terminal (stdin and stdout both), lines
 * are edited with libedit (arrow keys, emacs keys or ~/.editrc's, history kept in a file across
 * sessions); otherwise they are read as they come. Ctrl-C at the prompt drops what was typed;
 * on a terminal, at an empty prompt it says how to quit, and a second one in a row quits. */
#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#include "chat_input.h"
#include "cli.h"

enum { HISTORY_LINES = 1000 };

struct chat_input {
    volatile sig_atomic_t *interrupted;
    EditLine *el;            /* NULL: not a terminal, plain reads */
    History *hist;
    HistEvent ev;
    char history[4096];      /* the history file, or "" for none */
    const char *prompt;
    bool armed;              /* Ctrl-C at an empty prompt: the next one quits */
    sigset_t waiting;        /* the signal mask while waiting for a key: SIGINT unblocked */
};

/* ---- the history file ---- */

/* $NUCLEUS_CHAT_HISTORY ("": none), else $XDG_STATE_HOME/nucleus/chat_history, else
 * ~/.local/state/nucleus/chat_history; its directory made. */
static void history_path(chat_input *in) {
    const char *env = getenv("NUCLEUS_CHAT_HISTORY"), *base;
    in->history[0] = 0;
    int n;
    if (env) n = snprintf(in->history, sizeof in->history, "%s", env);
    else if ((base = getenv("XDG_STATE_HOME")) && base[0] == '/') n = snprintf(in->history, sizeof in->history, "%s/nucleus/chat_history", base);
    else if ((base = getenv("HOME")) && *base) n = snprintf(in->history, sizeof in->history, "%s/.local/state/nucleus/chat_history", base);
    else return;
    if (n < 0 || (size_t)n >= sizeof in->history) {
        in->history[0] = 0;
        return;
    }
    if (!*in->history) return;
    /* its directories, private as the history is */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", in->history);
    for (char *p = dir + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(dir, 0700);
        *p = '/';
    }
    struct stat st;
    if (lstat(in->history, &st) == 0 && !S_ISREG(st.st_mode)) { /* a FIFO or device would hang or leak the history */
        fprintf(stderr, "note: %s is not a regular file: the chat history is not kept\n", in->history);
        in->history[0] = 0;
    }
}

/* ---- editing ---- */

/* Waits for input with SIGINT blocked but for the wait itself: ppoll unblocks it atomically, so a
 * Ctrl-C pressed between the prompt and the read interrupts the wait instead of being lost.
 * false: Ctrl-C. */
static bool input_ready(chat_input *in, const sigset_t *waiting) {
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    for (;;) {
        if (*in->interrupted) return false;
        if (ppoll(&p, 1, NULL, waiting) >= 0 || errno != EINTR) return true; /* errors: the read reports */
    }
}

/* libedit's read of one character (a key's bytes decoded as the locale says), waiting as
 * input_ready does. 1: a character; 0: the end of the input; -1: Ctrl-C or an error. */
static int read_key(EditLine *el, wchar_t *out) {
    chat_input *in;
    el_get(el, EL_CLIENTDATA, &in);
    mbstate_t state;
    memset(&state, 0, sizeof state);
    for (;;) {
        if (!input_ready(in, &in->waiting)) {
            errno = EINTR;
            return -1;
        }
        char b;
        ssize_t n = read(STDIN_FILENO, &b, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return (int)n;
        size_t k = mbrtowc(out, &b, 1, &state);
        if (k == (size_t)-2) continue; /* more bytes of the character */
        if (k == (size_t)-1) { /* not the locale's encoding: the byte as it is */
            memset(&state, 0, sizeof state);
            *out = (wchar_t)(unsigned char)b;
        }
        return 1;
    }
}

static char *prompt_of(EditLine *el) {
    chat_input *in;
    el_get(el, EL_CLIENTDATA, &in);
    return (char *)in->prompt;
}

chat_input *chat_input_open(volatile sig_atomic_t *interrupted) {
    chat_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    in->interrupted = interrupted;
    in->prompt = "> ";
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return in;
    setlocale(LC_CTYPE, ""); /* multibyte characters (UTF-8) edited as one; other categories stay "C" */
    in->el = el_init("nucleus", stdin, stdout, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) {
        if (in->el) el_end(in->el);
        if (in->hist) history_end(in->hist);
        in->el = NULL;
        in->hist = NULL;
        return in;
    }
    history(in->hist, &in->ev, H_SETSIZE, HISTORY_LINES);
    history(in->hist, &in->ev, H_SETUNIQUE, 1);
    history_path(in);
    if (*in->history) history(in->hist, &in->ev, H_LOAD, in->history); /* absent the first time */
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_PROMPT, prompt_of);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_HIST, history, in->hist);
    el_set(in->el, EL_GETCFN, read_key);
    el_source(in->el, NULL); /* ~/.editrc, if the user has one (bind -v for vi keys) */
    return in;
}

void chat_input_close(chat_input *in) {
    if (!in) return;
    if (in->el) {
        el_end(in->el);
        if (*in->history && history(in->hist, &in->ev, H_SAVE, in->history) < 0)
            fprintf(stderr, "note: the chat history could not be saved to %s\n", in->history);
        history_end(in->hist);
    }
    free(in);
}

/* ---- one message ---- */

/* stdin is unbuffered (cmd_chat.c), so no typed text hides in stdio's buffer from the waits. */

typedef struct message {
    char *text;
    size_t len;
    bool block, more;
} message;

/* A line (without its newline) into the message; false: out of memory. */
static bool add_line(message *m, char *line, size_t n) {
    if (!strcmp(line, "\"\"\"")) {
        m->block = !m->block;
        m->more = m->block;
        return m->text || (m->text = calloc(1, 1));
    }
    bool joined = !m->block && n > 0 && line[n - 1] == '\\';
    if (joined) line[--n] = 0;
    m->more = m->block || joined;
    char *grown = realloc(m->text, m->len + n + 2);
    if (!grown) return false;
    m->text = grown;
    if (m->len) m->text[m->len++] = '\n';
    memcpy(m->text + m->len, line, n + 1);
    m->len += n;
    return true;
}

static chat_read edited_message(chat_input *in, char **out) {
    message m = {.more = true};
    in->prompt = "> ";
    while (m.more) {
        int n;
        errno = 0;
        /* the terminal in edit mode before the prompt shows: text typed at once is not echoed twice */
        el_set(in->el, EL_PREP_TERM, 1);
        const char *got = el_gets(in->el, &n);
        if (!got && *in->interrupted) { /* Ctrl-C */
            *in->interrupted = 0;
            const LineInfo *li = el_line(in->el);
            bool typed = m.text || (li && li->lastchar > li->buffer);
            el_reset(in->el); /* the line typed so far goes */
            free(m.text);
            fputc('\n', stdout);
            fflush(stdout);
            if (!typed && in->armed) return CHAT_QUIT;
            in->armed = !typed;
            fprintf(stderr, typed ? "[input dropped]\n" : "[Ctrl-C again, Ctrl-D or /quit quits]\n");
            return CHAT_CANCELLED;
        }
        if (!got) { /* Ctrl-D, or the input is gone: what was typed is sent */
            fputc('\n', stdout);
            if (!m.text) return CHAT_QUIT;
            *out = m.text;
            return CHAT_MESSAGE;
        }
        in->armed = false;
        size_t len = strlen(got);
        char *line = malloc(len + 1);
        if (!line) break;
        memcpy(line, got, len + 1);
        if (len && line[len - 1] == '\n') line[--len] = 0;
        if (len) history(in->hist, &in->ev, H_ENTER, line);
        bool ok = add_line(&m, line, len);
        free(line);
        if (!ok) break;
        in->prompt = ". ";
    }
    if (m.more) { /* out of memory */
        free(m.text);
        fprintf(stderr, "error: out of memory\n");
        return CHAT_CANCELLED;
    }
    *out = m.text;
    return CHAT_MESSAGE;
}

/* SIGINT blocked while libedit works, unblocked only while read_key waits. */
static chat_read read_edited(chat_input *in, char **out) {
    sigset_t sigint;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    sigprocmask(SIG_BLOCK, &sigint, &in->waiting);
    chat_read r = edited_message(in, out);
    sigprocmask(SIG_SETMASK, &in->waiting, NULL);
    return r;
}

static chat_read read_plain(chat_input *in, char **out) {
    message m = {.more = true};
    char *line = NULL;
    size_t cap = 0;
    chat_read rc = CHAT_MESSAGE;
    sigset_t sigint, waiting;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    sigprocmask(SIG_BLOCK, &sigint, &waiting);
    fputs("> ", stdout);
    fflush(stdout);
    while (m.more) {
        errno = 0;
        ssize_t n = input_ready(in, &waiting) ? getline(&line, &cap, stdin) : -1;
        if (n < 0) {
            if (*in->interrupted) { /* Ctrl-C at the prompt: drop the input */
                *in->interrupted = 0;
                clearerr(stdin);
                rc = CHAT_CANCELLED;
            } else if (!m.text) rc = CHAT_QUIT;
            break; /* the input ended inside a message: it is sent */
        }
        if (n > 0 && line[n - 1] == '\n') line[--n] = 0;
        if (!add_line(&m, line, (size_t)n)) {
            fprintf(stderr, "error: out of memory\n");
            rc = CHAT_CANCELLED;
            break;
        }
        if (m.more) {
            fputs(". ", stdout);
            fflush(stdout);
        }
    }
    sigprocmask(SIG_SETMASK, &waiting, NULL);
    free(line);
    if (rc == CHAT_MESSAGE) *out = m.text;
    else free(m.text);
    if (rc != CHAT_MESSAGE) putchar('\n');
    return rc;
}

chat_read chat_input_read(chat_input *in, char **out) {
    *out = NULL;
    return in->el ? read_edited(in, out) : read_plain(in, out);
}
