#!/usr/bin/env python3
"""Load generator: load.mjs for machines without node (the lent GPU machine; bench/gpu.sh).

K concurrent clients, each sending streaming /v1/completions requests back to back until R
requests are done. Reports aggregate generated tokens/s (all completion tokens over the wall
time of the run) and the time to first token (request sent -> first chunk with text) at p50 and
p99, in load.mjs's format. The standard library only: a thread per client, http.client, SSE
parsed by lines.
  python3 load.py --url http://127.0.0.1:8080 --streams 32 --requests 64 [--max-tokens 64]
                  [--temperature 0.8] [--prompt TEXT] [--json]
"""
import argparse
import http.client
import json
import math
import threading
import time
import urllib.parse


def one(url, opt, seed):
    """One streaming request: (ttft in ms, completion tokens from the usage chunk)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({
        "prompt": opt.prompt, "max_tokens": opt.max_tokens, "temperature": opt.temperature,
        # llama.cpp's server applies its sampling defaults to fields a request leaves out (load.mjs)
        "top_k": 40, "top_p": 0.95, "min_p": 0.05,
        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, "seed": seed,
    })
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"status {res.status}: {res.read()[:500]!r}")
    ttft, tokens = None, 0
    for line in res:  # SSE: one "data: {...}" line per event, a blank line after each
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if ttft is None and any(c.get("text") for c in chunk.get("choices") or []):
            ttft = (time.perf_counter() - t0) * 1000
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    return (ttft if ttft is not None else (time.perf_counter() - t0) * 1000), tokens


def percentile(s, p):
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--prompt", default="Once upon a time, in a small village by the sea, there lived")
    ap.add_argument("--json", action="store_true")
    opt = ap.parse_args()
    one(opt.url, opt, 0)  # warm-up: page in the weights
    lock, results, errors = threading.Lock(), [], []
    next_i = [0]

    def client():
        while True:
            with lock:
                if next_i[0] >= opt.requests or errors:
                    return
                next_i[0] += 1
                i = next_i[0]
            try:
                r = one(opt.url, opt, i)
            except Exception as e:  # reported once the clients are done
                with lock:
                    errors.append(e)
                return
            with lock:
                results.append(r)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(opt.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise SystemExit(f"load.py: {errors[0]}")
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    out = {"streams": opt.streams, "requests": len(results), "tokens": tokens, "seconds": round(seconds, 2),
           "tokens_per_s": round(tokens / seconds, 1), "ttft_p50_ms": round(percentile(ttfts, 50), 1),
           "ttft_p99_ms": round(percentile(ttfts, 99), 1)}
    print(json.dumps(out) if opt.json else
          f"| {opt.streams} | {out['requests']} | {out['tokens_per_s']} | {out['ttft_p50_ms']} | {out['ttft_p99_ms']} |")


if __name__ == "__main__":
    main()
