"""The server's KV cache under the issue's two workloads (bench/kv_server.sh runs it).

1. Prefix sharing: time to first token of a request with a 2000-token prompt, then of a second
   request sharing that prefix (a new question after it), then of the first prompt again.
2. Paged memory: 8 slots that may each grow to 4096 tokens, on a pool of 8192 tokens (what 8 fixed
   slots of 1024 reserve), serving 8 concurrent requests of modest length; beside it the fixed
   layout's server (-c 1024, pool = 8 x 1024); then one request of 3000 tokens. Reports the
   pool, the requests' outcome, and the resident memory after the load.
"""
import argparse
import json
import re
import subprocess
import threading
import time
import urllib.request

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. ")


def start(nucleus, model, *args):
    p = subprocess.Popen([nucleus, "serve", "-m", model, "--port", "0", "-t", "2", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        line = p.stderr.readline()
        if not line:
            raise SystemExit("server did not start")
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, m.group(1)


def ttft(url, prompt, max_tokens=8):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.time()
    first, cached, n_prompt = None, None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if first is None and d.get("choices"):
                first = time.time() - t0
            if d.get("usage"):
                cached = d["usage"]["prompt_tokens_details"]["cached_tokens"]
                n_prompt = d["usage"]["prompt_tokens"]
    return first, n_prompt, cached


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics") as r:
        m = re.search("^" + re.escape(name) + r" (\S+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--kib-per-token", type=float, required=True)
    a = ap.parse_args()

    p, url = start(a.nucleus, a.model, "-np", "4", "-c", "4096")
    prefix = STORY * 42
    print("| request | prompt tokens | cached tokens | TTFT ms | vs first |")
    print("|---|---|---|---|---|")
    rows = [("first: a ~2000-token prompt", prefix + "Question: what color was the ball?"),
            ("second: same prefix, another question", prefix + "Question: where did Lily play?"),
            ("third: the first prompt again", prefix + "Question: what color was the ball?")]
    base = None
    for name, prompt in rows:
        t, n, c = ttft(url, prompt)
        base = base or t
        print(f"| {name} | {n} | {c} | {t * 1000:.0f} | {t / base:.3f} |")
    p.terminate()
    p.wait()
    print()

    print("| server | slot context | KV pool (tokens) | KV pool MiB | 8 concurrent requests | then a 3000-token prompt | resident MiB after |")
    print("|---|---|---|---|---|---|---|")
    for label, args in (("fixed slots (before)", ["-np", "8", "-c", "1024"]),
                        ("paged pool", ["-np", "8", "-c", "4096", "--kv-size", "8192"])):
        p, url = start(a.nucleus, a.model, *args)
        done = []

        def one(i):
            body = json.dumps({"prompt": f"{i} " + STORY * 3, "max_tokens": 200, "temperature": 0.8,
                               "seed": i}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                done.append(r.status)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        body = json.dumps({"prompt": STORY * 63, "max_tokens": 16}).encode()
        req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                long_prompt = f"{r.status}: answered"
        except urllib.error.HTTPError as e:
            long_prompt = f"{e.code}: " + json.loads(e.read())["error"]["message"][:60]
        blocks = sum(metric(url, f'nucleus_kv_blocks{{state="{s}"}}') for s in ("used", "cached", "free"))
        tokens = int(blocks * 256)
        print(f"| {label} | {args[3]} | {tokens} | {tokens * a.kib_per_token / 1024:.0f} | "
              f"{done.count(200)} of 8 answered | {long_prompt} | {rss_mib(p.pid):.0f} |")
        p.terminate()
        p.wait()


main()
