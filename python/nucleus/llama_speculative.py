"""Speculative decoding's proposers, passed as Llama(draft_model=...): prompt lookup under
llama-cpp-python's name, and a draft model (nucleus's own). Either way the model checks the guesses
in one forward pass and the tokens are those it would have drawn without them (docs/speculative.md);
Llama.last_stats says how many were drafted and accepted."""

from __future__ import annotations

import os
from typing import Union


class LlamaDraftModel:
    """What a proposer is (llama-cpp-python's base class); nucleus runs its proposers in C."""


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the last n tokens
    (n = max_ngram_size down to 1) in the prompt and what was generated, up to num_pred_tokens of
    them per step (fixed: always that many; else the number adapts to how many were accepted)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10, fixed: bool = False) -> None:
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be at least 1")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens
        self.fixed = fixed


class DraftModel(LlamaDraftModel):
    """A smaller model of the same vocabulary that guesses the next tokens: up to draft_max of them
    per step (adapting to the acceptance unless fixed), none when fewer than draft_min would be."""

    def __init__(self, model_path: Union[str, "os.PathLike[str]"], draft_max: int = 16, draft_min: int = 0,
                 fixed: bool = False) -> None:
        self.model_path = os.fspath(model_path)
        self.draft_max = draft_max
        self.draft_min = draft_min
        self.fixed = fixed
