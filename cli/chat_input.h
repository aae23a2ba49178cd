/* The input of `nucleus chat`'s prompt (cli/chat_input.c): line editing and a history file on a
 * terminal, plain reads otherwise. */
#ifndef NC_CLI_CHAT_INPUT_H
#define NC_CLI_CHAT_INPUT_H

#include <signal.h>

typedef struct chat_input chat_input;

typedef enum chat_read {
    CHAT_MESSAGE,    /* a message was read */
    CHAT_CANCELLED,  /* Ctrl-C dropped what was typed: read again */
    CHAT_QUIT,       /* the end of the input (Ctrl-D), or a second Ctrl-C at an empty prompt */
} chat_read;

/* interrupted: the flag the SIGINT handler sets (installed without SA_RESTART, so a Ctrl-C
 * interrupts the wait for input). NULL: out of memory. */
chat_input *chat_input_open(volatile sig_atomic_t *interrupted);
/* One message into *msg (malloc'd) when CHAT_MESSAGE is returned. */
chat_read chat_input_read(chat_input *in, char **msg);
/* Saves the history. */
void chat_input_close(chat_input *in);

#endif
