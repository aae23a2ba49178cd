#include "server/watch.h"

#include <errno.h>
#include <sys/socket.h>

#include "server/scheduler.h"

bool srv_peer_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

srv_stop_why srv_watch_why(const srv_watch *w) {
    if (srv_peer_gone(w->fd)) return SRV_STOP_CLIENT;
    if (w->stopping && atomic_load(w->stopping)) return SRV_STOP_SERVER;
    if (w->deadline > 0 && srv_now() >= w->deadline) return SRV_STOP_DEADLINE;
    return SRV_GO_ON;
}

bool srv_watch_gone(void *w) { return srv_watch_why(w) != SRV_GO_ON; }

void srv_watch_error(const srv_watch *w, srv_error *e) {
    switch (srv_watch_why(w)) {
    case SRV_STOP_SERVER:
        srv_error_set(e, 503, "server_error", "draining", NULL, "the server is shutting down, retry elsewhere");
        break;
    case SRV_STOP_DEADLINE:
        srv_error_set(e, 503, "server_error", "request_timeout", NULL,
                      "the request passed the server's deadline of %g s (--request-timeout)", w->timeout);
        break;
    default:
        srv_error_set(e, 499, "invalid_request_error", NULL, NULL, "the client closed the connection");
    }
}
