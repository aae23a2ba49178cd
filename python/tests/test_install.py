"""The package as users install it from the checkout, with Debian's pip and no registry: into a
virtual environment (the library bundled), system-wide as `make python` puts it (here under a
--prefix), and without a bundled library, finding libnucleus.so.0 through the linker's path."""

import glob
import os
import subprocess
import sys

from conftest import ROOT, STORIES

CHECK = ("import nucleus; from nucleus import Llama; "
         "llm = Llama(model_path=%r, verbose=False); "
         "print(nucleus._lib.lib._name); print(llm('Once upon a time', max_tokens=12, temperature=0)['choices'][0]['text'])"
         % STORIES)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def expected_text(stories):
    return stories("Once upon a time", max_tokens=12, temperature=0)["choices"][0]["text"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUCLEUS_LIBRARY", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


def test_virtual_environment(tmp_path, stories):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = str(venv / "bin" / "python")
    run([sys.executable, "-m", "pip", "--python", py, "install", "--no-build-isolation", "--no-index",
         os.path.join(ROOT, "python")], env=clean_env())
    out = run([py, "-c", CHECK], cwd="/", env=clean_env()).splitlines()
    assert out[0] == glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "nucleus" / "libnucleus.so.0"))[0]
    assert out[1] == expected_text(stories)


def test_make_python_system_wide_layout(tmp_path, stories):
    prefix = tmp_path / "prefix"
    run(["make", "-s", "python", f"PYTHON={sys.executable}",
         f"PIP_FLAGS=--prefix {prefix} --break-system-packages --quiet"], cwd=ROOT, env=clean_env())
    (pkg,) = glob.glob(str(prefix / "**" / "nucleus" / "__init__.py"), recursive=True)
    site = os.path.dirname(os.path.dirname(pkg))
    out = run([sys.executable, "-c", CHECK], cwd="/", env=clean_env(PYTHONPATH=site)).splitlines()
    assert out[0] == os.path.join(site, "nucleus", "libnucleus.so.0") and out[1] == expected_text(stories)


def test_without_a_bundled_library(tmp_path, stories):
    target = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--target", str(target),
         os.path.join(ROOT, "python")], env=clean_env(NUCLEUS_BUNDLE="0"))
    assert not glob.glob(str(target / "nucleus" / "libnucleus.so*"))
    libdir = tmp_path / "lib"  # an installed prefix's lib/ (make install), reached through the linker's path
    libdir.mkdir()
    (built,) = glob.glob(os.path.join(ROOT, "build", "rel", "libnucleus.so.*.*.*"))
    os.symlink(built, libdir / "libnucleus.so.0")
    env = clean_env(PYTHONPATH=str(target), LD_LIBRARY_PATH=str(libdir))
    out = run([sys.executable, "-c", CHECK], cwd="/", env=env).splitlines()
    assert out == ["libnucleus.so.0", expected_text(stories)]
    p = subprocess.run([sys.executable, "-c", "import nucleus"], cwd="/", capture_output=True, text=True,
                       env=clean_env(PYTHONPATH=str(target)))
    assert p.returncode != 0 and "libnucleus.so was not found" in p.stderr
