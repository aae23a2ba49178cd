"""Text completions in OpenAI's shape (llama-cpp-python's create_completion): the whole response,
or a stream of chunks, from the Steps of one generation."""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

from ._generation import Generation, Step
from ._lib import NucleusError


def grammar_stuck(text: str) -> NucleusError:
    return NucleusError("the grammar could not go on: no token of the model's vocabulary continues it, so the "
                        f"text is not a complete sentence of it (the text so far: {text[:200]!r})")


class LogprobsBuilder:
    """The legacy completions' logprobs object: tokens, text_offset, token_logprobs, top_logprobs
    (the drawn token's own log-probability added to its step's alternatives, as llama-cpp-python)."""

    def __init__(self, llama: Any, offset: int) -> None:
        self.llama = llama
        self.offset = offset
        self.tokens: List[str] = []
        self.text_offset: List[int] = []
        self.token_logprobs: List[Optional[float]] = []
        self.top_logprobs: List[Optional[Dict[str, float]]] = []

    def add(self, step: Step) -> Optional[Dict[str, Any]]:
        """Record a step; returns its part alone (for a stream chunk), None for a step without text
        of its own (an end of generation)."""
        if step.info is None or (step.finish == "stop" and self.llama.token_is_eog(step.token)):
            return None
        piece = self.llama._piece(step.token)
        top = {self.llama._piece(t): lp for t, lp in step.info.top}
        top[piece] = step.info.logprob
        part = {"tokens": [piece], "text_offset": [self.offset], "token_logprobs": [step.info.logprob],
                "top_logprobs": [top]}
        self.tokens.append(piece)
        self.text_offset.append(self.offset)
        self.token_logprobs.append(step.info.logprob)
        self.top_logprobs.append(top)
        self.offset += len(piece)
        return part

    def result(self) -> Dict[str, Any]:
        return {"tokens": self.tokens, "text_offset": self.text_offset, "token_logprobs": self.token_logprobs,
                "top_logprobs": self.top_logprobs}


def count_completion(steps: int, last: Optional[Step], llama: Any) -> int:
    """Tokens generated, an end-of-generation token that ended the text not counted."""
    if last is not None and last.finish == "stop" and llama.token_is_eog(last.token):
        return steps - 1
    return steps


def complete(llama: Any, gen: Generation, *, prompt_text: str, n_prompt: int, echo: bool, model: str,
             logprobs: bool, explain: bool) -> Dict[str, Any]:
    text = b""
    lp = LogprobsBuilder(llama, len(prompt_text) if echo else 0) if logprobs else None
    records: List[Dict[str, Any]] = []
    n = 0
    last: Optional[Step] = None
    try:
        for step in gen:
            n += 1
            last = step
            text += step.text
            if lp is not None:
                lp.add(step)
            if step.explain is not None:
                records.append(step.explain)
    finally:
        gen.close()
    out = text.decode("utf-8", "replace")
    if last is not None and last.finish == "grammar":
        raise grammar_stuck(out)
    choice: Dict[str, Any] = {"text": prompt_text + out if echo else out, "index": 0,
                              "logprobs": lp.result() if lp is not None else None,
                              "finish_reason": last.finish if last is not None else "stop"}
    if explain:
        choice["explain"] = records
    n_gen = count_completion(n, last, llama)
    return {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}}


def stream(llama: Any, gen: Generation, *, prompt_text: str, echo: bool, model: str, logprobs: bool,
           explain: bool) -> Iterator[Dict[str, Any]]:
    """Chunks: the prompt first when echoed, then one per token that adds text (or log-probabilities,
    or an explain record), the last with finish_reason. Closing the iterator early frees the
    generation."""
    cid, created = f"cmpl-{uuid.uuid4()}", int(time.time())

    def chunk(text: str, lp_part: Optional[Dict[str, Any]], finish: Optional[str], record=None) -> Dict[str, Any]:
        choice: Dict[str, Any] = {"text": text, "index": 0, "logprobs": lp_part, "finish_reason": finish}
        if explain:
            choice["explain"] = [record] if record is not None else []
        return {"id": cid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}

    lp = LogprobsBuilder(llama, len(prompt_text) if echo else 0) if logprobs else None
    so_far = ""
    try:
        if echo:
            yield chunk(prompt_text, None, None)
        for step in gen:
            text = step.text.decode("utf-8", "replace")
            so_far += text
            part = lp.add(step) if lp is not None else None
            if step.finish == "grammar":
                raise grammar_stuck(so_far)
            if text or part is not None or step.explain is not None or step.finish:
                yield chunk(text, part, step.finish or None, step.explain)
    finally:
        gen.close()
