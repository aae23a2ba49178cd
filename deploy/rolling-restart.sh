#!/usr/bin/env bash
# Restart the nucleus@PORT replicas one at a time, each back and healthy before the next goes:
#   deploy/rolling-restart.sh 8081 8082 8083
# With nginx in front (deploy/nginx/nucleus.conf) no request fails: a draining replica's new
# requests get 503 and are retried on another. WAIT (default 6 s, nginx's fail_timeout plus one)
# is how long a restarted replica is given to rejoin nginx's pool.
set -eu
wait_s=${WAIT:-6}
host=${NUCLEUS_HOST:-127.0.0.1}
for port in "$@"; do
    echo "restarting nucleus@$port" >&2
    systemctl restart "nucleus@$port"
    for _ in $(seq 1 600); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$host:$port/health")" = 200 ] && break
        sleep 0.5
    done
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$host:$port/health")" = 200 ] || {
        echo "nucleus@$port is not healthy; stopping here" >&2
        exit 1
    }
    sleep "$wait_s"
done
