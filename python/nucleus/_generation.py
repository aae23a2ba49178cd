"""One generation pulled from the C library a token at a time (nc_gen_begin / nc_gen_next): the
forward passes run inside nc_gen_next, with the GIL released. Closing a generation, at its end,
on an error, a KeyboardInterrupt or a generator closed half-way, frees it and clears its sequences
from the KV cache (the prompt's blocks stay in the prefix cache for the next call)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from ._lib import NucleusError
from ._options import InvalidArgument, Request


@dataclass
class TokenInfo:
    """The drawn token's log-probability and the most probable alternatives (token, logprob)."""

    logprob: float
    top: List[Tuple[int, float]]


@dataclass
class Step:
    """One token drawn: the text it makes safe to show now (complete UTF-8 characters, nothing
    that may still become a stop string), and why the sequence ended when it did."""

    sample: int
    index: int
    token: int
    text: bytes
    finish: str  # "" while going on, else "stop", "length" or "grammar"
    info: Optional[TokenInfo] = None
    explain: Optional[Dict[str, Any]] = None


@dataclass
class GenerationStats:
    """What the last generation did (Llama.last_stats): tokens, seconds, and speculative decoding's
    drafts (drafted, accepted) over the model's forward passes."""

    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache, not computed again
    completion_tokens: int = 0
    t_prompt: float = 0.0
    t_gen: float = 0.0
    t_model: float = 0.0
    drafted: int = 0
    accepted: int = 0
    passes: int = 0
    generated: int = 0
    draft_rows: int = 0
    finish_reason: List[str] = field(default_factory=list)

    @property
    def acceptance(self) -> Optional[float]:
        """Accepted drafts per drafted token, None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None


def finish_name(code: int) -> str:
    if code == _lib.NC_FINISH_NONE:
        return ""
    if code == _lib.NC_FINISH_CONTEXT:
        return "length"
    return _lib.lib.nc_finish_name(code).decode()


def explain_record(e: "_lib.nc_explain", piece) -> Dict[str, Any]:
    """nucleus's explain record of one step: what every stage of the chain did, then the draw."""
    stages = []
    for i in range(e.n_stages):
        s = e.stage[i]
        stages.append({
            "name": s.name.decode(), "param": s.param, "n_before": s.n_before, "n_after": s.n_after,
            "mass": s.mass, "what": s.what.decode("utf-8", "replace"),
        })
    top = [{"token": e.top[i].token, "piece": piece(e.top[i].token), "p": e.top[i].p} for i in range(e.n_top)]
    return {"stages": stages, "token": e.token, "piece": piece(e.token), "p": e.p,
            "n_candidates": e.n_candidates, "top": top}


class Generation:
    """Iterate over the Steps of one generation; close() (or the end) frees it."""

    def __init__(self, llama: Any, prompt: List[int], req: Request) -> None:
        self._llama = llama
        self._req = req
        self._handle: Optional[ctypes.c_void_p] = None
        self._n_samples = req.params.n_samples or 1
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        llama._acquire()
        handle = ctypes.c_void_p()
        try:
            if not prompt:
                raise InvalidArgument("the prompt is empty")
            self._prompt = _lib.i32_array(prompt)
            err = _lib.nc_err()
            rc = _lib.lib.nc_gen_begin(ctypes.byref(handle), llama._ctx, llama._model, self._prompt, len(prompt),
                                       ctypes.byref(req.params), ctypes.byref(err))
            if rc != 0:
                raise InvalidArgument(_lib.message(err))
            self._handle = handle
        except BaseException:  # a refusal, or a KeyboardInterrupt as the prefill returned
            if handle.value and self._handle is None:
                _lib.lib.nc_gen_free(handle)
            self._clear()
            llama._release()
            raise
        self._event = _lib.nc_gen_event()
        self._err = _lib.nc_err()

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> Step:
        if self._handle is None:
            raise StopIteration
        try:
            rc = _lib.lib.nc_gen_next(self._handle, ctypes.byref(self._event), ctypes.byref(self._err))
        except BaseException:
            self.close()
            raise
        if rc == 0:
            self.close()
            raise StopIteration
        if rc < 0:
            msg = _lib.message(self._err)
            self.close()
            raise NucleusError(msg)
        ev = self._event
        step = Step(sample=ev.sample, index=ev.step, token=ev.token, text=_lib.text_of(ev.text, ev.n_text),
                    finish=finish_name(ev.finish))
        if ev.info and self._req.n_logprobs is not None:
            info = ev.info.contents
            n = min(info.n_top, self._req.n_logprobs)
            step.info = TokenInfo(logprob=info.logprob, top=[(info.top[i].token, info.top[i].logprob) for i in range(n)])
        if ev.explain:
            step.explain = explain_record(ev.explain.contents, self._llama._piece)
        return step

    def _clear(self) -> None:
        for s in range(self._n_samples):
            _lib.lib.nc_kv_seq_clear(self._llama._ctx, s)

    def close(self) -> None:
        """Free the generation and its sequences (idempotent); statistics go to stats."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            res = _lib.nc_gen_result()
            err = _lib.nc_err()
            if _lib.lib.nc_gen_get_result(handle, ctypes.byref(res), ctypes.byref(err)) == 0:
                st = self.stats
                st.cached_tokens = res.n_cached
                st.t_prompt, st.t_gen, st.t_model = res.t_prompt, res.t_gen, res.t_model
                st.drafted, st.accepted = res.spec.drafted, res.spec.accepted
                st.passes, st.generated, st.draft_rows = res.spec.passes, res.spec.generated, res.spec.draft_rows
                st.completion_tokens = sum(res.samples[i].n_tokens for i in range(res.n_samples))
                st.finish_reason = [finish_name(res.samples[i].finish) for i in range(res.n_samples)]
                _lib.lib.nc_gen_result_free(ctypes.byref(res))
            _lib.lib.nc_gen_free(handle)
            self._clear()
            self._llama.last_stats = self.stats
        finally:
            self._llama._release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
