"""LlamaGrammar as llama-cpp-python names it: GBNF text (llama.cpp's format), checked by the C
library's parser when made, or converted from a JSON Schema by its converter. Pass it as
grammar= to create_completion / create_chat_completion."""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Union

from . import _lib
from ._chat import schema_grammar
from ._options import InvalidArgument


class LlamaGrammar:
    """A grammar the generated text must be a sentence of."""

    def __init__(self, grammar: str) -> None:
        err = _lib.nc_err()
        _lib.check(_lib.lib.nc_grammar_check(grammar.encode("utf-8"), ctypes.byref(err)), err, InvalidArgument)
        self._grammar = grammar

    @property
    def grammar(self) -> str:
        """The GBNF text."""
        return self._grammar

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """GBNF text; a grammar that does not parse raises ValueError with line:column and the problem."""
        return cls(grammar)

    @classmethod
    def from_file(cls, file: Union[str, "os.PathLike[str]"], verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Any], verbose: bool = True) -> "LlamaGrammar":
        """JSON text valid against the schema (a JSON string, or the schema as Python values); the
        keywords supported and refused: docs/structured-output.md."""
        schema = json.loads(json_schema) if isinstance(json_schema, str) else json_schema
        return cls(schema_grammar(schema))

    def __repr__(self) -> str:
        return f"LlamaGrammar({self._grammar[:60]!r}...)"

