/* The header and body deadlines (server/conn_guard): a connection past its deadline has its
 * socket shut down (its peer reads the end of the stream), one answering is left alone, and a
 * new phase restarts the clock. Socket pairs stand in for connections. The per-address limit:
 * IPv6 addresses of one /64 count as one, IPv4-mapped ones as their IPv4 address. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
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

static struct sockaddr_storage addr_of(const char *text) {
    struct sockaddr_storage a = {0};
    if (strchr(text, ':')) {
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a;
        v6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, text, &v6->sin6_addr);
    } else {
        struct sockaddr_in *v4 = (struct sockaddr_in *)&a;
        v4->sin_family = AF_INET;
        inet_pton(AF_INET, text, &v4->sin_addr);
    }
    return a;
}

static void test_groups(void) {
    conn_guard *g;
    CHECK(conn_guard_new(&g, 60, 60, 2) == 0);
    struct sockaddr_storage a1 = addr_of("2001:db8:1:2::1"), a2 = addr_of("2001:db8:1:2:ffff::9"),
                            other = addr_of("2001:db8:1:3::1"), v4 = addr_of("192.0.2.7"),
                            mapped = addr_of("::ffff:192.0.2.7"), v4b = addr_of("192.0.2.8");
    conn_entry *e1 = conn_guard_open(g, -1, (struct sockaddr *)&a1);
    CHECK(conn_guard_admit(g, (struct sockaddr *)&a2)); /* one of 2 open from the /64 */
    conn_entry *e2 = conn_guard_open(g, -1, (struct sockaddr *)&a2);
    /* another address of the same /64: the third of the group (MHD's limit counted addresses) */
    struct sockaddr_storage a3 = addr_of("2001:db8:1:2:1234:5678:9abc:def0");
    CHECK(!conn_guard_admit(g, (struct sockaddr *)&a3));
    CHECK(conn_guard_admit(g, (struct sockaddr *)&other));
    conn_entry *e3 = conn_guard_open(g, -1, (struct sockaddr *)&v4), *e4 = conn_guard_open(g, -1, (struct sockaddr *)&mapped);
    CHECK(!conn_guard_admit(g, (struct sockaddr *)&v4));
    CHECK(conn_guard_admit(g, (struct sockaddr *)&v4b));
    CHECK(conn_guard_admit(g, NULL)); /* an unknown address is not counted */
    conn_guard_close(g, e1);
    CHECK(conn_guard_admit(g, (struct sockaddr *)&a3));
    conn_guard_close(g, e2), conn_guard_close(g, e3), conn_guard_close(g, e4);
    conn_guard_free(g);
    CHECK(conn_guard_new(&g, 60, 60, 0) == 0); /* no limit */
    conn_entry *e = conn_guard_open(g, -1, (struct sockaddr *)&v4);
    CHECK(conn_guard_admit(g, (struct sockaddr *)&v4));
    conn_guard_close(g, e);
    conn_guard_free(g);
}

int main(void) {
    test_groups();
    conn_guard *g;
    CHECK(conn_guard_new(&g, 0.4, 1.2, 0) == 0);
    int headers[2], answering[2], body[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, headers) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, answering) == 0 &&
          socketpair(AF_UNIX, SOCK_STREAM, 0, body) == 0);
    conn_entry *eh = conn_guard_open(g, headers[0], NULL), *ea = conn_guard_open(g, answering[0], NULL),
               *eb = conn_guard_open(g, body[0], NULL);
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
