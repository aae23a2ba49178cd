"""Chat completions in OpenAI's shape (llama-cpp-python's create_chat_completion): the messages
rendered by the model's chat template in the C library (nc_chat_render), response_format and forced
tool calls turned into grammars by its JSON Schema converter, and the response or its chunks.

The reply is read as nucleus serve reads it (nc_chat_reply_parse): the reasoning of a template whose
family writes it apart goes to reasoning_content, the calls the model writes on its own (tools with
tool_choice "auto") to tool_calls, whole or streamed. Tools reach the template as its `tools`
variable; "required" or a named function constrain the reply to a call, returned as tool_calls."""

from __future__ import annotations

import codecs
import ctypes
import json
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _lib
from ._completion import count_completion, grammar_stuck
from ._generation import Generation, Step
from ._options import InvalidArgument


class ChatTemplate:
    """The model's chat template (or ChatML when it has none), or a Jinja source given instead."""

    def __init__(self, model: ctypes.c_void_p, source: Optional[str] = None) -> None:
        handle = ctypes.c_void_p()
        err = _lib.nc_err()
        if source is None:
            note = ctypes.create_string_buffer(512)
            _lib.check(_lib.lib.nc_chat_template_new(ctypes.byref(handle), model, note, len(note), ctypes.byref(err)),
                       err)
            self.note = note.value.decode("utf-8", "replace")
        else:
            src = source.encode("utf-8")
            _lib.check(_lib.lib.nc_chat_template_from_source(ctypes.byref(handle), model, src, len(src),
                                                             ctypes.byref(err)), err, InvalidArgument)
            self.note = ""
        self._handle = handle

    @property
    def source(self) -> str:
        return _lib.lib.nc_chat_template_source(self._handle).decode("utf-8", "replace")

    def render(self, messages: List[Dict[str, Any]], extra: Optional[Dict[str, Any]],
               add_generation_prompt: bool = True) -> Tuple[str, bool]:
        """The conversation as text, and whether a BOS token goes before it."""
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        add_bos = ctypes.c_bool()
        err = _lib.nc_err()
        rc = _lib.lib.nc_chat_render(self._handle, json.dumps(messages).encode("utf-8"),
                                     json.dumps(extra).encode("utf-8") if extra else None, add_generation_prompt,
                                     ctypes.byref(text), ctypes.byref(n), ctypes.byref(add_bos), ctypes.byref(err))
        _lib.check(rc, err, InvalidArgument)
        try:
            out = ctypes.string_at(text.value, n.value).decode("utf-8", "replace")
        finally:
            _lib.free(text)
        return out, add_bos.value

    @property
    def reasoning_field(self) -> Optional[str]:
        """The assistant message's field the template renders earlier reasoning from (None: the
        template writes no reasoning apart)."""
        f = _lib.lib.nc_chat_reasoning_field(self._handle)
        return f.decode("utf-8") if f else None

    def read_reply(self, text: bytes, done: bool, prompt: Optional[bytes] = None,
                   tools: Optional[List[Dict[str, Any]]] = None,
                   parallel: bool = True) -> Tuple[bytes, bytes, List[Dict[str, Any]]]:
        """The reply's reasoning, content (bytes: while streaming, prefixes of the whole's) and
        calls (OpenAI's shape; only when done), as the server reads it."""
        p = _lib.nc_reply_params(prompt=prompt, prompt_len=len(prompt) if prompt else 0,
                                 tools_json=json.dumps(tools).encode("utf-8") if tools else None,
                                 parallel_tool_calls=parallel)
        r = _lib.nc_chat_reply()
        err = _lib.nc_err()
        _lib.check(_lib.lib.nc_chat_reply_parse(self._handle, ctypes.byref(p), text, len(text), done, ctypes.byref(r),
                                                ctypes.byref(err)), err)
        try:
            calls = json.loads(ctypes.string_at(r.tool_calls).decode("utf-8")) if r.n_tool_calls else []
            return _lib.text_of(r.reasoning, r.n_reasoning), _lib.text_of(r.content, r.n_content), calls
        finally:
            _lib.lib.nc_chat_reply_free(ctypes.byref(r))

    def close(self) -> None:
        if self._handle:
            _lib.lib.nc_chat_template_free(self._handle)
            self._handle = ctypes.c_void_p()


