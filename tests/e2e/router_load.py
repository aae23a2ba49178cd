#!/usr/bin/env python3
"""Requests for every model of a router, interleaved from 8 clients, each answer compared with
a single-model server's answer to the same request and seed; requests for a model whose file
is broken, among them, must each fail with the loader's message and nothing else may fail
(tests/e2e/router.sh).

usage: router_load.py ROUTER_URL MODEL=SINGLE_URL... [--broken NAME]
Prints one "FAIL: ..." line per mismatch and ends with "router_load: N passed, N failed"."""
import json
import sys
import threading
import urllib.error
import urllib.request

CLIENTS = 8
PER_CLIENT = 6
PROMPTS = ["Once upon a time", "The little dog", "Tom and Lily went", "One day, a bird", "She was happy because"]


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def request(model, i):
    """Request i for model: a completion or a chat, sampled with its own seed."""
    seed = 1000 + i
    if i % 3 == 2:
        return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": PROMPTS[i % 5]}],
                                        "max_tokens": 10, "seed": seed, "temperature": 1}
    return "/v1/completions", {"model": model, "prompt": PROMPTS[i % 5], "max_tokens": 12, "seed": seed,
                               "temperature": 1}


def text_of(path, reply):
    c = reply["choices"][0]
    return c["message"]["content"] if "chat" in path else c["text"]


def main():
    router = sys.argv[1]
    singles, broken = {}, None
    args = sys.argv[2:]
    while args:
        a = args.pop(0)
        if a == "--broken":
            broken = args.pop(0)
        else:
            name, url = a.split("=", 1)
            singles[name] = url
    models = sorted(singles)
    # what each single-model server answers
    plan = []
    for c in range(CLIENTS):
        for k in range(PER_CLIENT):
            i = c * PER_CLIENT + k
            plan.append((c, models[(c + k) % len(models)], i))
    want = {}
    for _, model, i in plan:
        path, body = request(model, i)
        status, reply = post(singles[model], path, body)
        want[(model, i)] = (status, text_of(path, reply) if status == 200 else reply)
    passed, failed = [0], []
    lock = threading.Lock()

    def client(c):
        for cc, model, i in plan:
            if cc != c:
                continue
            path, body = request(model, i)
            status, reply = post(router, path, body)
            got = (status, text_of(path, reply) if status == 200 else reply)
            with lock:
                if got == want[(model, i)] and status == 200 and reply.get("model") == model:
                    passed[0] += 1
                else:
                    failed.append("%s request %d: router %r, single server %r" % (model, i, got, want[(model, i)]))
            if broken and i % 4 == 0:
                status, reply = post(router, "/v1/completions", {"model": broken, "prompt": "x", "max_tokens": 2})
                err = reply.get("error", {})
                with lock:
                    if status == 500 and err.get("code") == "model_load_failed" and "not a GGUF file" in err.get("message", ""):
                        passed[0] += 1
                    else:
                        failed.append("broken model: %d %r" % (status, reply))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failed:
        print("FAIL: " + f)
    print("router_load: %d passed, %d failed" % (passed[0], len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
