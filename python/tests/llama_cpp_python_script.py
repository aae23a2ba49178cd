"""A script written against llama-cpp-python's documented high-level API (its README and API
reference: completion, streaming, chat with streaming, JSON Schema mode, embeddings). With
llama-cpp-python its first line would be `from llama_cpp import Llama`; nothing else changes.

usage: python3 llama_cpp_python_script.py COMPLETION_MODEL.gguf CHAT_MODEL.gguf
"""
from nucleus import Llama

import json
import sys

completion_model, chat_model = sys.argv[1], sys.argv[2]

# Text completion: __call__ with max_tokens, stop and echo.
llm = Llama(model_path=completion_model, seed=1337, n_ctx=2048, verbose=False)
output = llm(
    "Q: Name the planets in the solar system? A: ",
    max_tokens=32,
    stop=["Q:", "\n"],
    echo=True,
)
assert output["object"] == "text_completion"
choice = output["choices"][0]
assert choice["text"].startswith("Q: Name the planets in the solar system? A: ")
assert "\n" not in choice["text"] and choice["finish_reason"] in ("stop", "length")
usage = output["usage"]
assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
print("completion:", choice["text"])

# Streaming a completion: chunks whose texts add up to the completion of the same seed.
pieces = []
for chunk in llm.create_completion("Once upon a time", max_tokens=24, seed=42, stream=True):
    pieces.append(chunk["choices"][0]["text"])
streamed = "".join(pieces)
assert streamed == llm.create_completion("Once upon a time", max_tokens=24, seed=42)["choices"][0]["text"]
print("stream:", streamed)

# Embeddings: a string, then a list of strings.
emb = Llama(model_path=completion_model, embedding=True, verbose=False)
embeddings = emb.create_embedding("Hello, world!")
assert embeddings["object"] == "list" and len(embeddings["data"]) == 1
vector = embeddings["data"][0]["embedding"]
assert len(vector) > 0 and all(isinstance(x, float) for x in vector)
embeddings = emb.create_embedding(["Hello, world!", "Goodbye, world!"])
assert [d["index"] for d in embeddings["data"]] == [0, 1]
assert embeddings["data"][0]["embedding"] != embeddings["data"][1]["embedding"]
assert emb.embed("Hello, world!") == vector
print("embeddings:", len(vector), "dimensions")

# Chat completion, streamed.
chat = Llama(model_path=chat_model, chat_format="chatml", seed=7, n_ctx=2048, verbose=False)
messages = [
    {"role": "system", "content": "You are an assistant who perfectly describes images."},
    {"role": "user", "content": "Describe this image in detail please."},
]
stream = chat.create_chat_completion(messages=messages, max_tokens=32, stream=True)
role, content, finish = None, "", None
for chunk in stream:
    delta = chunk["choices"][0]["delta"]
    role = delta.get("role", role)
    content += delta.get("content") or ""
    finish = chunk["choices"][0]["finish_reason"] or finish
assert role == "assistant" and finish in ("stop", "length")
print("chat:", repr(content))

# JSON Schema mode: response_format with a schema.
response = chat.create_chat_completion(
    messages=[
        {"role": "system", "content": "You are a helpful assistant that outputs in JSON."},
        {"role": "user", "content": "Who won the world series in 2020"},
    ],
    response_format={
        "type": "json_object",
        "schema": {
            "type": "object",
            "properties": {"team_name": {"type": "string", "maxLength": 16}},
            "required": ["team_name"],
        },
    },
    temperature=0.7,
)
answer = json.loads(response["choices"][0]["message"]["content"])
assert isinstance(answer["team_name"], str)
print("json:", answer)
print("ok")