def prepare_messages(messages: List[Dict[str, Any]], reasoning_field: Optional[str] = None) -> List[Dict[str, Any]]:
    """Messages as chat templates take them: text parts joined into the content, a call's arguments
    as a mapping (templates iterate over them) when they are a JSON object, an assistant's earlier
    reasoning_content under the field the template renders it from (gpt-oss's "thinking")."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise InvalidArgument(f"messages[{i}]: a message is an object with a role")
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind != "text":
                    raise NotImplementedError(f"messages[{i}]: content parts of type {kind!r}: nucleus reads text only")
                texts.append(part.get("text", ""))
            m["content"] = "".join(texts)
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for call in calls:
                call = dict(call)
                fn = dict(call.get("function", {}))
                if isinstance(fn.get("arguments"), str):
                    try:
                        args = json.loads(fn["arguments"])
                        if isinstance(args, dict):
                            fn["arguments"] = args
                    except ValueError:
                        pass
                call["function"] = fn
                fixed.append(call)
            m["tool_calls"] = fixed
        if reasoning_field and reasoning_field != "reasoning_content" and "reasoning_content" in m:
            m[reasoning_field] = m.pop("reasoning_content")
        out.append(m)
    return out


def schema_grammar(schema: Any) -> str:
    """A JSON Schema as GBNF, by the C library's converter."""
    gbnf = ctypes.c_void_p()
    err = _lib.nc_err()
    text = json.dumps(schema).encode("utf-8")
    _lib.check(_lib.lib.nc_json_schema_to_grammar(text, None, ctypes.byref(gbnf), ctypes.byref(err)), err,
               InvalidArgument)
    try:
        return ctypes.string_at(gbnf.value).decode("utf-8")
    finally:
        _lib.free(gbnf)


def response_format_grammar(fmt: Optional[Dict[str, Any]]) -> Optional[str]:
    """OpenAI's and llama-cpp-python's response_format: json_object (with an optional schema, as
    llama-cpp-python documents), json_schema ({"json_schema": {"schema": ...}}), or text."""
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return schema_grammar(fmt.get("schema", {"type": "object"}))
    if kind == "json_schema":
        spec = fmt.get("json_schema") or {}
        if "schema" not in spec:
            raise InvalidArgument("response_format: json_schema needs {\"json_schema\": {\"schema\": ...}}")
        return schema_grammar(spec["schema"])
    raise InvalidArgument(f"response_format: type {kind!r} is not text, json_object or json_schema")


