"""examples/python/ run as their docstrings say."""

import os
import subprocess
import sys

from conftest import QWEN2, ROOT, STORIES, run_cli

EXAMPLES = os.path.join(ROOT, "examples", "python")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))


def test_complete(stories):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "complete.py"), STORIES, "Once upon a time", "20", "5"],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr
    cli, _ = run_cli("-m", STORIES, "-p", "Once upon a time", "-n", "20", "--seed", "5")
    assert p.stdout == cli.stdout  # the prompt, then the same text for the same seed
    assert "20 tokens in" in p.stderr and "stop: length" in p.stderr


def test_chat():
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "chat.py"), QWEN2, "Be brief."],
                       input="Hello\nAnd then?\n", capture_output=True, text=True, env=ENV, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("> ") == 3  # two turns, then the end of input
    usage = subprocess.run([sys.executable, os.path.join(EXAMPLES, "chat.py")], capture_output=True, text=True,
                           env=ENV)
    assert usage.returncode == 2 and "usage" not in usage.stdout and "chat.py MODEL.gguf" in usage.stderr
