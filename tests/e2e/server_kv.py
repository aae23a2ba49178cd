"""The server's KV cache as a managed resource, end to end (tests/e2e/server_kv.sh runs it).

- Prefix sharing: the same prompt twice, then the prompt grown by a turn: the later requests
  report the cached tokens in usage.prompt_tokens_details.cached_tokens, /metrics shows the hit
  rate, and a seed gives the same text with or without a cache hit.
- A small pool (--kv-size): 32 concurrent requests on 8 slots whose cache cannot hold them all;
  slots wait and are preempted and resumed, every request completes, each with the text a server
  with a roomy pool gives for its seed.
- Context shift on a small pool: requests longer than their slot's context shift it, and slots
  that shifted are preempted and resumed too; every request gets all its tokens.
- Cancellation mid-prefill: a client that leaves while its long prompt is being prefilled frees
  its blocks; the server answers the next request.
- A pool smaller than a slot's context is refused at start with a message naming --kv-size.
Every server is the sanitized build; it must exit 0 on SIGTERM with no sanitizer report.
"""
import argparse
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL", what, flush=True)


class Server:
    def __init__(self, nucleus, model, *args):
        self.p = subprocess.Popen([nucleus, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *args],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = []
        self.url = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.err.append(line)
            m = re.search(r"listening on (http://[0-9.:]+)", line)
            if m:
                self.url = m.group(1)
                break
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.err.append(line)

    def post(self, path, body, timeout=300):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(nucleus_[a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)}

    def stop(self, name):
        self.p.terminate()
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = -1
        time.sleep(0.1)
        err = "".join(self.err)
        check(rc == 0, f"{name}: exit status {rc} after SIGTERM")
        check(not re.search(r"AddressSanitizer|LeakSanitizer|runtime error", err), f"{name}: sanitizer report:\n{err[-3000:]}")


def completion(sv, prompt, seed, max_tokens=24, **kw):
    return sv.post("/v1/completions", {"prompt": prompt, "seed": seed, "max_tokens": max_tokens, "temperature": 0.8, **kw})


STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. ")


def blocks_held(sv):
    """The pool's used blocks once the server is idle: a response reaches its client before the
    engine's next turn releases the slot, so the gauge is polled for up to 5 s."""
    for _ in range(50):
        held = sv.metrics().get('nucleus_kv_blocks{state="used"}')
        if held == 0:
            break
        time.sleep(0.1)
    return held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nucleus", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()

    # a pool smaller than one slot's context
    p = subprocess.run([a.nucleus, "serve", "-m", a.model, "--port", "0", "-c", "512", "--kv-size", "256"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "--kv-size 256 is smaller than the context of a slot (512" in p.stderr,
          f"small pool refused: {p.returncode} {p.stderr[-300:]}")

    # ---- prefix sharing ----
    sv = Server(a.nucleus, a.model, "-np", "4", "-c", "512")
    check(sv.url is not None, "roomy server started")
    if sv.url is None:
        return
    prompt = STORY * 4  # ~ 300 tokens: a whole block and part of the next
    st, first = completion(sv, prompt, 7)
    check(st == 200 and first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"first request: {st} {first}")
    n_prompt = first["usage"]["prompt_tokens"]
    check(n_prompt > 256, f"the prompt spans two blocks ({n_prompt} tokens)")
    st, again = completion(sv, prompt, 7)
    check(st == 200 and again["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1,
          f"same prompt: all but its last token cached ({again['usage']})")
    check(again["choices"][0]["text"] == first["choices"][0]["text"], "same seed, same text with a cache hit")
    turn = prompt + first["choices"][0]["text"] + " Then she went home."
    st, grown = completion(sv, turn, 8)
    cached = grown["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(st == 200 and n_prompt - 1 <= cached < grown["usage"]["prompt_tokens"],
          f"a grown prompt reuses the earlier one ({grown['usage']})")
    m = sv.metrics()
    check(m.get("nucleus_prefix_cache_queries_total") == 3 and m.get("nucleus_prefix_cache_hits_total") == 2,
          f"metrics count lookups and hits: {m.get('nucleus_prefix_cache_queries_total')} {m.get('nucleus_prefix_cache_hits_total')}")
    check(m.get("nucleus_prefix_cache_hit_rate", 0) > 0.4, f"hit rate {m.get('nucleus_prefix_cache_hit_rate')}")
    # reference texts for the pool test: one at a time, nothing cached in common
    # prompts under a block that grow past it while decoding: the slots' second blocks compete
    prompts = [f"{i} " + STORY * (2 + i % 2) for i in range(32)]
    reference = []
    for i, pr in enumerate(prompts):
        st, r = completion(sv, pr, 100 + i, max_tokens=100)
        reference.append(r["choices"][0]["text"] if st == 200 else None)
    check(all(t is not None for t in reference), "reference texts")
    sv.stop("roomy server")

    # ---- a pool that cannot hold the slots' work: wait, preempt, resume ----
    sv = Server(a.nucleus, a.model, "-np", "8", "-c", "512", "--kv-size", "768", "--max-queue", "32",
                "--prefill-chunk", "64")
    check(sv.url is not None, "small-pool server started")
    if sv.url is None:
        return
    results = [None] * 32

    def one(i):
        results[i] = completion(sv, prompts[i], 100 + i, max_tokens=100)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = [r[0] if r else None for r in results]
    errors = {json.dumps(r[1])[:300] for r in results if r and r[0] != 200}
    if errors:
        print("errors:", *errors, sep="\n  ")
    check(codes == [200] * 32, f"32 concurrent requests on a 3-block pool all complete: {codes}")
    same = sum(1 for i in range(32) if results[i] and results[i][0] == 200 and
               results[i][1]["choices"][0]["text"] == reference[i])
    check(same == 32, f"each request's text is its seed's ({same} of 32)")
    m = sv.metrics()
    check(m.get("nucleus_preemptions_total", 0) > 0, f"the pool was short: preemptions {m.get('nucleus_preemptions_total')}")
    check(blocks_held(sv) == 0, f"idle: no block held ({blocks_held(sv)})")

    # ---- a client leaving mid-prefill ----
    host, port = sv.url[len("http://"):].rsplit(":", 1)
    long_prompt = STORY * 6
    body = json.dumps({"prompt": long_prompt, "max_tokens": 5}).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.05)
    s.close()
    st, r = completion(sv, "Once upon a time", 1, max_tokens=8)
    check(st == 200, f"the server answers after a client left mid-prefill: {st}")
    check(blocks_held(sv) == 0, "the departed client's blocks were freed")
    sv.stop("small-pool server")

    # ---- context shift on a short pool: slots that shifted are preempted and resumed too ----
    sv = Server(a.nucleus, a.model, "-np", "4", "-c", "512", "--kv-size", "768", "--context-shift",
                "--prefill-chunk", "64")
    check(sv.url is not None, "context-shift server started")
    if sv.url is None:
        return
    shifted = [None] * 6

    def long_one(i):
        shifted[i] = completion(sv, f"{i} Once upon a time", 200 + i, max_tokens=1100, ignore_eos=True)

    threads = [threading.Thread(target=long_one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r[1]["usage"]["completion_tokens"] if r and r[0] == 200 else r for r in shifted]
    check(done == [1100] * 6, f"6 requests of 1100 tokens in 512-token slots sharing 3 blocks: {done}")
    check(all(r and r[0] == 200 and r[1]["choices"][0]["finish_reason"] == "length" for r in shifted), "finish length")
    m = sv.metrics()
    check(m.get("nucleus_preemptions_total", 0) > 0, f"shifted slots were preempted: {m.get('nucleus_preemptions_total')}")
    check(blocks_held(sv) == 0, f"idle: no block held ({blocks_held(sv)})")
    sv.stop("context-shift server")


main()
print(f"server_kv: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
