/* What one client may hold of the server: connections from one address, and deadlines for the
 * parts of a request the client controls (slowloris).
 *
 * Addresses are grouped as a host holds them: an IPv4 address alone, an IPv6 address by its /64
 * (a host given a /64 picks any of its 2^64 addresses; IPv4-mapped IPv6 addresses count as IPv4).
 *
 * Deadlines: a connection must send a
 * request's headers within header_s of opening or of its previous answer, and its body within
 * body_s of the headers; otherwise a watchdog thread shuts the socket down and the connection's
 * thread ends. libmicrohttpd's own timeout restarts on every byte, so one byte a second would
 * hold a connection (and, one thread per connection, a thread) for ever. Answering has no
 * deadline: generating may take minutes. */
#ifndef NC_SERVER_CONN_GUARD_H
#define NC_SERVER_CONN_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct conn_guard conn_guard;
typedef struct conn_entry conn_entry;

typedef enum { CONN_HEADERS, CONN_BODY, CONN_ANSWER } conn_phase;

/* per_group: connections open from one address group at most (<= 0: no limit). 0, or -1 when
 * the thread cannot start. */
int conn_guard_new(conn_guard **out, double header_s, double body_s, int per_group);
void conn_guard_free(conn_guard *g);
/* Whether a connection from addr may open: fewer than per_group are open from its group. Called
 * before conn_guard_open by the thread that accepts (so no two admissions race). */
bool conn_guard_admit(conn_guard *g, const struct sockaddr *addr);
/* A connection opened on socket fd from addr (NULL: unknown, never counted), waiting for headers;
 * NULL when out of memory (unguarded). */
conn_entry *conn_guard_open(conn_guard *g, int fd, const struct sockaddr *addr);
void conn_guard_close(conn_guard *g, conn_entry *e);
/* The connection moves to phase (its deadline starts now). e may be NULL. */
void conn_guard_phase(conn_guard *g, conn_entry *e, conn_phase phase);
/* Connections shut down for missing a deadline, since the start. */
int64_t conn_guard_n_closed(conn_guard *g);
/* The group of an address into key (false for one that is neither IPv4 nor IPv6). */
bool conn_guard_group(const struct sockaddr *addr, uint8_t key[16]);

#endif
