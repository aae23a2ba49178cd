#!/usr/bin/env python3
"""llama.cpp's prefill and decode at a depth, for a llama.cpp whose llama-bench has no -d (b4748).

    python3 bench/llamacpp_depth.py LLAMA_SERVER MODEL -d 4096 -p 512 -n 128 -t 2 -r 3 [--fa]
    -> one JSON line: {"pp": {"mean", "sd"}, "tg": {"mean", "sd"}} in tokens/s

It starts that build's llama-server (one slot, context depth + p + n) and reads its own timings,
which count llama.cpp's compute only (no HTTP). The slot first prefills `depth` random tokens
(not timed), which its cache then keeps; per repetition, that prompt again (taken from the cache)
with `n` tokens decoded, the end of text ignored, gives tg (decode at depth..depth+n), and that
prompt followed by `p` more random tokens gives pp (prefill of p tokens at depth). A warm-up round
comes first, as llama-bench's.
"""
import argparse, json, os, random, signal, socket, statistics, subprocess, sys, time, urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())["timings"]


def wait_ready(port, proc):
    while proc.poll() is None:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("llama-server exited with status %d" % proc.returncode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model")
    for flag, default in (("-d", 4096), ("-p", 512), ("-n", 128), ("-t", 2), ("-r", 3)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--fa", action="store_true")
    a = ap.parse_args()
    port = free_port()
    cmd = [a.server, "-m", a.model, "--port", str(port), "-c", str(a.d + a.p + a.n + 8), "-np", "1",
           "-t", str(a.t), "-tb", str(a.t), "-ngl", "0"] + (["-fa"] if a.fa else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ready(port, proc)
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=60) as r:
            n_vocab = json.loads(r.read())["data"][0]["meta"]["n_vocab"]
        rng = random.Random(1)
        rand_tokens = lambda n: [rng.randrange(1, n_vocab) for _ in range(n)]
        depth = rand_tokens(a.d)
        post(port, {"prompt": depth, "n_predict": 1, "cache_prompt": True, "temperature": 0})
        pp, tg = [], []
        for r in range(a.r + 1):  # r = 0 is the warm-up
            t = post(port, {"prompt": depth, "n_predict": a.n, "ignore_eos": True, "cache_prompt": True,
                            "temperature": 0})
            more = rand_tokens(a.p)
            t2 = post(port, {"prompt": depth + more, "n_predict": 1, "cache_prompt": True, "temperature": 0})
            if t["prompt_n"] > 1 or t2["prompt_n"] != a.p or t["predicted_n"] != a.n:
                sys.exit("the slot's cache was not reused: %d then %d prompt tokens computed, %d decoded"
                         % (t["prompt_n"], t2["prompt_n"], t["predicted_n"]))
            if r > 0:
                tg.append(t["predicted_per_second"])
                pp.append(t2["prompt_per_second"])
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
        print(json.dumps({"pp": {"mean": statistics.mean(pp), "sd": sd(pp)},
                          "tg": {"mean": statistics.mean(tg), "sd": sd(tg)}}))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


main()
