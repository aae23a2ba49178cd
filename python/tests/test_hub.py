"""Llama(hf_repo=..., hf_file=...) and Llama.from_pretrained(repo_id, filename) through the C
library's hub functions (nc_hub_get), against the stand-in hub of tests/e2e/hub.sh
(tests/e2e/hub_server.py, HF_ENDPOINT pointing at it): a quant by pattern, by path and by default,
the cache reused, the errors."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, STORIES
from nucleus import HubError, Llama

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    repo = root / "test" / "tiny-GGUF"
    repo.mkdir(parents=True)
    for name in ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"):
        shutil.copy(STORIES, repo / name)
    (repo / "README.md").write_text("# tiny\n")
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "e2e", "hub_server.py"), str(root)],
                              stdout=subprocess.PIPE, text=True)
    port = server.stdout.readline().strip()
    yield f"http://127.0.0.1:{port}", root
    server.terminate()
    server.wait()


@pytest.fixture
def endpoint(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", hub[0])
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return str(tmp_path / "cache")


def text_of(llm):
    return llm(PROMPT, max_tokens=12, temperature=0, seed=1)["choices"][0]["text"]


def test_from_pretrained(endpoint, stories):
    want = text_of(stories)
    with Llama.from_pretrained("test/tiny-GGUF", "*Q8_0.gguf", cache_dir=endpoint, n_ctx=256, verbose=False) as llm:
        assert llm.model_path == os.path.join(endpoint, "test", "tiny-GGUF", "tiny-Q8_0.gguf")
        assert text_of(llm) == want
    with Llama(hf_repo="test/tiny-GGUF", hf_file="tiny-Q4_K_M.gguf", cache_dir=endpoint, n_ctx=256,
               verbose=False) as llm:
        assert llm.model_path.endswith("tiny-Q4_K_M.gguf") and text_of(llm) == want
    with Llama.from_pretrained("test/tiny-GGUF", cache_dir=endpoint, n_ctx=256, verbose=False) as llm:
        assert llm.model_path.endswith("tiny-Q4_K_M.gguf")  # the default quant
    with Llama(hf_repo="test/tiny-GGUF", filename="Q8_0", cache_dir=endpoint, n_ctx=256, verbose=False) as llm:
        assert llm.model_path.endswith("tiny-Q8_0.gguf")


def test_cache_reused(hub, endpoint):
    def downloads():
        log = hub[1] / "requests.log"
        return sum("/cdn/test/tiny-GGUF/tiny-Q8_0.gguf" in line for line in log.read_text().splitlines())

    with Llama.from_pretrained("test/tiny-GGUF", "*Q8_0.gguf", cache_dir=endpoint, verbose=False) as llm:
        path = llm.model_path
    before = downloads()
    with Llama.from_pretrained("test/tiny-GGUF", "*Q8_0.gguf", cache_dir=endpoint, verbose=False) as llm:
        assert llm.model_path == path
    assert downloads() == before >= 1


def test_errors(endpoint):
    with pytest.raises(HubError, match="test/nothing"):
        Llama.from_pretrained("test/nothing", "*Q8_0.gguf", cache_dir=endpoint, verbose=False)
    with pytest.raises(HubError, match="IQ1_S"):
        Llama.from_pretrained("test/tiny-GGUF", "*IQ1_S.gguf", cache_dir=endpoint, verbose=False)
    with pytest.raises(ValueError, match="USER/REPO"):
        Llama.from_pretrained("tiny-GGUF", cache_dir=endpoint, verbose=False)
    with pytest.raises(ValueError, match="hf_repo too"):
        Llama(hf_file="tiny-Q8_0.gguf", verbose=False)
    with pytest.raises(NotImplementedError, match="additional_files"):
        Llama.from_pretrained("test/tiny-GGUF", "*Q8_0.gguf", additional_files=["x.gguf"])
    with pytest.raises(NotImplementedError, match="local_dir"):
        Llama.from_pretrained("test/tiny-GGUF", "*Q8_0.gguf", local_dir="/tmp/x")
    with pytest.raises(TypeError, match="model_path"):
        Llama(verbose=False)
