/* Deadlines for the parts of a request the client controls (slowloris): a connection must send a
 * request's headers within header_s of opening or of its previous answer, and its body within
 * body_s of the headers; otherwise a watchdog thread shuts the socket down and the connection's
 * thread ends. libmicrohttpd's own timeout restarts on every byte, so one byte a second would
 * hold a connection (and, one thread per connection, a thread) for ever. Answering has no
 * deadline: generating may take minutes. */
#ifndef NC_SERVER_CONN_GUARD_H
#define NC_SERVER_CONN_GUARD_H

#include <stdint.h>

typedef struct conn_guard conn_guard;
typedef struct conn_entry conn_entry;

typedef enum { CONN_HEADERS, CONN_BODY, CONN_ANSWER } conn_phase;

/* 0, or -1 when the thread cannot start. */
int conn_guard_new(conn_guard **out, double header_s, double body_s);
void conn_guard_free(conn_guard *g);
/* A connection opened on socket fd, waiting for headers; NULL when out of memory (unguarded). */
conn_entry *conn_guard_open(conn_guard *g, int fd);
void conn_guard_close(conn_guard *g, conn_entry *e);
/* The connection moves to phase (its deadline starts now). e may be NULL. */
void conn_guard_phase(conn_guard *g, conn_entry *e, conn_phase phase);
/* Connections shut down for missing a deadline, since the start. */
int64_t conn_guard_n_closed(conn_guard *g);

#endif
