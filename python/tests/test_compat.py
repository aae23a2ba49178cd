"""A script written against llama-cpp-python's documented API (completion, streaming, chat with
streaming, JSON Schema mode, embeddings) runs unchanged but for its import line, and the package's
version is the library's."""

import os
import re
import subprocess
import sys

from conftest import QWEN2, ROOT, STORIES

SCRIPT = os.path.join(os.path.dirname(__file__), "llama_cpp_python_script.py")


def test_llama_cpp_python_script_runs(tmp_path):
    with open(SCRIPT) as f:
        text = f.read()
    assert text.count("nucleus") == 1 and "from nucleus import Llama\n" in text  # the only change
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, SCRIPT, STORIES, QWEN2], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "ok"


def test_versions_agree():
    import nucleus
    with open(os.path.join(ROOT, "Makefile")) as f:
        make = re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M).group(1)
    with open(os.path.join(ROOT, "python", "pyproject.toml")) as f:
        py = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert nucleus.__version__ == make == py
