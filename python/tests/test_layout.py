"""The ctypes structures are nucleus.h's: every size and field offset, as the C compiler lays them
out, and every function the package declares is one the header declares."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from nucleus import _lib


def test_structs_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed (make deps)")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "nucleus.h"', "int main(void) {"]
    expected = []
    for s in _lib.STRUCTS:
        name = s.__name__
        lines.append(f'    printf("%zu\\n", sizeof({name}));')
        expected.append((f"sizeof({name})", ctypes_size(s)))
        for field, _ in s._fields_:
            lines.append(f'    printf("%zu\\n", offsetof({name}, {field}));')
            expected.append((f"{name}.{field}", getattr(s, field).offset))
    lines += ["    return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert len(got) == len(expected)
    wrong = [(what, want, int(c)) for (what, want), c in zip(expected, got) if want != int(c)]
    assert not wrong, f"(field, ctypes, C): {wrong}"


def ctypes_size(s):
    import ctypes
    return ctypes.sizeof(s)


def test_functions_are_the_headers():
    with open(os.path.join(ROOT, "include", "nucleus.h")) as f:
        declared = set(re.findall(r"\b(nc_[a-z0-9_]+)\(", f.read()))
    with open(_lib.__file__) as f:
        used = set(re.findall(r'_declare\(\s*"(nc_[a-z0-9_]+)"', f.read()))
    assert used and used <= declared
