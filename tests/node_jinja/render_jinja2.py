"""Render chat-template requests (the JSON lines of tests/tools/render_template --jsonl) with Python
Jinja2 set up the way transformers' apply_chat_template sets it up: an ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and loop controls, tojson as json.dumps(ensure_ascii=False), and
the raise_exception and strftime_now globals. Answers one JSON line per request on stdout."""
import json
import sys
from datetime import datetime

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now


def render(req):
    template = env.from_string(req["template"])
    if "messages" not in req:
        return template.render(**(req.get("context") or {}))
    ctx = {"messages": req["messages"], "add_generation_prompt": bool(req.get("add_generation_prompt")),
           "tools": None, "documents": None}
    for token in ("bos_token", "eos_token"):
        if req.get(token) is not None:
            ctx[token] = req[token]
    ctx.update(req.get("extra") or {})
    return template.render(**ctx)


for line in sys.stdin:
    if not line.strip():
        continue
    try:
        answer = {"ok": True, "output": render(json.loads(line))}
    except Exception as e:  # every failure is an answer: the comparison is error against error
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer))
