#!/usr/bin/python3
"""llama.cpp's own deviation from golden records (shared/golden, shared/quants, shared/archs), for
the README's correctness tables: for every record, llama-server decodes greedily from prompt_ids
with n_probs, and over the steps where its path equals the exact one, the largest difference of
the listed log-probabilities from the reference is its deviation (the measure shared/golden's
llama_cpp field and shared/quants/README.md use).

  bench/llamacpp_deviation.py --server PATH/llama-server [--threads 2] RECORDS.jsonl...

llama.cpp is a peer built with shared/tools/build-llamacpp (never part of this repository).
Prints one line per file: name, largest deviation, steps compared.
"""
import argparse, json, os, socket, subprocess, sys, time, urllib.error, urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stream(port, body):
    """The completion_probabilities of a streamed /completion, in order (streaming also avoids
    the server's output parsers, which refuse gpt-oss text that is not in its chat format)."""
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port, data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    probs = []
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                if line.startswith(b"data: "):
                    probs += json.loads(line[6:]).get("completion_probabilities", [])
    except urllib.error.HTTPError as e:
        raise RuntimeError("llama-server /completion: %s" % e.read().decode("utf-8", "replace")[:500])
    return probs


def deviation(port, rec):
    n = len(rec["ids"])
    body = {"prompt": rec["prompt_ids"], "n_predict": n, "temperature": 0, "n_probs": 10, "cache_prompt": False,
            "samplers": ["top_k"], "top_k": 1}
    while True:  # the server refuses to return text that is not valid UTF-8: fewer steps then
        try:
            probs = stream(port, body)
            break
        except RuntimeError:
            if body["n_predict"] == 1: raise
            body["n_predict"] //= 2
    worst, steps = 0.0, 0
    for k, (ref, step) in enumerate(zip(rec["top_logprobs"], probs)):
        theirs = dict((t["id"], t["logprob"]) for t in step.get("top_logprobs", []))
        for tok, lp in ref:
            if tok in theirs: worst = max(worst, abs(theirs[tok] - lp))
        steps += 1
        if step.get("id") != rec["ids"][k]: break  # its path parts from the exact one after this step
    return worst, steps


def start(a, model):
    """llama-server on a free loopback port; its output parsers off where the build has the flags
    (a build without them refuses to start, and starts again without)."""
    for extra in (["--reasoning-format", "none", "--no-jinja", "--chat-template", "chatml"], []):
        port = free_port()
        srv = subprocess.Popen([a.server, "-m", model, "--port", str(port), "--host", "127.0.0.1", "-t", a.threads,
                                "-c", "4096", "-np", "1"] + extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if srv.poll() is not None: break
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1)
                return srv, port
            except Exception:
                time.sleep(0.1)
        srv.kill()
        srv.wait()
    sys.exit("%s did not start on %s" % (a.server, model))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    ap.add_argument("records", nargs="+")
    a = ap.parse_args()
    for path in a.records:
        recs = [json.loads(l) for l in open(path)]
        model = os.path.join(a.shared, recs[0]["file"]) if "file" in recs[0] else None
        if not model:
            print("%s: no file field (synthetic model): skipped" % path)
            continue
        srv, port = start(a, model)
        try:
            worst, steps, skipped = 0.0, 0, 0
            for rec in recs:
                try:
                    w, s = deviation(port, rec)
                except RuntimeError:  # nothing it generates there is valid UTF-8
                    skipped += 1
                    continue
                worst, steps = max(worst, w), steps + s
            print("%s\t%.4f\t%d steps%s" % (os.path.relpath(path, a.shared), worst, steps,
                                            ", %d records the server refused" % skipped if skipped else ""))
            sys.stdout.flush()
        finally:
            srv.terminate()
            srv.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
