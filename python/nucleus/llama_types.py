"""The shapes of requests and responses, as TypedDicts (OpenAI's, as llama-cpp-python names them).
For type checkers and readers: at run time they are plain dicts."""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union


class CompletionLogprobs(TypedDict):
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    tokens: List[str]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict, total=False):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length"]]
    explain: List[Dict[str, Any]]  # nucleus: explain=True


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CreateCompletionResponse(TypedDict, total=False):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: CompletionUsage


class ChatCompletionRequestMessage(TypedDict, total=False):
    role: Literal["system", "user", "assistant", "tool"]
    content: Optional[Union[str, List[Dict[str, Any]]]]
    tool_calls: List[Dict[str, Any]]
    tool_call_id: str
    name: str


class ChatCompletionResponseMessage(TypedDict, total=False):
    role: Literal["assistant"]
    content: Optional[str]
    tool_calls: List[Dict[str, Any]]


class ChatCompletionChoice(TypedDict, total=False):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[Dict[str, Any]]
    finish_reason: Optional[Literal["stop", "length", "tool_calls"]]
    explain: List[Dict[str, Any]]


class CreateChatCompletionResponse(TypedDict, total=False):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionChoice]
    usage: CompletionUsage


class ChatCompletionStreamChoice(TypedDict, total=False):
    index: int
    delta: Dict[str, Any]
    logprobs: Optional[Dict[str, Any]]
    finish_reason: Optional[Literal["stop", "length", "tool_calls"]]


class CreateChatCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatCompletionStreamChoice]


class Embedding(TypedDict):
    object: Literal["embedding"]
    embedding: Union[List[float], List[List[float]]]
    index: int


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: List[Embedding]
    usage: Dict[str, int]


class ResponseFormat(TypedDict, total=False):
    type: Literal["text", "json_object", "json_schema"]
    schema: Dict[str, Any]       # llama-cpp-python's json_object with a schema
    json_schema: Dict[str, Any]  # OpenAI's {"name", "schema", "strict"}
