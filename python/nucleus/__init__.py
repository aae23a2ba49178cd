"""nucleus for Python: llama-cpp-python's API over the nucleus C library (libnucleus.so).

    from nucleus import Llama
    llm = Llama(model_path="model.gguf")
    print(llm("Once upon a time", max_tokens=32)["choices"][0]["text"])

docs/python.md describes the package: what it supports, what it refuses, and how it finds the library.
"""

from ._generation import GenerationStats
from ._hub import HubError
from ._lib import NucleusError
from ._options import LLAMA_DEFAULT_SEED, InvalidArgument
from .llama import (
    GGML_TYPE_F16,
    GGML_TYPE_F32,
    GGML_TYPE_Q4_0,
    GGML_TYPE_Q8_0,
    LLAMA_POOLING_TYPE_CLS,
    LLAMA_POOLING_TYPE_LAST,
    LLAMA_POOLING_TYPE_MEAN,
    LLAMA_POOLING_TYPE_NONE,
    LLAMA_POOLING_TYPE_RANK,
    LLAMA_POOLING_TYPE_UNSPECIFIED,
    Llama,
    LlamaState,
    LoadError,
)
from .llama_grammar import LlamaGrammar
from .llama_speculative import DraftModel, LlamaDraftModel, LlamaPromptLookupDecoding

__version__ = "0.1.0"

__all__ = [
    "Llama", "LlamaGrammar", "LlamaState", "LlamaDraftModel", "LlamaPromptLookupDecoding", "DraftModel",
    "GenerationStats", "NucleusError", "InvalidArgument", "LoadError", "HubError", "LLAMA_DEFAULT_SEED",
    "LLAMA_POOLING_TYPE_UNSPECIFIED", "LLAMA_POOLING_TYPE_NONE", "LLAMA_POOLING_TYPE_MEAN",
    "LLAMA_POOLING_TYPE_CLS", "LLAMA_POOLING_TYPE_LAST", "LLAMA_POOLING_TYPE_RANK", "GGML_TYPE_F32",
    "GGML_TYPE_F16", "GGML_TYPE_Q4_0", "GGML_TYPE_Q8_0", "__version__",
]