class ToolPlan:
    """What tools and tool_choice ask: whether the template gets the tools, and the grammar of a
    forced call (one function's arguments, or any function's name and arguments)."""

    def __init__(self, tools: Optional[List[Dict[str, Any]]], tool_choice: Any) -> None:
        self.tools = tools or []
        self.forced: Optional[str] = None  # the function whose arguments the reply is
        self.required = False              # the reply is {"name", "arguments"} of any function
        self.grammar: Optional[str] = None
        choice = tool_choice if tool_choice is not None else ("auto" if self.tools else "none")
        self.auto = False                  # the calls the model writes on its own are read
        fns = {}
        for i, t in enumerate(self.tools):
            fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise InvalidArgument(f"tools[{i}]: a tool is {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
            fns[fn["name"]] = fn.get("parameters") or {"type": "object"}
        if choice == "none":
            self.tools = []
        elif choice == "auto":
            self.auto = bool(self.tools)
        elif choice == "required":
            if not fns:
                raise InvalidArgument("tool_choice: 'required' without tools")
            self.required = True
            self.grammar = schema_grammar({"anyOf": [
                {"type": "object", "properties": {"name": {"const": name}, "arguments": params},
                 "required": ["name", "arguments"]} for name, params in fns.items()]})
        elif isinstance(choice, dict) and choice.get("type") == "function":
            name = (choice.get("function") or {}).get("name")
            if name not in fns:
                raise InvalidArgument(f"tool_choice: no tool is named {name!r}")
            self.forced = name
            self.grammar = schema_grammar(fns[name])
        else:
            raise InvalidArgument(f"tool_choice: {choice!r} is not 'none', 'auto', 'required' or a named function")

    @property
    def calls(self) -> bool:
        return self.forced is not None or self.required

    def tool_calls(self, text: str) -> List[Dict[str, Any]]:
        if self.forced is not None:
            name, args = self.forced, text
        else:
            call = json.loads(text)
            name, args = call["name"], json.dumps(call["arguments"])
        return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": name, "arguments": args}}]


def chat_logprob(llama: Any, step: Step) -> Optional[Dict[str, Any]]:
    """OpenAI's chat logprobs entry of one token (None for an end of generation)."""
    if step.info is None or (step.finish == "stop" and llama.token_is_eog(step.token)):
        return None

    def entry(token: int, logprob: float) -> Dict[str, Any]:
        raw = llama._piece_bytes(token)
        return {"token": raw.decode("utf-8", "ignore"), "logprob": logprob, "bytes": list(raw)}

    e = entry(step.token, step.info.logprob)
    e["top_logprobs"] = [entry(t, lp) for t, lp in step.info.top]
    return e


def _response_id() -> str:
    return f"chatcmpl-{uuid.uuid4()}"


class Reader:
    """A reply read as it grows: what its reasoning and content grew by (whole characters), and at
    the end its calls."""

    def __init__(self, template: ChatTemplate, prompt: bytes, plan: ToolPlan) -> None:
        self.template = template
        self.prompt = prompt
        self.tools = plan.tools if plan.auto else None
        self.text = b""
        self.shown = [0, 0]
        self.decoders = [codecs.getincrementaldecoder("utf-8")("replace") for _ in range(2)]
        self.calls: List[Dict[str, Any]] = []

    def feed(self, piece: bytes, done: bool = False) -> Tuple[str, str]:
        """Add piece; the reasoning's and the content's new text."""
        self.text += piece
        reasoning, content, self.calls = self.template.read_reply(self.text, done, self.prompt, self.tools)
        out = []
        for i, whole in enumerate((reasoning, content)):
            new = whole[self.shown[i]:] if len(whole) > self.shown[i] else b""
            self.shown[i] = max(self.shown[i], len(whole))
            out.append(self.decoders[i].decode(new, final=done))
        return out[0], out[1]


def _read_whole(llama: Any, plan: ToolPlan, prompt: bytes, text: bytes) -> Tuple[str, str, List[Dict[str, Any]]]:
    reasoning, content, calls = llama.chat_template().read_reply(text, True, prompt, plan.tools if plan.auto else None)
    return reasoning.decode("utf-8", "replace"), content.decode("utf-8", "replace"), calls


def complete(llama: Any, gen: Generation, plan: ToolPlan, *, prompt: bytes, n_prompt: int, model: str,
             logprobs: bool, explain: bool) -> Dict[str, Any]:
    text = b""
    entries: List[Dict[str, Any]] = []
    records: List[Dict[str, Any]] = []
    n = 0
    last: Optional[Step] = None
    try:
        for step in gen:
            n += 1
            last = step
            text += step.text
            if logprobs:
                e = chat_logprob(llama, step)
                if e is not None:
                    entries.append(e)
            if step.explain is not None:
                records.append(step.explain)
    finally:
        gen.close()
    content = text.decode("utf-8", "replace")
    finish = last.finish if last is not None else "stop"
    if finish == "grammar":
        raise grammar_stuck(content)
    message: Dict[str, Any] = {"role": "assistant", "content": content}
    if plan.calls and finish == "stop":
        message = {"role": "assistant", "content": None, "tool_calls": plan.tool_calls(content)}
        finish = "tool_calls"
    elif not plan.calls:
        reasoning, content, calls = _read_whole(llama, plan, prompt, text)
        message = {"role": "assistant", "content": content or (None if calls else "")}
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
            if finish == "stop":
                finish = "tool_calls"
    choice: Dict[str, Any] = {"index": 0, "message": message,
                              "logprobs": {"content": entries, "refusal": None} if logprobs else None,
                              "finish_reason": finish}
    if explain:
        choice["explain"] = records
    n_gen = count_completion(n, last, llama)
    return {"id": _response_id(), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}}


