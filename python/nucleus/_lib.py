"""The C library through ctypes: where libnucleus.so is found, and nucleus.h's structures and
functions declared as the header declares them (tests/test_layout.py compiles the header and checks
every size and offset here against it).

ctypes releases the GIL for every call into the library, so forward passes of one thread overlap
with Python code of the others.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)
from typing import Optional

SONAME = "libnucleus.so.0"


def _candidates() -> list:
    """Where the library is looked for, in order (docs/python.md says the same)."""
    found = []
    env = os.environ.get("NUCLEUS_LIBRARY")
    if env:
        found.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    found.append(os.path.join(here, SONAME))  # bundled into the package when it was built
    # run from the checkout (python/nucleus, or an editable install): the library make lib built
    found.extend(sorted(glob.glob(os.path.join(here, "..", "..", "build", "rel", "libnucleus.so.*.*.*")))[-1:])
    found.append(SONAME)  # the dynamic linker's paths: an installed prefix, LD_LIBRARY_PATH
    name = ctypes.util.find_library("nucleus")
    if name:
        found.append(name)
    return found


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError(
        "nucleus: libnucleus.so was not found (set NUCLEUS_LIBRARY to its path, install the package "
        "with `make python`, or install the library with `make install`): " + "; ".join(errors)
    )


lib = _load()

NC_ERR_MAX = 512
NC_LOGPROBS_MAX = 20
NC_EXPLAIN_STAGES = 16
NC_EXPLAIN_TOP = 8
NC_KV_BLOCK = 256

# nc_cache_type
NC_CACHE_DEFAULT, NC_CACHE_F16, NC_CACHE_F32, NC_CACHE_Q8_0, NC_CACHE_Q4_0 = range(5)
# nc_finish
NC_FINISH_NONE, NC_FINISH_STOP, NC_FINISH_LENGTH, NC_FINISH_CONTEXT, NC_FINISH_GRAMMAR = range(5)
# nc_ctx_mode
NC_CTX_STOP, NC_CTX_SHIFT, NC_CTX_SINKS = range(3)
# nc_logprobs_mode
NC_LOGPROBS_RAW, NC_LOGPROBS_PROCESSED = range(2)
# nc_early_stopping
NC_EARLY_STOP_HEURISTIC, NC_EARLY_STOP_FIRST, NC_EARLY_STOP_NEVER = range(3)


class nc_err(Structure):
    _fields_ = [("msg", c_char * NC_ERR_MAX)]


class nc_model_info(Structure):
    _fields_ = [
        ("arch", c_char_p),
        ("name", c_char_p),
        ("n_vocab", c_int32),
        ("n_embd", c_int32),
        ("n_layer", c_int32),
        ("n_head", c_int32),
        ("n_head_kv", c_int32),
        ("head_dim", c_int32),
        ("n_ff", c_int32),
        ("n_rot", c_int32),
        ("n_ctx_train", c_int32),
        ("rope_freq_base", c_float),
        ("norm_eps", c_float),
        ("rope_neox", c_bool),
        ("n_expert", c_int32),
        ("n_expert_used", c_int32),
        ("swa_window", c_int32),
        ("n_params", c_uint64),
        ("weight_bytes", c_uint64),
        ("decode_bytes", c_uint64),
        ("file_bytes", c_uint64),
    ]


class nc_context_params(Structure):
    _fields_ = [
        ("n_ctx", c_int32),
        ("n_seq_max", c_int32),
        ("kv_cells", c_int64),
        ("n_threads", c_int32),
        ("n_batch", c_int32),
        ("type_k", c_int),
        ("type_v", c_int),
        ("swa_full", c_bool),
        ("fast", c_bool),
        ("n_gpu_layers", c_int32),
    ]


class nc_batch_entry(Structure):
    _fields_ = [("token", c_int32), ("pos", c_int32), ("seq", c_int32), ("logits", c_bool)]


class nc_kv_stats(Structure):
    _fields_ = [
        ("n_blocks", c_int32),
        ("used", c_int32),
        ("cached", c_int32),
        ("free", c_int32),
        ("lookups", c_uint64),
        ("hits", c_uint64),
        ("tokens_looked_up", c_uint64),
        ("tokens_reused", c_uint64),
        ("evictions", c_uint64),
    ]


class nc_kv_file_info(Structure):
    _fields_ = [("n_tokens", c_int32), ("tokens", POINTER(c_int32)), ("n_bytes", c_uint64)]


class nc_logit_bias(Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


class nc_sampler_params(Structure):
    _fields_ = [
        ("seed", c_uint64),
        ("temp", c_float),
        ("dynatemp_range", c_float),
        ("dynatemp_exponent", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("typical_p", c_float),
        ("top_n_sigma", c_float),
        ("epsilon_cutoff", c_float),
        ("eta_cutoff", c_float),
        ("min_keep", c_int32),
        ("repeat_penalty", c_float),
        ("repeat_last_n", c_int32),
        ("frequency_penalty", c_float),
        ("presence_penalty", c_float),
        ("no_repeat_ngram", c_int32),
        ("dry_multiplier", c_float),
        ("dry_base", c_float),
        ("dry_allowed_length", c_int32),
        ("dry_penalty_last_n", c_int32),
        ("dry_breakers", POINTER(c_char_p)),
        ("n_dry_breakers", c_int32),
        ("xtc_probability", c_float),
        ("xtc_threshold", c_float),
        ("mirostat", c_int32),
        ("mirostat_tau", c_float),
        ("mirostat_eta", c_float),
        ("logit_bias", POINTER(nc_logit_bias)),
        ("n_logit_bias", c_int32),
        ("min_tokens", c_int32),
        ("ignore_eos", c_bool),
        ("samplers", c_char_p),
        ("n_logprobs", c_int32),
        ("logprobs_mode", c_int),
        ("explain", c_bool),
        ("grammar", c_char_p),
    ]


class nc_token_logprob(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float)]


class nc_sample_info(Structure):
    _fields_ = [
        ("token", c_int32),
        ("p", c_float),
        ("logprob", c_float),
        ("n_top", c_int32),
        ("top", nc_token_logprob * NC_LOGPROBS_MAX),
    ]


class nc_token_prob(Structure):
    _fields_ = [("token", c_int32), ("p", c_float)]


class nc_explain_stage(Structure):
    _fields_ = [
        ("name", c_char * 24),
        ("param", c_double),
        ("n_before", c_int32),
        ("n_after", c_int32),
        ("mass", c_double),
        ("what", c_char * 160),
    ]


class nc_explain(Structure):
    _fields_ = [
        ("n_stages", c_int32),
        ("stage", nc_explain_stage * NC_EXPLAIN_STAGES),
        ("token", c_int32),
        ("p", c_float),
        ("n_candidates", c_int32),
        ("n_top", c_int32),
        ("top", nc_token_prob * NC_EXPLAIN_TOP),
    ]


class nc_stop_params(Structure):
    _fields_ = [
        ("max_tokens", c_int32),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_int32),
        ("stop_ids", POINTER(c_int32)),
        ("n_stop_ids", c_int32),
    ]


class nc_ctx_policy(Structure):
    _fields_ = [("mode", c_int), ("n_keep", c_int32), ("n_sink", c_int32)]


class nc_spec_params(Structure):
    _fields_ = [
        ("draft", c_void_p),
        ("draft_model", c_void_p),
        ("lookup_ngram", c_int32),
        ("draft_max", c_int32),
        ("draft_min", c_int32),
        ("fixed", c_bool),
    ]


class nc_spec_stats(Structure):
    _fields_ = [
        ("drafted", c_int64),
        ("accepted", c_int64),
        ("passes", c_int64),
        ("generated", c_int64),
        ("draft_rows", c_int64),
    ]


class nc_gen_params(Structure):
    _fields_ = [
        ("sampling", nc_sampler_params),
        ("stop", nc_stop_params),
        ("n_samples", c_int32),
        ("context", nc_ctx_policy),
        ("spec", nc_spec_params),
    ]


class nc_gen_event(Structure):
    _fields_ = [
        ("sample", c_int32),
        ("step", c_int32),
        ("token", c_int32),
        ("text", POINTER(c_char)),
        ("n_text", c_int32),
        ("info", POINTER(nc_sample_info)),
        ("explain", POINTER(nc_explain)),
        ("finish", c_int),
    ]


class nc_gen_sample(Structure):
    _fields_ = [
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_int32),
        ("finish", c_int),
        ("n_evictions", c_int32),
        ("n_evicted", c_int32),
    ]


class nc_gen_result(Structure):
    _fields_ = [
        ("n_samples", c_int32),
        ("samples", POINTER(nc_gen_sample)),
        ("t_prompt", c_double),
        ("t_gen", c_double),
        ("t_model", c_double),
        ("n_cached", c_int32),
        ("spec", nc_spec_stats),
    ]


CANCELLED = ctypes.CFUNCTYPE(c_int, c_void_p)


class nc_beam_params(Structure):
    _fields_ = [
        ("n_beams", c_int32),
        ("length_penalty", c_float),
        ("n_best", c_int32),
        ("early_stopping", c_int),
        ("n_groups", c_int32),
        ("diversity_penalty", c_float),
        ("cancelled", CANCELLED),
        ("cancelled_user", c_void_p),
    ]


class nc_beam_hyp(Structure):
    _fields_ = [
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_int32),
        ("text", c_char_p),
        ("sum_logprob", c_double),
        ("score", c_double),
        ("finish", c_int),
    ]


class nc_beam_result(Structure):
    _fields_ = [
        ("n", c_int32),
        ("hyps", POINTER(nc_beam_hyp)),
        ("t_prompt", c_double),
        ("t_gen", c_double),
        ("n_cached", c_int32),
    ]


class nc_reply_params(Structure):
    _fields_ = [
        ("prompt", c_char_p),
        ("prompt_len", c_size_t),
        ("tools_json", c_char_p),
        ("parallel_tool_calls", c_bool),
        ("keep_reasoning", c_bool),
    ]


class nc_chat_reply(Structure):
    _fields_ = [
        ("reasoning", c_void_p),
        ("content", c_void_p),
        ("tool_calls", c_void_p),
        ("n_reasoning", c_size_t),
        ("n_content", c_size_t),
        ("n_tool_calls", c_int32),
    ]


class nc_hub_params(Structure):
    _fields_ = [
        ("endpoint", c_char_p),
        ("token", c_char_p),
        ("cache", c_char_p),
        ("offline", c_bool),
        ("progress", c_void_p),
        ("user", c_void_p),
    ]


STRUCTS = [
    nc_err, nc_model_info, nc_context_params, nc_batch_entry, nc_kv_stats, nc_kv_file_info,
    nc_logit_bias, nc_sampler_params, nc_token_logprob, nc_sample_info, nc_token_prob,
    nc_explain_stage, nc_explain, nc_stop_params, nc_ctx_policy, nc_spec_params, nc_spec_stats,
    nc_gen_params, nc_gen_event, nc_gen_sample, nc_gen_result, nc_beam_params, nc_beam_hyp,
    nc_beam_result, nc_reply_params, nc_chat_reply, nc_hub_params,
]

_p = c_void_p  # opaque handles: nc_model, nc_context, nc_gen, nc_chat_template, nc_kv_file
_err = POINTER(nc_err)
_i32p = POINTER(c_int32)


def _declare(name: str, restype, *argtypes) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_declare("nc_model_load", c_int, POINTER(c_void_p), c_char_p, _err)
_declare("nc_model_free", None, _p)
_declare("nc_model_add_lora", c_int, _p, c_char_p, c_float, _err)
_declare("nc_model_get_info", None, _p, POINTER(nc_model_info))
_declare("nc_model_meta_str", POINTER(c_char), _p, c_char_p, POINTER(c_size_t))
_declare("nc_model_meta_count", c_int32, _p)
_declare("nc_model_meta_key", c_char_p, _p, c_int32)
_declare("nc_model_meta_value", c_int, _p, c_int32, c_void_p, c_int)
_declare("nc_kernels_name", c_char_p)
_declare("nc_token_bos", c_int32, _p)
_declare("nc_token_eos", c_int32, _p)
_declare("nc_token_is_eog", c_bool, _p, c_int32)
_declare("nc_vocab_adds_bos", c_bool, _p)
_declare("nc_token_piece", c_int, _p, c_int32, c_void_p, c_int)
_declare("nc_detokenize", c_int, _p, _i32p, c_int, c_bool, c_void_p, c_int)
_declare("nc_tokenize", c_int, _p, c_char_p, c_size_t, c_bool, c_bool, _i32p, c_int, _err)
_declare("nc_context_new", c_int, POINTER(c_void_p), _p, POINTER(nc_context_params), _err)
_declare("nc_context_free", None, _p)
_declare("nc_context_n_ctx", c_int32, _p)
_declare("nc_context_n_threads", c_int32, _p)
_declare("nc_context_cache_types", None, _p, POINTER(c_int), POINTER(c_int))
_declare("nc_forward", c_int, _p, POINTER(nc_batch_entry), c_int, _err)
_declare("nc_logits", POINTER(c_float), _p, c_int)
_declare("nc_hidden", POINTER(c_float), _p, c_int)
_declare("nc_kv_seq_len", c_int32, _p, c_int32)
_declare("nc_kv_seq_clear", None, _p, c_int32)
_declare("nc_kv_seq_truncate", None, _p, c_int32, c_int32)
_declare("nc_kv_get_stats", None, _p, POINTER(nc_kv_stats))
_declare("nc_kv_seq_save", c_int, _p, c_int32, c_int32, c_char_p, POINTER(c_uint64), _err)
_declare("nc_kv_file_open", c_int, POINTER(c_void_p), _p, c_char_p, _err)
_declare("nc_kv_file_close", None, _p)
_declare("nc_kv_file_get_info", None, _p, POINTER(nc_kv_file_info))
_declare("nc_kv_file_load", c_int, _p, c_int32, c_int32, _err)
_declare("nc_json_schema_to_grammar", c_int, c_char_p, c_char_p, POINTER(c_void_p), _err)
_declare("nc_grammar_check", c_int, c_char_p, _err)
_declare("nc_grammar_check_model", c_int, _p, c_char_p, _err)
_declare("nc_sampler_params_default", None, POINTER(nc_sampler_params))
_declare("nc_sampler_params_check", c_int, POINTER(nc_sampler_params), _err)
_declare("nc_sampler_new", c_int, POINTER(c_void_p), _p, c_int32, POINTER(nc_sampler_params), _err)
_declare("nc_sampler_free", None, _p)
_declare("nc_sampler_sample", c_int32, _p, POINTER(c_float), _i32p, c_int32, c_int32, POINTER(nc_sample_info))
_declare("nc_sampler_describe", c_char_p, _p)
_declare("nc_finish_name", c_char_p, c_int)
_declare("nc_chat_template_new", c_int, POINTER(c_void_p), _p, c_char_p, c_size_t, _err)
_declare("nc_chat_template_from_source", c_int, POINTER(c_void_p), _p, c_char_p, c_size_t, _err)
_declare("nc_chat_template_free", None, _p)
_declare("nc_chat_template_source", c_char_p, _p)
_declare(
    "nc_chat_render", c_int, _p, c_char_p, c_char_p, c_bool, POINTER(c_void_p), POINTER(c_size_t),
    POINTER(c_bool), _err,
)
_declare(
    "nc_chat_reply_parse", c_int, _p, POINTER(nc_reply_params), c_char_p, c_size_t, c_bool, POINTER(nc_chat_reply),
    _err,
)
_declare("nc_chat_reply_free", None, POINTER(nc_chat_reply))
_declare("nc_chat_reasoning_field", c_char_p, _p)
_declare("nc_hub_get", c_int, c_char_p, POINTER(nc_hub_params), c_char_p, c_size_t, _err)
_declare("nc_spec_check_vocab", c_int, _p, _p, _err)
_declare("nc_gen_begin", c_int, POINTER(c_void_p), _p, _p, _i32p, c_int32, POINTER(nc_gen_params), _err)
_declare("nc_gen_next", c_int, _p, POINTER(nc_gen_event), _err)
_declare("nc_gen_get_result", c_int, _p, POINTER(nc_gen_result), _err)
_declare("nc_gen_free", None, _p)
_declare("nc_gen_result_free", None, POINTER(nc_gen_result))
_declare(
    "nc_beam_search", c_int, _p, _p, _i32p, c_int32, POINTER(nc_beam_params),
    POINTER(nc_sampler_params), POINTER(nc_stop_params), POINTER(nc_beam_result), _err,
)
_declare("nc_beam_result_free", None, POINTER(nc_beam_result))

# The C library's own free(), for the strings it hands over (nc_chat_render, nc_json_schema_to_grammar).
_libc = ctypes.CDLL(None)
_libc.free.restype = None
_libc.free.argtypes = [c_void_p]
free = _libc.free


class NucleusError(RuntimeError):
    """An error of the C library: its message names the problem (file, field, limit)."""


def message(err: nc_err) -> str:
    return err.msg.decode("utf-8", "replace")


def check(rc: int, err: nc_err, exc: type = NucleusError) -> None:
    """Raise exc with the library's message when a call failed (returned -1)."""
    if rc != 0:
        raise exc(message(err))


def i32_array(values) -> "ctypes.Array":
    values = list(values)
    return (c_int32 * max(len(values), 1))(*values)


def text_of(ptr, n: int) -> bytes:
    return ctypes.string_at(ptr, n) if n > 0 else b""


def opt_str(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode("utf-8")
