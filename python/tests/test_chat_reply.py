"""The reply read as nucleus serve reads it (nc_chat_reply_parse): qwen2's random weights under real
templates (tests/data/templates), replies steered by a grammar into the family's reasoning and calls;
message.reasoning_content and message.tool_calls (tool_choice "auto"), whole and streamed (the
deltas add up to the whole), and reasoning given back to the template under its own field."""

import json
import os

import pytest

from conftest import QWEN2, ROOT
from nucleus import Llama, LlamaGrammar
from nucleus import _chat

MESSAGES = [{"role": "user", "content": "What is the weather in Oslo?"}]
TOOLS = [{"type": "function", "function": {"name": "Weather", "description": "The weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = '<tool_call>\n{"name": "Weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def template(name):
    with open(os.path.join(ROOT, "tests", "data", "templates", name + ".jinja")) as f:
        return f.read()


def steer(text):
    """A grammar whose one sentence is text."""
    return LlamaGrammar.from_string("root ::= " + json.dumps(text))


@pytest.fixture(scope="module")
def qwen3():
    with Llama(model_path=QWEN2, chat_template=template("Qwen-Qwen3-0.6B"), n_ctx=1024, verbose=False) as llm:
        yield llm


def chat(llm, reply, **kw):
    kw = {"max_tokens": 200, "seed": 1, **kw}
    whole = llm.create_chat_completion(MESSAGES, grammar=steer(reply), **kw)
    chunks = list(llm.create_chat_completion(MESSAGES, grammar=steer(reply), stream=True, **kw))
    return whole["choices"][0], chunks


def joined(chunks, key):
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks)


def test_reasoning_and_answer(qwen3):
    assert qwen3.chat_template().reasoning_field == "reasoning_content"
    choice, chunks = chat(qwen3, "<think>\nTwo and two make four.\n</think>\n\nIt is cold.")
    m = choice["message"]
    assert m["reasoning_content"] == "Two and two make four." and m["content"] == "It is cold."
    assert "tool_calls" not in m and choice["finish_reason"] == "stop"
    assert joined(chunks, "reasoning_content") == m["reasoning_content"]
    assert joined(chunks, "content") == m["content"]
    # streamed as it comes: the reasoning over several chunks, before the content
    kinds = [k for c in chunks for k in c["choices"][0]["delta"] if k in ("reasoning_content", "content")]
    assert kinds.count("reasoning_content") > 1 and kinds.index("content") > max(
        i for i, k in enumerate(kinds) if k == "reasoning_content")


def test_cut_reasoning(qwen3):
    choice, chunks = chat(qwen3, "<think>\nTwo and two make four and then", max_tokens=20)
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""
    assert "Two and two make four and then".startswith(choice["message"]["reasoning_content"])
    assert len(choice["message"]["reasoning_content"]) > 5
    assert joined(chunks, "reasoning_content") == choice["message"]["reasoning_content"]


def test_auto_tool_call(qwen3):
    choice, chunks = chat(qwen3, "<think>\nAsk the tool.\n</think>\n\n" + CALL, tools=TOOLS, tool_choice="auto")
    m = choice["message"]
    assert m["reasoning_content"] == "Ask the tool." and m["content"] is None
    (call,) = m["tool_calls"]
    assert call["id"].startswith("call_") and len(call["id"]) == 29 and call["type"] == "function"
    assert call["function"]["name"] == "Weather" and json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert choice["finish_reason"] == "tool_calls"
    # streamed: the reasoning, no content, then the call's head and its arguments
    assert joined(chunks, "reasoning_content") == "Ask the tool." and joined(chunks, "content") == ""
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert len(calls) == 2 and calls[0]["index"] == calls[1]["index"] == 0
    assert calls[0]["id"].startswith("call_") and calls[0]["function"] == {"name": "Weather", "arguments": ""}
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Oslo"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_text_then_call_and_no_tools(qwen3):
    choice, chunks = chat(qwen3, "Let me look.\n" + CALL, tools=TOOLS)  # tool_choice defaults to "auto"
    assert choice["message"]["content"] == "Let me look." and len(choice["message"]["tool_calls"]) == 1
    assert joined(chunks, "content") == "Let me look."
    # without tools no call is read: the text is the content
    choice, _ = chat(qwen3, CALL)
    assert choice["message"]["content"] == CALL and "tool_calls" not in choice["message"]
    choice, _ = chat(qwen3, CALL, tools=TOOLS, tool_choice="none")
    assert choice["message"]["content"] == CALL and "tool_calls" not in choice["message"]


def test_harmony():
    with Llama(model_path=QWEN2, chat_template=template("openai-gpt-oss-120b"), n_ctx=2048, verbose=False) as llm:
        assert llm.chat_template().reasoning_field == "thinking"
        reply = ("<|channel|>analysis<|message|>Oslo is cold.<|end|><|start|>assistant<|channel|>commentary "
                 'to=functions.Weather <|constrain|>json<|message|>{"city": "Oslo"}')
        choice, chunks = chat(llm, reply, tools=TOOLS)
        m = choice["message"]
        assert m["reasoning_content"] == "Oslo is cold." and m["tool_calls"][0]["function"]["name"] == "Weather"
        assert joined(chunks, "reasoning_content") == "Oslo is cold."
        # reasoning given back goes under the template's field
        back = MESSAGES + [{"role": "assistant", "content": "", "reasoning_content": "Oslo is cold.",
                            "tool_calls": [{"id": "call_1", "type": "function",
                                            "function": {"name": "Weather", "arguments": '{"city": "Oslo"}'}}]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"}]
        prepared = _chat.prepare_messages(back, llm.chat_template().reasoning_field)
        assert prepared[1]["thinking"] == "Oslo is cold." and "reasoning_content" not in prepared[1]
        text, _ = llm.chat_template().render(prepared, {"tools": TOOLS})
        assert "Oslo is cold." in text


def test_no_reasoning_template(qwen2):
    """A template without reasoning markers: <think> is content, as written."""
    if qwen2.chat_template().reasoning_field is not None:
        pytest.skip("qwen2's own template separates reasoning")
    choice, _ = chat(qwen2, "<think>a</think>b")
    assert choice["message"]["content"] == "<think>a</think>b" and "reasoning_content" not in choice["message"]