def stream(llama: Any, gen: Generation, plan: ToolPlan, *, prompt: bytes, model: str, logprobs: bool,
           explain: bool) -> Iterator[Dict[str, Any]]:
    """The role first, then the reasoning and the content as they come (reasoning_content and
    content deltas; what may become a call held back; a forced function's arguments as tool_calls
    deltas; a 'required' call once whole), the calls written on their own at the end (each a head,
    then its arguments), then an empty delta with finish_reason."""
    cid, created = _response_id(), int(time.time())

    def chunk(delta: Dict[str, Any], finish: Optional[str] = None, lp=None, record=None) -> Dict[str, Any]:
        choice: Dict[str, Any] = {"index": 0, "delta": delta,
                                  "logprobs": {"content": lp, "refusal": None} if lp is not None else None,
                                  "finish_reason": finish}
        if explain:
            choice["explain"] = [record] if record is not None else []
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [choice]}

    call_id = f"call_{uuid.uuid4().hex[:24]}"
    so_far = ""
    reader = Reader(llama.chat_template(), prompt, plan)
    finish = "stop"
    try:
        if plan.forced is not None:
            yield chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": plan.forced, "arguments": ""}}]})
        else:
            yield chunk({"role": "assistant"})
        for step in gen:
            text = step.text.decode("utf-8", "replace")
            so_far += text
            lp = None
            if logprobs:
                e = chat_logprob(llama, step)
                lp = [e] if e is not None else None
            if step.finish == "grammar":
                raise grammar_stuck(so_far)
            if step.finish:
                finish = step.finish
            if not (text or lp or step.explain is not None):
                continue
            if plan.forced is not None:
                delta: Dict[str, Any] = {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
            elif plan.required:
                delta = {}
            else:
                delta = {}
                reasoning, content = reader.feed(step.text)
                if reasoning:
                    delta["reasoning_content"] = reasoning
                if content:
                    delta["content"] = content
                if not (delta or lp or step.explain is not None):
                    continue
            yield chunk(delta, None, lp, step.explain)
        if plan.required and finish == "stop":
            call = plan.tool_calls(so_far)[0]
            call["index"] = 0
            args = call["function"]["arguments"]
            call["function"] = {"name": call["function"]["name"], "arguments": ""}
            yield chunk({"tool_calls": [call]})
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]})
        if not plan.calls:
            reasoning, content = reader.feed(b"", done=True)
            if reasoning or content:
                yield chunk({k: v for k, v in (("reasoning_content", reasoning), ("content", content)) if v})
            for k, call in enumerate(reader.calls):
                fn = call["function"]
                yield chunk({"tool_calls": [{"index": k, "id": call["id"], "type": "function",
                                             "function": {"name": fn["name"], "arguments": ""}}]})
                yield chunk({"tool_calls": [{"index": k, "function": {"arguments": fn["arguments"]}}]})
            if reader.calls and finish == "stop":
                finish = "tool_calls"
        if plan.calls and finish == "stop":
            finish = "tool_calls"
        yield chunk({}, finish)
    finally:
        gen.close()
