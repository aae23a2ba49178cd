"""embed / create_embedding: the mean-pooled vectors, normalized, are nucleus serve's
/v1/embeddings vectors; the other pooling types and the response's shape."""

import json
import math
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import CLI, STORIES
from nucleus import (LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_NONE,
                     LLAMA_POOLING_TYPE_RANK, Llama)

TEXTS = ["Hello, world!", "Once upon a time there was a dog."]


@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([CLI, "serve", "-m", STORIES, "--host", "127.0.0.1", "--port", "0", "--parallel", "1",
                          "-c", "512", "-t", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = None
    deadline = time.time() + 30
    while time.time() < deadline and url is None:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        url = m.group(1) if m else None
    if url is None:
        p.kill()
        pytest.fail("nucleus serve did not start")
    yield url
    p.terminate()
    p.wait(timeout=30)


def test_normalized_mean_is_the_servers(stories, server):
    req = urllib.request.Request(server + "/v1/embeddings", data=json.dumps({"input": TEXTS}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        theirs = json.load(r)
    mine = stories.embed(TEXTS, normalize=True)
    for a, b in zip(mine, (d["embedding"] for d in theirs["data"])):
        assert len(a) == len(b) == 64
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-6
    resp = stories.create_embedding(TEXTS)
    assert resp["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]


def test_pooling(stories):
    one = stories.embed(TEXTS[1])
    assert len(one) == 64 and isinstance(one[0], float)
    unit = stories.embed(TEXTS[1], normalize=True)
    assert math.sqrt(sum(x * x for x in unit)) == pytest.approx(1.0, abs=1e-9)
    scale = math.sqrt(sum(x * x for x in one))
    assert all(u == pytest.approx(x / scale, abs=1e-9) for u, x in zip(unit, one))  # the mean's direction
    n = len(stories.tokenize(TEXTS[1], special=True))
    with Llama(model_path=STORIES, pooling_type=LLAMA_POOLING_TYPE_NONE, verbose=False) as none, \
            Llama(model_path=STORIES, pooling_type=LLAMA_POOLING_TYPE_CLS, verbose=False) as cls, \
            Llama(model_path=STORIES, pooling_type=LLAMA_POOLING_TYPE_LAST, verbose=False) as last:
        rows = none.embed(TEXTS[1])
        assert len(rows) == n and all(len(r) == 64 for r in rows)
        assert [sum(c) / n for c in zip(*rows)] == pytest.approx(one, abs=1e-6)
        assert cls.embed(TEXTS[1]) == rows[0] and last.embed(TEXTS[1]) == rows[-1]
        assert none.create_embedding(TEXTS[1])["data"][0]["embedding"] == rows
    with pytest.raises(NotImplementedError, match="pooling_type"):
        Llama(model_path=STORIES, pooling_type=LLAMA_POOLING_TYPE_RANK, verbose=False)


def test_create_embedding_shape(stories):
    r = stories.create_embedding(TEXTS, model="m")
    assert r["object"] == "list" and r["model"] == "m"
    assert [d["index"] for d in r["data"]] == [0, 1] and all(d["object"] == "embedding" for d in r["data"])
    assert r["data"][0]["embedding"] == stories.embed(TEXTS[0])
    n = sum(len(stories.tokenize(t, special=True)) for t in TEXTS)
    assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}
    long = "word " * 700
    assert len(stories.embed(long)) == 64  # cut to the context
    with pytest.raises(ValueError, match="more than the context"):
        stories.embed(long, truncate=False)
    assert stories.kv_cache_stats()["used"] == 0
