/* The header and body deadlines (server/conn_guard): a connection past its deadline has its
 * socket shut down (its peer reads the end of the stream), one answering is left alone, and a
 * new phase restarts the clock. Socket pairs stand in for connections. */
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/conn_guard.h"
#include "test.h"

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

/* The peer's view: 1 when the other end was shut down (end of stream), 0 while it is open. */
static int shut_down(int peer) {
    struct pollfd p = {.fd = peer, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return 0;
    char c;
    return read(peer, &c, 1) == 0;
}

int main(void) {
    conn_guard *g;
    CHECK(conn_guard_new(&g, 0.4, 1.2) == 0);
    int headers[2], answering[2], body[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, headers) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, answering) == 0 &&
          socketpair(AF_UNIX, SOCK_STREAM, 0, body) == 0);
    conn_entry *eh = conn_guard_open(g, headers[0]), *ea = conn_guard_open(g, answering[0]),
               *eb = conn_guard_open(g, body[0]);
    CHECK(eh && ea && eb);
    conn_guard_phase(g, ea, CONN_ANSWER);
    conn_guard_phase(g, eb, CONN_BODY);
    sleep_s(0.8); /* past the header deadline, within the body's */
    CHECK(shut_down(headers[1]) == 1);
    CHECK(shut_down(answering[1]) == 0);
    CHECK(shut_down(body[1]) == 0);
    CHECK(conn_guard_n_closed(g) == 1);
    conn_guard_phase(g, eb, CONN_BODY); /* a new phase: the clock restarts */
    sleep_s(0.8);
    CHECK(shut_down(body[1]) == 0);
    sleep_s(0.9); /* 1.7 s after the restart, past 1.2 */
    CHECK(shut_down(body[1]) == 1);
    CHECK(shut_down(answering[1]) == 0);
    CHECK(conn_guard_n_closed(g) == 2);
    conn_guard_phase(g, ea, CONN_HEADERS); /* answered, kept alive: the next request's headers */
    sleep_s(0.8);
    CHECK(shut_down(answering[1]) == 1);
    conn_guard_close(g, eh);
    conn_guard_close(g, eb);
    conn_guard_phase(g, NULL, CONN_BODY); /* an unguarded connection (out of memory at open) */
    conn_guard_free(g); /* frees ea, still open */
    for (int i = 0; i < 2; i++) {
        close(headers[i]);
        close(answering[i]);
        close(body[i]);
    }
    return test_summary("test_conn_guard");
}
