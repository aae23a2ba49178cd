"""Keyword arguments to the C library's parameters: llama-cpp-python's names mapped onto
nc_sampler_params / nc_stop_params / nc_gen_params, nucleus's own options beside them, and the
refusals: an unknown keyword is a TypeError naming it, a known llama-cpp-python argument that
nucleus cannot honour a NotImplementedError naming it (never silently ignored)."""

from __future__ import annotations

import ctypes
import random
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from . import _lib
from ._lib import NucleusError

# llama-cpp-python's "no seed given": a random one.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF
_U64 = (1 << 64) - 1


class InvalidArgument(NucleusError, ValueError):
    """A value the C library refuses (its message names the field and the allowed range)."""


def refuse(where: str, kwargs: Dict[str, Any], unsupported: Dict[str, Tuple[Any, str]]) -> None:
    """Unknown keywords raise TypeError as Python does; known-but-unsupported ones given another
    value than their neutral one raise NotImplementedError naming them and why."""
    for name, value in kwargs.items():
        if name not in unsupported:
            raise TypeError(f"{where}() got an unexpected keyword argument '{name}'")
        neutral, why = unsupported[name]
        neutral_values = neutral if isinstance(neutral, tuple) else (neutral,)
        if not any(value is v or (v is not None and value == v) for v in neutral_values):
            raise NotImplementedError(f"{where}: {name}={value!r} is not supported by nucleus: {why}")


# Sampling arguments of llama-cpp-python that nucleus has no stage for, with their neutral values.
UNSUPPORTED_SAMPLING: Dict[str, Tuple[Any, str]] = {
    "tfs_z": (1.0, "tail-free sampling was removed from llama.cpp and is not a stage of nucleus's chain"),
    "logits_processor": (None, "the sampler chain runs in the C library; Python logits processors cannot join it"),
    "stopping_criteria": (None, "stop rules run in the C library: use stop, max_tokens or stop_token_ids"),
    "penalize_nl": (True, "nucleus's penalties treat the newline like every other token"),
}

# nucleus's own sampling options (nc_sampler_params fields), accepted beside llama-cpp-python's.
NUCLEUS_SAMPLING = {
    "min_tokens": "min_tokens",
    "ignore_eos": "ignore_eos",
    "top_n_sigma": "top_n_sigma",
    "epsilon_cutoff": "epsilon_cutoff",
    "eta_cutoff": "eta_cutoff",
    "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold",
    "dry_multiplier": "dry_multiplier",
    "dry_base": "dry_base",
    "dry_allowed_length": "dry_allowed_length",
    "dry_penalty_last_n": "dry_penalty_last_n",
    "no_repeat_ngram_size": "no_repeat_ngram",
    "dynatemp_range": "dynatemp_range",
    "dynatemp_exponent": "dynatemp_exponent",
    "min_keep": "min_keep",
    "repeat_last_n": "repeat_last_n",
}
# and those that need more than a number: handled in sampling()
NUCLEUS_OTHER = {"dry_sequence_breakers", "samplers", "logprobs_mode", "explain", "stop_token_ids"}


def seed_source(seed: Optional[int]) -> random.Random:
    """Where per-call seeds come from when a call gives none: a generator seeded by the Llama's seed
    (the same sequence of calls draws the same texts), or the system's for the default seed."""
    if seed is None or seed < 0 or seed == LLAMA_DEFAULT_SEED:
        return random.SystemRandom()
    return random.Random(seed)


def call_seed(seed: Optional[int], source: random.Random) -> int:
    if seed is None or seed < 0 or seed == LLAMA_DEFAULT_SEED:
        return source.randrange(1 << 63)
    return seed & _U64


class Request:
    """nc_gen_params and the C memory its pointers reach, kept alive together."""

    def __init__(self) -> None:
        self.params = _lib.nc_gen_params()
        self.keep: List[Any] = []
        self.n_logprobs: Optional[int] = None  # None: no logprobs asked
        self.explain = False


def _strings(values: Iterable[str], keep: List[Any]) -> Tuple[Any, int]:
    encoded = [v.encode("utf-8") for v in values]
    arr = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
    keep.extend([encoded, arr])
    return ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), len(encoded)


