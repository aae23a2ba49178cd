"""The Llama class: llama-cpp-python's high-level API over the nucleus C library (nucleus.h).

Loading, tokens, the evaluation state (eval, scores, sample, save_state / load_state), embeddings
and beam search live here; completions and chats are built in _completion.py and _chat.py from a
generation pulled token by token (_generation.py), with the arguments mapped by _options.py.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile
import threading
import weakref
from array import array
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Union

from . import _chat, _completion, _hub, _lib
from ._generation import Generation, GenerationStats
from ._lib import NucleusError
from ._options import LLAMA_DEFAULT_SEED, InvalidArgument, Request, refuse, sampling, seed_source
from .llama_grammar import LlamaGrammar
from .llama_speculative import DraftModel, LlamaDraftModel, LlamaPromptLookupDecoding
from .llama_types import CreateChatCompletionResponse, CreateCompletionResponse, CreateEmbeddingResponse

# llama-cpp-python's pooling types (Llama(pooling_type=...)).
LLAMA_POOLING_TYPE_UNSPECIFIED = -1
LLAMA_POOLING_TYPE_NONE = 0
LLAMA_POOLING_TYPE_MEAN = 1
LLAMA_POOLING_TYPE_CLS = 2
LLAMA_POOLING_TYPE_LAST = 3
LLAMA_POOLING_TYPE_RANK = 4

# GGML's type ids, as llama-cpp-python's type_k / type_v take them: the KV cache types of nucleus.
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_Q4_0 = 2
GGML_TYPE_Q8_0 = 8
_CACHE_TYPES = {
    GGML_TYPE_F32: _lib.NC_CACHE_F32, GGML_TYPE_F16: _lib.NC_CACHE_F16, GGML_TYPE_Q4_0: _lib.NC_CACHE_Q4_0,
    GGML_TYPE_Q8_0: _lib.NC_CACHE_Q8_0, "f32": _lib.NC_CACHE_F32, "f16": _lib.NC_CACHE_F16,
    "q4_0": _lib.NC_CACHE_Q4_0, "q8_0": _lib.NC_CACHE_Q8_0,
}

# Embedding inputs run in chunks of this many tokens: each asks for its hidden state, and so for
# its logits, which bounds the logits buffer.
_EMBED_CHUNK = 64

# ChatML, for chat_format="chatml" (models without a template get it anyway).
_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
           "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# llama-cpp-python's constructor arguments nucleus has no counterpart for: their neutral values
# (accepted) and why another value is refused.
_UNSUPPORTED_INIT = {
    "split_mode": ((0, 1), "nucleus runs on one GPU (n_gpu_layers), not split across several"),
    "main_gpu": (0, "nucleus runs on the first CUDA GPU"),
    "tensor_split": (None, "nucleus runs on one GPU"),
    "rpc_servers": (None, "nucleus has no RPC backend"),
    "vocab_only": (False, "a model is loaded whole (its weights are mmapped, not read)"),
    "use_mmap": (True, "weights are always mmapped"),
    "use_mlock": (False, "nucleus does not lock its mapping"),
    "kv_overrides": (None, "nucleus reads the model's metadata as it is"),
    "rope_scaling_type": ((-1, None), "rope scaling comes from the model's metadata"),
    "attention_type": ((-1, None), "the attention comes from the model's architecture"),
    "rope_freq_base": (0.0, "the rope base comes from the model's metadata"),
    "rope_freq_scale": (0.0, "rope scaling comes from the model's metadata"),
    "yarn_ext_factor": (-1.0, "YaRN comes from the model's metadata"),
    "yarn_attn_factor": (1.0, "YaRN comes from the model's metadata"),
    "yarn_beta_fast": (32.0, "YaRN comes from the model's metadata"),
    "yarn_beta_slow": (1.0, "YaRN comes from the model's metadata"),
    "yarn_orig_ctx": (0, "YaRN comes from the model's metadata"),
    "offload_kqv": (True, "the KV cache of GPU layers is always on the GPU"),
    "flash_attn": (False, "nucleus has one attention kernel, exact in F32 (docs/correctness.md)"),
    "op_offload": ((None, True), "nucleus offloads by layer (n_gpu_layers)"),
    "no_perf": (False, "nucleus always measures (Llama.last_stats)"),
    "lora_base": (None, "an adapter applies to the loaded model's weights as they are (lora_path)"),
    "numa": ((False, 0), "nucleus has no NUMA policy"),
    "chat_handler": (None, "chats are rendered by the model's Jinja template (or chat_template=...)"),
    "tokenizer": (None, "nucleus tokenizes with the model's own vocabulary"),
    "spm_infill": (False, "nucleus has no infill (suffix) mode"),
}

_UNSUPPORTED_COMPLETION = {
    "suffix": (None, "nucleus has no infill (suffix) mode"),
}


class LoadError(NucleusError, ValueError):
    """A model that could not be loaded: the loader's message (the path, what is wrong)."""


class LlamaState:
    """What save_state returns and load_state takes: the evaluated tokens, their logits, and the
    KV cache's cells of them as nucleus saves them (a model fingerprint, keys and values, a checksum)."""

    def __init__(self, input_ids: List[int], scores: List[Optional[array]], n_tokens: int, llama_state: bytes,
                 llama_state_size: int, seed: int) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed


