"""Shared fixtures: the checkout's package (python/nucleus, which finds the checkout's
build/rel/libnucleus.so), the shared models (../shared, or $SHARED), and the CLI (build/nucleus)
that results are compared with."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

SHARED = os.environ.get("SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
STORIES = os.path.join(SHARED, "models", "stories260K", "stories260K.gguf")
QWEN2 = os.path.join(SHARED, "archs", "qwen2", "qwen2-f16.gguf")  # random weights, a chat template
LLAMA3 = os.path.join(SHARED, "archs", "llama3", "llama3-f16.gguf")
CLI = os.path.join(ROOT, "build", "nucleus")


def pytest_configure(config):
    for path in (STORIES, QWEN2):
        if not os.path.exists(path):
            raise pytest.UsageError(f"{path} is missing: the tests read the shared models (set SHARED)")


@pytest.fixture(scope="session")
def stories():
    """A Llama on stories260K for tests that leave it as they found it."""
    from nucleus import Llama

    llm = Llama(model_path=STORIES, n_ctx=512, seed=11, verbose=False)
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def qwen2():
    from nucleus import Llama

    llm = Llama(model_path=QWEN2, n_ctx=1024, seed=11, verbose=False)
    yield llm
    llm.close()


def run_cli(*args, check=True):
    """build/nucleus run ...: its text (stdout) and its --explain=json records (stderr)."""
    if not os.path.exists(CLI):
        pytest.fail(f"{CLI} is missing: make")
    p = subprocess.run([CLI, "run", *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        pytest.fail(f"nucleus run {' '.join(args)}: {p.stderr}")
    records = [json.loads(line) for line in p.stderr.splitlines() if line.startswith("{")]
    return p, records
