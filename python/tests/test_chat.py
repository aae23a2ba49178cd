"""create_chat_completion on a model with a chat template (qwen2, random weights): the OpenAI shape,
streaming, response_format (json_object, its schema, json_schema), tools and tool_choice, chat
logprobs, chat_template / chat_format, and what is refused."""

import json

import pytest

from conftest import LLAMA3, QWEN2, STORIES
from nucleus import InvalidArgument, Llama, LlamaGrammar

MESSAGES = [{"role": "system", "content": "You are a helpful assistant that outputs in JSON."},
            {"role": "user", "content": "Who won the world series in 2020"}]
SCHEMA = {"type": "object", "properties": {"team_name": {"type": "string", "maxLength": 12},
                                           "year": {"type": "integer"}},
          "required": ["team_name", "year"]}
TOOLS = [{"type": "function", "function": {"name": "UserDetail", "parameters": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
    "required": ["name", "age"]}}},
    {"type": "function", "function": {"name": "Weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}]


def test_response_and_stream(qwen2):
    r = qwen2.create_chat_completion(MESSAGES, max_tokens=30, seed=4, temperature=1.2)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    choice = r["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 30
    assert r["usage"]["prompt_tokens"] == len(qwen2.tokenize(qwen2.chat_template().render(MESSAGES, None)[0],
                                                              add_bos=False, special=True))
    chunks = list(qwen2.create_chat_completion(MESSAGES, max_tokens=30, seed=4, temperature=1.2, stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {} and chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == choice["message"]["content"] and text


@pytest.mark.parametrize("fmt", [
    {"type": "json_object", "schema": SCHEMA},                        # llama-cpp-python's form
    {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA, "strict": True}},  # OpenAI's
])
def test_json_schema(qwen2, fmt):
    for seed in (1, 2):
        r = qwen2.create_chat_completion(MESSAGES, response_format=fmt, temperature=0.7, seed=seed)
        out = json.loads(r["choices"][0]["message"]["content"])
        assert set(out) == {"team_name", "year"} and isinstance(out["year"], int) and len(out["team_name"]) <= 12
        assert r["choices"][0]["finish_reason"] == "stop"


def test_json_object(stories):
    with Llama(model_path=LLAMA3, n_ctx=1024, verbose=False) as llm:
        for seed in (1, 3):
            r = llm.create_chat_completion(MESSAGES, response_format={"type": "json_object"}, temperature=1.5,
                                           seed=seed, max_tokens=400)
            assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    # stories260K has no template: ChatML, and the note says so
    assert "ChatML" in stories.chat_template().note and "<|im_start|>" in stories.chat_template().source


def test_forced_and_required_tool_calls(qwen2):
    forced = {"type": "function", "function": {"name": "UserDetail"}}
    r = qwen2.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=forced, seed=2, temperature=0.8)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["function"]["name"] == "UserDetail"
    args = json.loads(call["function"]["arguments"])
    assert set(args) == {"name", "age"} and isinstance(args["age"], int)
    # the stream: the call's name first, then its arguments
    chunks = list(qwen2.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=forced, seed=2, temperature=0.8,
                                               stream=True))
    first = chunks[0]["choices"][0]["delta"]["tool_calls"][0]
    assert first["function"] == {"name": "UserDetail", "arguments": ""}
    streamed = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                       for c in chunks[1:-1] if c["choices"][0]["delta"])
    assert streamed == call["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # required: a call of any tool, its arguments held to that tool's schema
    names = set()
    for seed in range(1, 5):
        r = qwen2.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice="required", seed=seed, temperature=1.0)
        (call,) = r["choices"][0]["message"]["tool_calls"]
        args = json.loads(call["function"]["arguments"])
        names.add(call["function"]["name"])
        if call["function"]["name"] == "Weather":
            assert args["city"] in ("Paris", "Oslo")
        else:
            assert isinstance(args["age"], int)
    assert names <= {"UserDetail", "Weather"}


def test_tools_reach_the_template():
    """A template that renders `tools` gets them; tool_choice "none" leaves them out."""
    template = ("{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
                "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:")
    with Llama(model_path=QWEN2, chat_template=template, verbose=False) as llm:
        seen = []
        for choice in (None, "auto", "none"):
            r = llm.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=1, seed=1,
                                           logprobs=True)
            seen.append(r["usage"]["prompt_tokens"])
        assert seen[0] == seen[1] > seen[2]
        assert llm.chat_template().source == template


def test_chat_logprobs(qwen2):
    r = qwen2.create_chat_completion(MESSAGES, max_tokens=6, seed=3, temperature=1.0, logprobs=True, top_logprobs=3)
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 3
        assert e["logprob"] <= 0 and bytes(e["bytes"]).decode("utf-8", "ignore") == e["token"]
    assert "".join(e["token"] for e in content) == r["choices"][0]["message"]["content"]
    assert qwen2.create_chat_completion(MESSAGES, max_tokens=2, seed=3)["choices"][0]["logprobs"] is None


def test_chatml_and_content_parts():
    with Llama(model_path=QWEN2, chat_format="chatml", verbose=False) as llm:
        assert "<|im_start|>" in llm.chat_template().source
        text, _ = llm.chat_template().render([{"role": "user", "content": "Hello there"}], None)
        assert text == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
        parts = [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}]
        r1 = llm.create_chat_completion(parts, max_tokens=5, seed=1, temperature=1.5)
        r2 = llm.create_chat_completion([{"role": "user", "content": "Hello there"}], max_tokens=5, seed=1,
                                        temperature=1.5)
        assert r1["choices"][0]["message"] == r2["choices"][0]["message"]
        assert r1["usage"] == r2["usage"]


def test_refusals(qwen2):
    with pytest.raises(NotImplementedError, match="image_url"):
        qwen2.create_chat_completion([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(NotImplementedError, match="functions"):
        qwen2.create_chat_completion(MESSAGES, functions=[{"name": "f"}])
    with pytest.raises(InvalidArgument, match="not both"):
        qwen2.create_chat_completion(MESSAGES, grammar=LlamaGrammar.from_string('root ::= "a"'),
                                     response_format={"type": "json_object"})
    with pytest.raises(ValueError, match="no tool is named"):
        qwen2.create_chat_completion(MESSAGES, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "x"}})
    with pytest.raises(ValueError, match="unsupported keyword 'uniqueItems'"):
        qwen2.create_chat_completion(MESSAGES, response_format={"type": "json_object", "schema": {
            "type": "array", "uniqueItems": True}})
    with pytest.raises(TypeError, match="'n_choices'"):
        qwen2.create_chat_completion(MESSAGES, n_choices=2)
    with pytest.raises(NotImplementedError, match="chat_format"):
        Llama(model_path=STORIES, chat_format="llama-2", verbose=False)
    with pytest.raises(ValueError, match="Jinja|template|parse|expected"):
        Llama(model_path=STORIES, chat_template="{% for %}", verbose=False)