class _Interrupt:
    """SIGINT while a long C call runs that polls back (beam search): the signal only sets a flag,
    which the poll reads and ends the search with, then KeyboardInterrupt is raised as usual."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None

    def __enter__(self) -> "_Interrupt":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if self.hit and exc[0] is None:
            raise KeyboardInterrupt


class Llama:
    """A model and its context (KV cache), with llama-cpp-python's high-level API.

    >>> llm = Llama(model_path="stories260K.gguf", n_ctx=256, seed=1, verbose=False)
    >>> llm("Once upon a time", max_tokens=16)["choices"][0]["text"]
    """

    def __init__(
        self,
        model_path: Union[None, str, "os.PathLike[str]"] = None,
        *,
        n_gpu_layers: int = 0,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: Optional[int] = None,
        n_threads_batch: Optional[int] = None,
        pooling_type: int = LLAMA_POOLING_TYPE_UNSPECIFIED,
        logits_all: bool = False,
        embedding: bool = False,
        swa_full: Optional[bool] = None,
        last_n_tokens_size: int = 64,
        chat_format: Optional[str] = None,
        draft_model: Optional[LlamaDraftModel] = None,
        lora_path: Union[None, str, "os.PathLike[str]"] = None,
        lora_scale: float = 1.0,
        type_k: Union[None, int, str] = None,
        type_v: Union[None, int, str] = None,
        verbose: bool = True,
        # nucleus's own
        cache_type_k: Union[None, int, str] = None,
        cache_type_v: Union[None, int, str] = None,
        n_seq_max: int = 1,
        chat_template: Optional[str] = None,
        fast: bool = False,
        hf_repo: Optional[str] = None,
        hf_file: Optional[str] = None,
        filename: Optional[str] = None,
        cache_dir: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        """Load a model (a GGUF file or a Hugging Face directory) and make its context.

        Args, as llama-cpp-python's (those it has and nucleus does not raise NotImplementedError
        when given another value than their default):
            model_path: the model.
            n_gpu_layers: the last N layers on the first CUDA GPU (-1: all); needs a CUDA build.
            seed: the seed of calls that give none (llama-cpp-python's default: a random one).
            n_ctx: cells of the KV cache per sequence (0: the training context, at most 4096).
            n_batch, n_ubatch: tokens per forward pass at most (the smaller of the two).
            n_threads: threads (None: every core); n_threads_batch must be None or the same.
            pooling_type: embed's pooling: LLAMA_POOLING_TYPE_MEAN (the default, as nucleus serve),
                NONE (one vector per token), CLS (the first token's) or LAST.
            logits_all: eval keeps every token's logits in scores, not only the last one's.
            embedding: accepted for compatibility; embed works either way.
            swa_full: sliding-window layers keep every position (needed to save long states).
            last_n_tokens_size: the window of the repetition penalties.
            chat_format: None (the model's template) or "chatml".
            draft_model: speculative decoding: LlamaPromptLookupDecoding(...) or DraftModel(path).
            lora_path, lora_scale: a LoRA adapter (a GGUF in llama.cpp's adapter form) applied to
                the model's products with this scale (times the file's alpha / rank); CPU only.
            type_k, type_v: the KV cache's types: GGML_TYPE_F16 / F32 / Q8_0 / Q4_0 or "f16", ...
            verbose: one line about the model on stderr.
        nucleus's own:
            cache_type_k, cache_type_v: the same as type_k, type_v.
            n_seq_max: sequences the KV cache holds (beam search needs one per beam).
            chat_template: a Jinja chat template instead of the model's.
            fast: int8 activations for Q8_0 / Q4_0 weights (faster prefill, less exact).
            hf_repo, hf_file (or filename), cache_dir: instead of model_path, the model
                "USER/REPO" of Hugging Face's hub (or $HF_ENDPOINT), found in nucleus's cache or
                downloaded into it (nc_hub_get, as `nucleus pull`): the file's whole path, its quant
                tag ("Q8_0"), or a pattern "*Q8_0.gguf" (the tag); None: Q4_K_M or the nearest.

        Raises LoadError (a ValueError) with the loader's message when the model cannot be loaded.
        """
        self._model = ctypes.c_void_p()
        self._ctx = ctypes.c_void_p()
        self._draft_model = ctypes.c_void_p()
        self._draft_ctx = ctypes.c_void_p()
        self._chat_template: Optional[_chat.ChatTemplate] = None
        self._lock = threading.Lock()
        self._active: Optional["weakref.ref[Generation]"] = None
        refuse("Llama.__init__", kwargs, _UNSUPPORTED_INIT)
        if chat_format not in (None, "chatml"):
            raise NotImplementedError(f"Llama.__init__: chat_format={chat_format!r} is not supported by nucleus: "
                                      "chats use the model's Jinja template, chat_format='chatml', or chat_template=")
        if n_threads_batch is not None and n_threads_batch != n_threads:
            raise NotImplementedError("Llama.__init__: n_threads_batch other than n_threads is not supported by "
                                      "nucleus: one thread pool runs prefill and decoding")
        if pooling_type == LLAMA_POOLING_TYPE_RANK or pooling_type not in range(-1, 5):
            raise NotImplementedError(f"Llama.__init__: pooling_type={pooling_type!r} is not supported by nucleus: "
                                      "embeddings are pooled by mean, first (CLS) or last token, or not at all")
        if draft_model is not None and not isinstance(draft_model, LlamaDraftModel):
            raise TypeError("draft_model: a LlamaPromptLookupDecoding or a DraftModel")
        if hf_file is not None and filename is not None and hf_file != filename:
            raise InvalidArgument("Llama.__init__: give hf_file or filename, not both")
        if hf_repo is not None:
            if model_path is not None:
                raise InvalidArgument("Llama.__init__: give model_path or hf_repo, not both")
            model_path = _hub.get(hf_repo, hf_file if hf_file is not None else filename, cache_dir)
        elif hf_file is not None or filename is not None:
            raise InvalidArgument("Llama.__init__: hf_file / filename name a file of hf_repo: give hf_repo too")
        if model_path is None:
            raise TypeError("Llama.__init__: model_path (or hf_repo) is needed")
        if lora_path is None and lora_scale != 1.0:
            raise InvalidArgument("Llama.__init__: lora_scale applies to lora_path's adapter: give lora_path")
        self.model_path = os.fspath(model_path)
        self.verbose = verbose
        self.chat_format = chat_format
        self.draft_model = draft_model
        self.pooling = LLAMA_POOLING_TYPE_MEAN if pooling_type == LLAMA_POOLING_TYPE_UNSPECIFIED else pooling_type
        self.n_batch = max(1, min(n_batch, n_ubatch))
        self.last_n_tokens_size = last_n_tokens_size
        self.last_stats: Optional[GenerationStats] = None
        self._logits_all = logits_all
        self._embedding = embedding
        self._seed = seed
        self._seeds = seed_source(seed)
        self._pieces: Dict[int, bytes] = {}
        self._input_ids: List[int] = []
        self._scores: List[Optional[array]] = []

        kt = self._cache_type("type_k", type_k, cache_type_k)
        vt = self._cache_type("type_v", type_v, cache_type_v)
        err = _lib.nc_err()
        if _lib.lib.nc_model_load(ctypes.byref(self._model), self.model_path.encode(), ctypes.byref(err)) != 0:
            raise LoadError(_lib.message(err))
        try:
            if lora_path is not None:
                _lib.check(_lib.lib.nc_model_add_lora(self._model, os.fsencode(lora_path), float(lora_scale),
                                                      ctypes.byref(err)), err, LoadError)
            info = _lib.nc_model_info()
            _lib.lib.nc_model_get_info(self._model, ctypes.byref(info))
            self._info = info
            self.metadata = self._read_metadata()
            cp = _lib.nc_context_params(
                n_ctx=n_ctx, n_seq_max=max(1, n_seq_max), n_threads=n_threads or 0, n_batch=self.n_batch,
                type_k=kt, type_v=vt, swa_full=bool(swa_full), fast=fast, n_gpu_layers=n_gpu_layers)
            _lib.check(_lib.lib.nc_context_new(ctypes.byref(self._ctx), self._model, ctypes.byref(cp),
                                               ctypes.byref(err)), err, InvalidArgument)
            if isinstance(draft_model, DraftModel):
                self._open_draft(draft_model, cp)
            if chat_template is not None:
                self._chat_template = _chat.ChatTemplate(self._model, chat_template)
            elif chat_format == "chatml":
                self._chat_template = _chat.ChatTemplate(self._model, _CHATML)
        except BaseException:
            self.close()
            raise
        if verbose:
            print(f"nucleus: {self.model_path}: {info.arch.decode()}, {info.n_layer} layers, "
                  f"{info.file_bytes / 1e6:.1f} MB, kernels {_lib.lib.nc_kernels_name().decode()}, "
                  f"{_lib.lib.nc_context_n_threads(self._ctx)} threads, n_ctx {self.n_ctx()}", file=sys.stderr)

    # ---- construction and lifetime ----

    @staticmethod
    def _cache_type(name: str, value: Union[None, int, str], alias: Union[None, int, str]) -> int:
        if value is not None and alias is not None and value != alias:
            raise TypeError(f"{name} and cache_{name} disagree: {value!r} and {alias!r}")
        v = value if value is not None else alias
        if v is None:
            return _lib.NC_CACHE_DEFAULT
        key = v.lower() if isinstance(v, str) else v
        if key not in _CACHE_TYPES:
            raise NotImplementedError(f"Llama.__init__: {name}={v!r} is not supported by nucleus: the KV cache "
                                      "types are f16, f32, q8_0 and q4_0 (GGML_TYPE_F16, _F32, _Q8_0, _Q4_0)")
        return _CACHE_TYPES[key]

    def _open_draft(self, d: DraftModel, cp: "_lib.nc_context_params") -> None:
        err = _lib.nc_err()
        if _lib.lib.nc_model_load(ctypes.byref(self._draft_model), d.model_path.encode(), ctypes.byref(err)) != 0:
            raise LoadError("draft model: " + _lib.message(err))
        _lib.check(_lib.lib.nc_spec_check_vocab(self._model, self._draft_model, ctypes.byref(err)), err,
                   InvalidArgument)
        dcp = _lib.nc_context_params(n_ctx=_lib.lib.nc_context_n_ctx(self._ctx), n_seq_max=cp.n_seq_max,
                                     n_threads=cp.n_threads, n_batch=cp.n_batch)
        _lib.check(_lib.lib.nc_context_new(ctypes.byref(self._draft_ctx), self._draft_model, ctypes.byref(dcp),
                                           ctypes.byref(err)), err, InvalidArgument)

    def _read_metadata(self) -> Dict[str, str]:
        out = {}
        for i in range(_lib.lib.nc_model_meta_count(self._model)):
            key = _lib.lib.nc_model_meta_key(self._model, i).decode("utf-8", "replace")
            n = _lib.lib.nc_model_meta_value(self._model, i, None, 0)
            buf = ctypes.create_string_buffer(max(n, 1))
            _lib.lib.nc_model_meta_value(self._model, i, buf, n)
            out[key] = buf.raw[:n].decode("utf-8", "replace")
        return out

    def close(self) -> None:
        """Free the model and its context now (a running generation is closed first)."""
        active = self._active() if getattr(self, "_active", None) else None
        if active is not None:
            active.close()
        if getattr(self, "_chat_template", None) is not None:
            self._chat_template.close()
            self._chat_template = None
        for handle, free in (("_draft_ctx", "nc_context_free"), ("_draft_model", "nc_model_free"),
                             ("_ctx", "nc_context_free"), ("_model", "nc_model_free")):
            h = getattr(self, handle, None)
            if h:
                getattr(_lib.lib, free)(h)
                setattr(self, handle, ctypes.c_void_p())

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str] = None, additional_files: Optional[List[str]] = None,
                        local_dir: Optional[str] = None, local_dir_use_symlinks: Any = "auto",
                        cache_dir: Optional[str] = None, **kwargs: Any) -> "Llama":
        """llama-cpp-python's: the model of Hugging Face's hub repo_id ("USER/REPO"), filename its
        file (the whole path, a pattern "*Q8_0.gguf", or None: Q4_K_M or the nearest quant),
        found in nucleus's cache (cache_dir, else $NUCLEUS_CACHE ...) or downloaded into it; the
        other arguments are Llama's. A split GGUF brings all its parts."""
        if additional_files:
            raise NotImplementedError("Llama.from_pretrained: additional_files is not supported by nucleus: a split "
                                      "GGUF's parts come with its first; give the model's file")
        if local_dir is not None:
            raise NotImplementedError("Llama.from_pretrained: local_dir is not supported by nucleus: models go into "
                                      "its cache (cache_dir)")
        return cls(hf_repo=repo_id, hf_file=filename, cache_dir=cache_dir, **kwargs)

    def _live(self) -> None:
        if not self._ctx:
            raise NucleusError("the Llama was closed")

    # one generation or evaluation at a time: they share the context's sequences
    def _acquire(self) -> None:
        self._live()
        if not self._lock.acquire(blocking=False):
            raise NucleusError("this Llama is busy with another generation (a stream not finished or closed, or "
                               "another thread): finish or close it, or give each thread its own Llama")

    def _release(self) -> None:
        self._lock.release()

    def _start(self, prompt: List[int], req: Request) -> Generation:
        gen = Generation(self, prompt, req)
        self._active = weakref.ref(gen)
        self._input_ids, self._scores = [], []  # the generation took sequence 0
        return gen

    def _speculation(self, req: Request) -> None:
        spec = req.params.spec
        d = self.draft_model
        if isinstance(d, LlamaPromptLookupDecoding):
            spec.lookup_ngram, spec.draft_max, spec.fixed = d.max_ngram_size, d.num_pred_tokens, d.fixed
        elif isinstance(d, DraftModel):
            spec.draft, spec.draft_model = self._draft_ctx.value, self._draft_model.value
            spec.draft_max, spec.draft_min, spec.fixed = d.draft_max, d.draft_min, d.fixed

    # ---- the model ----

    def n_ctx(self) -> int:
        """Cells of the KV cache per sequence."""
        self._live()
        return _lib.lib.nc_context_n_ctx(self._ctx)

    def n_embd(self) -> int:
        return self._info.n_embd

    def n_vocab(self) -> int:
        return self._info.n_vocab

    def token_bos(self) -> int:
        self._live()
        return _lib.lib.nc_token_bos(self._model)

    def token_eos(self) -> int:
        self._live()
        return _lib.lib.nc_token_eos(self._model)

    def token_nl(self) -> int:
        ids = self.tokenize(b"\n", add_bos=False, special=False)
        return ids[-1] if ids else -1

    def token_is_eog(self, token: int) -> bool:
        """Whether the token ends a generation (EOS, end of turn)."""
        self._live()
        return bool(_lib.lib.nc_token_is_eog(self._model, token))

    def pooling_type(self) -> int:
        return self.pooling

    def set_seed(self, seed: int) -> None:
        """The seed of later calls that give none."""
        self._seed = seed
        self._seeds = seed_source(seed)

    def set_cache(self, cache: Any) -> None:
        """llama-cpp-python's prompt caches: nucleus keeps prompts' KV blocks in its prefix cache
        by itself, so only None is accepted."""
        if cache is not None:
            raise NotImplementedError("Llama.set_cache is not supported by nucleus: the KV cache keeps recent "
                                      "prompts' blocks and reuses them by itself (docs/kv-cache.md)")

    def kv_cache_stats(self) -> Dict[str, int]:
        """nucleus: the KV cache's blocks (used, cached, free) and the prefix cache's hits."""
        self._live()
        st = _lib.nc_kv_stats()
        _lib.lib.nc_kv_get_stats(self._ctx, ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in _lib.nc_kv_stats._fields_}

    def kv_seq_len(self, seq: int = 0) -> int:
        """nucleus: the cells sequence seq holds in the KV cache."""
        self._live()
        return _lib.lib.nc_kv_seq_len(self._ctx, seq)

    # ---- tokens ----

    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of text (UTF-8 bytes or str); add_bos: BOS (and EOS) as the vocabulary asks;
        special: text such as "<|im_start|>" becomes its control token."""
        self._live()
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        cap = len(data) + 8
        err = _lib.nc_err()
        while True:
            buf = (ctypes.c_int32 * cap)()
            n = _lib.lib.nc_tokenize(self._model, data, len(data), add_bos, special, buf, cap, ctypes.byref(err))
            if n < 0:
                raise NucleusError(_lib.message(err))
            if n <= cap:
                return list(buf[:n])
            cap = n

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        """The bytes of tokens as llama.cpp's detokenize gives them (control tokens only when
        special); with prev_tokens, the bytes tokens add after them."""
        if prev_tokens:
            whole = self._detokenize(list(prev_tokens) + list(tokens), special)
            return whole[len(self._detokenize(list(prev_tokens), special)):]
        return self._detokenize(list(tokens), special)

    def _detokenize(self, tokens: List[int], special: bool) -> bytes:
        self._live()
        ids = _lib.i32_array(tokens)
        cap = 16 * len(tokens) + 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            n = _lib.lib.nc_detokenize(self._model, ids, len(tokens), special, buf, cap)
            if n < 0:
                raise InvalidArgument(f"detokenize: a token is outside the vocabulary (0..{self.n_vocab() - 1})")
            if n <= cap:
                return buf.raw[:n]
            cap = n

    def _piece_bytes(self, token: int) -> bytes:
        self._live()
        piece = self._pieces.get(token)
        if piece is None:
            n = _lib.lib.nc_token_piece(self._model, token, None, 0)
            buf = ctypes.create_string_buffer(max(n, 1))
            _lib.lib.nc_token_piece(self._model, token, buf, n)
            piece = self._pieces[token] = buf.raw[:max(n, 0)]
        return piece

    def _piece(self, token: int) -> str:
        return self._piece_bytes(token).decode("utf-8", "replace")

    # ---- the evaluation state: eval, scores, sample ----

    @property
    def n_tokens(self) -> int:
        """Tokens evaluated into sequence 0 since the last reset (a generation resets it)."""
        return len(self._input_ids)

    @property
    def input_ids(self) -> Any:
        """The evaluated tokens (a numpy array when numpy is installed)."""
        try:
            import numpy as np
        except ImportError:
            return list(self._input_ids)
        return np.array(self._input_ids, dtype=np.intc)

    @property
    def scores(self) -> Any:
        """The logits of the evaluated tokens, a numpy array (n_tokens, n_vocab): every row with
        logits_all, else the last one (rows without logits are zeros)."""
        import numpy as np

        out = np.zeros((len(self._scores), self.n_vocab()), dtype=np.single)
        for i, row in enumerate(self._scores):
            if row is not None:
                out[i] = np.frombuffer(row, dtype=np.single)
        return out

    @property
    def eval_tokens(self) -> Deque[int]:
        return deque(self._input_ids, maxlen=self.n_ctx())

    @property
    def eval_logits(self) -> Deque[List[float]]:
        rows = [list(r) for r in self._scores if r is not None]
        return deque(rows, maxlen=self.n_ctx() if self._logits_all else 1)

    def reset(self) -> None:
        """Forget the evaluated tokens (their blocks stay in the prefix cache)."""
        self._acquire()
        try:
            _lib.lib.nc_kv_seq_clear(self._ctx, 0)
            self._input_ids, self._scores = [], []
        finally:
            self._release()

    def eval(self, tokens: Sequence[int]) -> None:
        """Run the model over tokens after those evaluated so far (sequence 0), in batches of
        n_batch; their logits go to scores (the last token's, or all with logits_all)."""
        tokens = list(tokens)
        if not tokens:
            return
        self._acquire()
        try:
            if self.n_tokens + len(tokens) > self.n_ctx():
                raise InvalidArgument(f"eval: {self.n_tokens} + {len(tokens)} tokens do not fit the context of "
                                      f"{self.n_ctx()}")
            n_vocab, err = self.n_vocab(), _lib.nc_err()
            for start in range(0, len(tokens), self.n_batch):
                chunk = tokens[start:start + self.n_batch]
                last_chunk = start + len(chunk) == len(tokens)
                batch = (_lib.nc_batch_entry * len(chunk))()
                for i, t in enumerate(chunk):
                    want = self._logits_all or (last_chunk and i == len(chunk) - 1)
                    batch[i] = _lib.nc_batch_entry(t, self.n_tokens + i, 0, want)
                _lib.check(_lib.lib.nc_forward(self._ctx, batch, len(chunk), ctypes.byref(err)), err)
                for i, t in enumerate(chunk):
                    row = None
                    if batch[i].logits:
                        row = array("f")
                        row.frombytes(ctypes.string_at(_lib.lib.nc_logits(self._ctx, i), 4 * n_vocab))
                    self._input_ids.append(t)
                    self._scores.append(row)
        finally:
            self._release()

    def logits(self) -> List[float]:
        """nucleus: the logits after the last evaluated token."""
        if not self._scores or self._scores[-1] is None:
            raise NucleusError("logits: nothing evaluated yet")
        return list(self._scores[-1])

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
               mirostat_eta: float = 0.1, mirostat_tau: float = 5.0, penalize_nl: bool = True,
               logits_processor: Any = None, grammar: Optional[LlamaGrammar] = None, idx: Optional[int] = None,
               seed: Optional[int] = None, **kwargs: Any) -> int:
        """Draw a token from the logits of the last evaluated token (or of token idx) through the
        sampler chain, the evaluated tokens as its history."""
        kwargs.update(tfs_z=tfs_z, penalize_nl=penalize_nl, logits_processor=logits_processor)
        req = sampling(self, "Llama.sample", temperature=temp, top_p=top_p, top_k=top_k, min_p=min_p,
                       typical_p=typical_p, repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                       presence_penalty=presence_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                       mirostat_eta=mirostat_eta, seed=seed, logit_bias=None,
                       grammar_text=grammar.grammar if grammar else None, n_logprobs=None, max_tokens=None,
                       stop=None, extra=kwargs)
        i = len(self._scores) - 1 if idx is None else idx
        if not 0 <= i < len(self._scores) or self._scores[i] is None:
            raise NucleusError("sample: no logits for that token (eval first; logits_all keeps every token's)")
        row = self._scores[i]
        logits = (ctypes.c_float * len(row)).from_buffer(row)
        history = _lib.i32_array(self._input_ids[: i + 1])
        s = ctypes.c_void_p()
        err = _lib.nc_err()
        _lib.check(_lib.lib.nc_sampler_new(ctypes.byref(s), self._model, len(row), ctypes.byref(req.params.sampling),
                                           ctypes.byref(err)), err, InvalidArgument)
        try:
            return _lib.lib.nc_sampler_sample(s, logits, history, i + 1, i + 1, None)
        finally:
            _lib.lib.nc_sampler_free(s)

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor: Any = None, stopping_criteria: Any = None,
                 grammar: Optional[LlamaGrammar] = None, seed: Optional[int] = None, **kwargs: Any) -> Iterator[int]:
        """The tokens drawn after tokens, one at a time, until an end of generation (yielded too)
        or a full context. reset must be True: each generation starts from its prompt (whose
        cached prefix is reused)."""
        if not reset:
            raise NotImplementedError("Llama.generate: reset=False is not supported by nucleus: a generation "
                                      "starts from its prompt, whose cached blocks are reused")
        kwargs.update(tfs_z=tfs_z, penalize_nl=penalize_nl, logits_processor=logits_processor,
                      stopping_criteria=stopping_criteria)
        req = sampling(self, "Llama.generate", temperature=temp, top_p=top_p, top_k=top_k, min_p=min_p,
                       typical_p=typical_p, repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                       presence_penalty=presence_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                       mirostat_eta=mirostat_eta, seed=seed, logit_bias=None,
                       grammar_text=grammar.grammar if grammar else None, n_logprobs=None, max_tokens=None,
                       stop=None, extra=kwargs)
        gen = self._start(list(tokens), req)

        def tokens_of() -> Iterator[int]:
            try:
                for step in gen:
                    yield step.token
            finally:
                gen.close()

        return tokens_of()

    # ---- state ----

    def save_state(self) -> LlamaState:
        """The evaluated tokens, their logits and their KV cache cells."""
        self._acquire()
        try:
            data = b""
            if self.n_tokens:
                with tempfile.TemporaryDirectory(prefix="nucleus-state-") as d:
                    path = os.path.join(d, "state.kv")
                    err = _lib.nc_err()
                    _lib.check(_lib.lib.nc_kv_seq_save(self._ctx, 0, self.n_tokens, path.encode(), None,
                                                       ctypes.byref(err)), err)
                    with open(path, "rb") as f:
                        data = f.read()
            return LlamaState(list(self._input_ids), [array("f", r) if r is not None else None for r in self._scores],
                              self.n_tokens, data, len(data), self._seed)
        finally:
            self._release()

    def load_state(self, state: LlamaState) -> None:
        """Go back to a saved state; a state of another model or cache type raises with the reason."""
        self._acquire()
        try:
            _lib.lib.nc_kv_seq_clear(self._ctx, 0)
            self._input_ids, self._scores = [], []
            if state.n_tokens:
                with tempfile.TemporaryDirectory(prefix="nucleus-state-") as d:
                    path = os.path.join(d, "state.kv")
                    with open(path, "wb") as f:
                        f.write(state.llama_state)
                    f_handle = ctypes.c_void_p()
                    err = _lib.nc_err()
                    _lib.check(_lib.lib.nc_kv_file_open(ctypes.byref(f_handle), self._ctx, path.encode(),
                                                        ctypes.byref(err)), err, InvalidArgument)
                    try:
                        _lib.check(_lib.lib.nc_kv_file_load(f_handle, 0, state.n_tokens, ctypes.byref(err)), err)
                    finally:
                        _lib.lib.nc_kv_file_close(f_handle)
            self._input_ids = list(state.input_ids[: state.n_tokens])
            self._scores = [array("f", r) if r is not None else None for r in state.scores[: state.n_tokens]]
            self.set_seed(state.seed)
        finally:
            self._release()

    # ---- embeddings ----

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """Embeddings of a text or a list of texts: the final hidden states (after the final norm)
        pooled as pooling_type says (by default their mean, as nucleus serve's, which also scales
        to unit length: normalize=True gives its vectors), or one per token with
        LLAMA_POOLING_TYPE_NONE. truncate: inputs longer than the context are cut to it (else
        ValueError). Resets the evaluated state."""
        texts = [input] if isinstance(input, str) else list(input)
        out: List[Any] = []
        total = 0
        self._acquire()
        try:
            self._input_ids, self._scores = [], []
            for text in texts:
                ids = self.tokenize(text, add_bos=True, special=True)
                if len(ids) > self.n_ctx():
                    if not truncate:
                        raise InvalidArgument(f"embed: the input has {len(ids)} tokens, more than the context of "
                                              f"{self.n_ctx()}")
                    ids = ids[: self.n_ctx()]
                if not ids:
                    raise InvalidArgument("embed: the input is empty and the model adds no BOS token")
                total += len(ids)
                out.append(self._embed_one(ids, normalize))
        finally:
            _lib.lib.nc_kv_seq_clear(self._ctx, 0)
            self._release()
        result = out[0] if isinstance(input, str) else out
        return (result, total) if return_count else result

    def _embed_one(self, ids: List[int], normalize: bool) -> Any:
        n_embd, err = self.n_embd(), _lib.nc_err()
        rows: List[List[float]] = []
        pooled = [0.0] * n_embd  # float64 sums in token order, as the server adds them
        _lib.lib.nc_kv_seq_clear(self._ctx, 0)
        for start in range(0, len(ids), _EMBED_CHUNK):
            chunk = ids[start:start + _EMBED_CHUNK]
            batch = (_lib.nc_batch_entry * len(chunk))(
                *[_lib.nc_batch_entry(t, start + i, 0, True) for i, t in enumerate(chunk)])
            _lib.check(_lib.lib.nc_forward(self._ctx, batch, len(chunk), ctypes.byref(err)), err)
            for i in range(len(chunk)):
                pos = start + i
                h = _lib.lib.nc_hidden(self._ctx, i)
                row = list(ctypes.cast(h, ctypes.POINTER(ctypes.c_float * n_embd)).contents)
                if self.pooling == LLAMA_POOLING_TYPE_NONE:
                    rows.append(row)
                elif self.pooling == LLAMA_POOLING_TYPE_MEAN:
                    pooled = [a + b for a, b in zip(pooled, row)]
                elif (self.pooling == LLAMA_POOLING_TYPE_CLS and pos == 0) or (
                        self.pooling == LLAMA_POOLING_TYPE_LAST and pos == len(ids) - 1):
                    pooled = row
        if self.pooling == LLAMA_POOLING_TYPE_NONE:
            return [_unit(r) if normalize else r for r in rows]
        if self.pooling == LLAMA_POOLING_TYPE_MEAN and not normalize:
            return [v / len(ids) for v in pooled]
        return _unit(pooled) if normalize else pooled

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> CreateEmbeddingResponse:
        """OpenAI's embeddings response (the vectors of embed, not normalized, as llama-cpp-python)."""
        embeds, total = self.embed(input, return_count=True)
        if isinstance(input, str):
            embeds = [embeds]
        return {"object": "list", "model": model if model is not None else self.model_path,
                "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
                "usage": {"prompt_tokens": total, "total_tokens": total}}

    # ---- completions ----

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        suffix: Optional[str] = None,
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: Optional[int] = None,
        echo: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: Optional[int] = None,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        **kwargs: Any,
    ) -> Union[CreateCompletionResponse, Iterator[Dict[str, Any]]]:
        """Continue a prompt (text, or token ids) through the sampler chain: OpenAI's completion,
        or with stream=True an iterator of its chunks (closing it early frees the generation).

        Args as llama-cpp-python's: max_tokens (None or <= 0: until the context is full), the
        sampler's (temperature 0 is greedy), stop strings (never part of the text), seed (None:
        from the Llama's seed), logprobs (alternatives per token, up to 20), echo (the prompt
        before the text), grammar (a LlamaGrammar), logit_bias ({token id: bias}).
        nucleus's own: explain=True (per-step records of the chain in choices[0]["explain"]),
        min_tokens, ignore_eos, stop_token_ids, top_n_sigma, xtc_*, dry_*, no_repeat_ngram_size,
        dynatemp_*, epsilon_cutoff, eta_cutoff, min_keep, repeat_last_n, samplers (the chain's
        order), logprobs_mode ("raw" / "processed"). tfs_z, logits_processor and stopping_criteria
        raise NotImplementedError unless neutral; suffix (infill) likewise.
        """
        refuse("create_completion", {"suffix": suffix}, _UNSUPPORTED_COMPLETION)
        if echo and logprobs is not None:
            raise NotImplementedError("create_completion: echo with logprobs is not supported by nucleus: the "
                                      "prompt's own log-probabilities are not computed (use eval with logits_all)")
        if isinstance(prompt, str):
            prompt_text, ids = prompt, self.tokenize(prompt, add_bos=True, special=True)
        else:
            ids = [int(t) for t in prompt]
            prompt_text = self.detokenize(ids).decode("utf-8", "replace")
        req = sampling(self, "create_completion", temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                       typical_p=typical_p, repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                       presence_penalty=presence_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                       mirostat_eta=mirostat_eta, seed=seed, logit_bias=logit_bias,
                       grammar_text=grammar.grammar if grammar else None, n_logprobs=logprobs,
                       max_tokens=max_tokens, stop=stop, extra=kwargs)
        name = model if model is not None else self.model_path
        gen = self._start(ids, req)
        if stream:
            return _completion.stream(self, gen, prompt_text=prompt_text, echo=echo, model=name,
                                      logprobs=logprobs is not None, explain=req.explain)
        return _completion.complete(self, gen, prompt_text=prompt_text, n_prompt=len(ids), echo=echo, model=name,
                                    logprobs=logprobs is not None, explain=req.explain)

    def __call__(self, prompt: Union[str, List[int]], *args: Any, **kwargs: Any) -> Any:
        """create_completion."""
        return self.create_completion(prompt, *args, **kwargs)

    # ---- chats ----

    def chat_template(self) -> _chat.ChatTemplate:
        """nucleus: the chat template in use (its .source, and .note when ChatML replaced the model's)."""
        self._live()
        if self._chat_template is None:
            self._chat_template = _chat.ChatTemplate(self._model)
        return self._chat_template

    def create_chat_completion(
        self,
        messages: List[Dict[str, Any]],
        functions: Optional[List[Dict[str, Any]]] = None,
        function_call: Any = None,
        tools: Optional[List[Dict[str, Any]]] = None,
        tool_choice: Any = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: Optional[Union[str, List[str]]] = [],
        seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None,
        max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: Optional[str] = None,
        grammar: Optional[LlamaGrammar] = None,
        logit_bias: Optional[Dict[Any, float]] = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        **kwargs: Any,
    ) -> Union[CreateChatCompletionResponse, Iterator[Dict[str, Any]]]:
        """Answer a conversation: the messages rendered by the model's chat template, the reply
        generated until its end of turn. OpenAI's chat completion, or with stream=True its chunks.

        response_format: {"type": "json_object"} (any JSON object, or the "schema" given beside),
        {"type": "json_schema", "json_schema": {"schema": ...}}. tools reach the template; with
        tool_choice "required" or {"type": "function", "function": {"name": ...}} the reply is a
        call (message.tool_calls, finish_reason "tool_calls"); with "auto" the calls the model
        writes in its family's syntax are read as nucleus serve reads them (message.tool_calls,
        with ids; streamed at the end, each a head then its arguments). A template whose family
        writes its reasoning apart (Qwen3, DeepSeek R1, gpt-oss ...) gives it as
        message.reasoning_content (delta.reasoning_content while streaming); an assistant
        message's reasoning_content goes back to the template. logprobs / top_logprobs: OpenAI's
        chat logprobs. The other arguments and nucleus's own: create_completion's.
        """
        if functions is not None or function_call is not None:
            raise NotImplementedError("create_chat_completion: functions / function_call (OpenAI's deprecated "
                                      "form) are not supported by nucleus: use tools / tool_choice")
        if grammar is not None and response_format not in (None, {"type": "text"}):
            raise InvalidArgument("create_chat_completion: give grammar or response_format, not both")
        plan = _chat.ToolPlan(tools, tool_choice)
        if plan.grammar is not None and (grammar is not None or response_format not in (None, {"type": "text"})):
            raise InvalidArgument("create_chat_completion: a required tool call has its own grammar: drop grammar "
                                  "and response_format")
        grammar_text = plan.grammar or (grammar.grammar if grammar else None) or \
            _chat.response_format_grammar(response_format)
        template = self.chat_template()
        text, add_bos = template.render(_chat.prepare_messages(messages, template.reasoning_field),
                                        {"tools": plan.tools} if plan.tools else None)
        ids = self.tokenize(text, add_bos=add_bos, special=True)
        n_logprobs = (top_logprobs or 0) if logprobs else None
        req = sampling(self, "create_chat_completion", temperature=temperature, top_p=top_p, top_k=top_k,
                       min_p=min_p, typical_p=typical_p, repeat_penalty=repeat_penalty,
                       frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                       mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, seed=seed,
                       logit_bias=logit_bias, grammar_text=grammar_text, n_logprobs=n_logprobs,
                       max_tokens=max_tokens, stop=stop, extra=kwargs)
        name = model if model is not None else self.model_path
        gen = self._start(ids, req)
        if stream:
            return _chat.stream(self, gen, plan, prompt=text.encode("utf-8"), model=name, logprobs=bool(logprobs),
                                explain=req.explain)
        return _chat.complete(self, gen, plan, prompt=text.encode("utf-8"), n_prompt=len(ids), model=name,
                              logprobs=bool(logprobs), explain=req.explain)

    # ---- beam search ----

    def beam_search(
        self,
        prompt: Union[str, List[int]],
        n_beams: int = 4,
        max_tokens: Optional[int] = 16,
        length_penalty: float = 1.0,
        n_best: int = 1,
        early_stopping: Union[bool, str] = False,
        num_beam_groups: int = 1,
        diversity_penalty: float = 0.0,
        stop: Optional[Union[str, List[str]]] = None,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        logit_bias: Optional[Dict[Any, float]] = None,
        **kwargs: Any,
    ) -> List[Dict[str, Any]]:
        """nucleus: beam search (Hugging Face's semantics: length_penalty, early_stopping True /
        False / "never", diverse groups). Needs Llama(n_seq_max >= n_beams). Returns the n_best
        hypotheses, best first: text, tokens, score (sum of log-probabilities / length^alpha),
        logprob (the sum) and finish_reason."""
        stops = {False: _lib.NC_EARLY_STOP_HEURISTIC, True: _lib.NC_EARLY_STOP_FIRST,
                 "never": _lib.NC_EARLY_STOP_NEVER}
        if early_stopping not in stops:
            raise InvalidArgument(f"early_stopping: {early_stopping!r} is not True, False or 'never'")
        ids = self.tokenize(prompt, add_bos=True, special=True) if isinstance(prompt, str) else list(prompt)
        req = sampling(self, "beam_search", temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, typical_p=1.0,
                       repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                       presence_penalty=presence_penalty, mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1,
                       seed=0, logit_bias=logit_bias, grammar_text=None, n_logprobs=None, max_tokens=max_tokens,
                       stop=stop, extra=kwargs)
        interrupt = _Interrupt()
        poll = _lib.CANCELLED(lambda _user: 1 if interrupt.hit else 0)
        bp = _lib.nc_beam_params(n_beams=n_beams, length_penalty=length_penalty, n_best=n_best,
                                 early_stopping=stops[early_stopping], n_groups=num_beam_groups,
                                 diversity_penalty=diversity_penalty, cancelled=poll)
        res = _lib.nc_beam_result()
        err = _lib.nc_err()
        prompt_arr = _lib.i32_array(ids)
        self._acquire()
        try:
            self._input_ids, self._scores = [], []
            with interrupt:
                rc = _lib.lib.nc_beam_search(self._ctx, self._model, prompt_arr, len(ids), ctypes.byref(bp),
                                             ctypes.byref(req.params.sampling), ctypes.byref(req.params.stop),
                                             ctypes.byref(res), ctypes.byref(err))
            if rc != 0:
                msg = _lib.message(err)
                if "n_seq_max" in msg:
                    msg += f" (Llama(n_seq_max={n_beams}) or more)"
                raise InvalidArgument(msg)
            try:
                out = []
                for i in range(res.n):
                    h = res.hyps[i]
                    out.append({"text": (h.text or b"").decode("utf-8", "replace"),
                                "tokens": [h.tokens[j] for j in range(h.n_tokens)], "score": h.score,
                                "logprob": h.sum_logprob,
                                "finish_reason": "length" if h.finish == _lib.NC_FINISH_CONTEXT else
                                _lib.lib.nc_finish_name(h.finish).decode()})
                self.last_stats = GenerationStats(prompt_tokens=len(ids), cached_tokens=res.n_cached,
                                                  completion_tokens=len(out[0]["tokens"]) if out else 0,
                                                  t_prompt=res.t_prompt, t_gen=res.t_gen)
                return out
            finally:
                _lib.lib.nc_beam_result_free(ctypes.byref(res))
        finally:
            for s in range(max(1, n_beams)):
                _lib.lib.nc_kv_seq_clear(self._ctx, s)
            self._release()


def _unit(v: List[float]) -> List[float]:
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v] if norm > 0 else [0.0 for _ in v]
