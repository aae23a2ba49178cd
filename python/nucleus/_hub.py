"""Models from Hugging Face's hub through the C library (nc_hub_get, as `nucleus pull` and -hf): a
repository and a file as llama-cpp-python's from_pretrained names them, turned into nucleus's
reference "USER/REPO[:QUANT]" and found in its cache or downloaded into it."""

from __future__ import annotations

import ctypes
import re
from typing import Optional

from . import _lib
from ._options import InvalidArgument

# llama-cpp-python's filename is often a pattern for one quant: "*Q4_K_M.gguf", "*q8_0.gguf".
_QUANT_PATTERN = re.compile(r"^\*[-_.]?([A-Za-z0-9_]+)\.gguf$")


class HubError(_lib.NucleusError, OSError):
    """The model could not be found or downloaded: the library's message (a repository the hub
    does not know, a gated one without a token, a quant it lacks, a download cut off)."""


def reference(repo_id: str, filename: Optional[str]) -> str:
    """nc_hub_get's reference: the file's whole path, or the quant tag a pattern names."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or ":" in repo_id:
        raise InvalidArgument(f"hf_repo: {repo_id!r} is not \"USER/REPO\"")
    if filename is None:
        return repo_id
    m = _QUANT_PATTERN.match(filename)
    if m:
        return f"{repo_id}:{m.group(1)}"
    if any(c in filename for c in "*?["):
        raise NotImplementedError(f"filename {filename!r}: nucleus takes a file's whole path or a pattern of one "
                                  "quant (\"*Q4_K_M.gguf\"), not other patterns")
    return f"{repo_id}:{filename}"


def get(repo_id: str, filename: Optional[str], cache_dir: Optional[str] = None) -> str:
    """The local path of the model (a GGUF file, a split's first part, or a safetensors directory)."""
    ref = reference(repo_id, filename)
    p = _lib.nc_hub_params(cache=_lib.opt_str(cache_dir))
    path = ctypes.create_string_buffer(4096)
    err = _lib.nc_err()
    _lib.check(_lib.lib.nc_hub_get(ref.encode("utf-8"), ctypes.byref(p), path, len(path), ctypes.byref(err)), err,
               HubError)
    return path.value.decode("utf-8")