def stop_list(stop: Union[None, str, List[str]]) -> List[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    out = []
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop: {s!r} is not a string")
        if s:
            out.append(s)
    return out


def sampling(
    llama: Any,
    where: str,
    *,
    temperature: float,
    top_p: float,
    top_k: int,
    min_p: float,
    typical_p: float,
    repeat_penalty: float,
    frequency_penalty: float,
    presence_penalty: float,
    mirostat_mode: int,
    mirostat_tau: float,
    mirostat_eta: float,
    seed: Optional[int],
    logit_bias: Optional[Dict[Any, float]],
    grammar_text: Optional[str],
    n_logprobs: Optional[int],
    max_tokens: Optional[int],
    stop: Union[None, str, List[str]],
    extra: Dict[str, Any],
) -> Request:
    """The request for one generation. extra holds the keywords not named above: nucleus's own
    options, llama-cpp-python's unsupported ones (refused unless neutral), or unknown ones."""
    req = Request()
    sp = req.params.sampling
    _lib.lib.nc_sampler_params_default(ctypes.byref(sp))
    sp.seed = call_seed(seed, llama._seeds)
    sp.temp = temperature
    sp.top_p = top_p
    sp.top_k = top_k
    sp.min_p = min_p
    sp.typical_p = typical_p
    sp.repeat_penalty = repeat_penalty
    sp.repeat_last_n = llama.last_n_tokens_size
    sp.frequency_penalty = frequency_penalty
    sp.presence_penalty = presence_penalty
    if mirostat_mode not in (0, 1, 2):
        raise InvalidArgument(f"mirostat_mode: {mirostat_mode} is not 0 (off), 1 or 2")
    sp.mirostat = mirostat_mode
    sp.mirostat_tau = mirostat_tau
    sp.mirostat_eta = mirostat_eta

    own = {k: extra.pop(k) for k in list(extra) if k in NUCLEUS_SAMPLING or k in NUCLEUS_OTHER}
    refuse(where, extra, UNSUPPORTED_SAMPLING)
    for name, field in NUCLEUS_SAMPLING.items():
        if name in own:
            setattr(sp, field, own[name])
    if "dry_sequence_breakers" in own:
        sp.dry_breakers, sp.n_dry_breakers = _strings(own["dry_sequence_breakers"], req.keep)
    if "samplers" in own:
        order = own["samplers"]
        text = (order if isinstance(order, str) else ";".join(order)).encode("utf-8")
        req.keep.append(text)
        sp.samplers = text
    if "logprobs_mode" in own:
        modes = {"raw": _lib.NC_LOGPROBS_RAW, "processed": _lib.NC_LOGPROBS_PROCESSED}
        if own["logprobs_mode"] not in modes:
            raise InvalidArgument(f"logprobs_mode: {own['logprobs_mode']!r} is not 'raw' or 'processed'")
        sp.logprobs_mode = modes[own["logprobs_mode"]]
    req.explain = bool(own.get("explain", False))
    sp.explain = req.explain

    if logit_bias:
        n_vocab = llama.n_vocab()
        entries = []
        for token, bias in logit_bias.items():
            tid = int(token)
            if not 0 <= tid < n_vocab:
                raise InvalidArgument(f"logit_bias: token {tid} is outside the vocabulary (0..{n_vocab - 1})")
            entries.append((tid, float(bias)))
        arr = (_lib.nc_logit_bias * len(entries))(*entries)
        req.keep.append(arr)
        sp.logit_bias = arr
        sp.n_logit_bias = len(entries)

    if n_logprobs is not None:
        if not 0 <= n_logprobs <= _lib.NC_LOGPROBS_MAX:
            raise InvalidArgument(f"logprobs: {n_logprobs} is outside the allowed range 0..{_lib.NC_LOGPROBS_MAX}")
        req.n_logprobs = n_logprobs
        sp.n_logprobs = max(n_logprobs, 1)  # the drawn token's own log-probability comes with the first

    if grammar_text:
        text = grammar_text.encode("utf-8")
        err = _lib.nc_err()
        _lib.check(_lib.lib.nc_grammar_check_model(llama._model, text, ctypes.byref(err)), err, InvalidArgument)
        req.keep.append(text)
        sp.grammar = text

    err = _lib.nc_err()
    _lib.check(_lib.lib.nc_sampler_params_check(ctypes.byref(sp), ctypes.byref(err)), err, InvalidArgument)

    st = req.params.stop
    if max_tokens is not None and max_tokens > 0:
        st.max_tokens = max_tokens  # None or <= 0: until the context is full, as llama-cpp-python
    strings = stop_list(stop)
    if strings:
        st.stop, st.n_stop = _strings(strings, req.keep)
    ids = own.get("stop_token_ids")
    if ids:
        arr = _lib.i32_array(ids)
        req.keep.append(arr)
        st.stop_ids = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
        st.n_stop_ids = len(ids)

    req.params.n_samples = 1
    llama._speculation(req)
    return req
