"""The package's build backend (PEP 517, in the tree): it writes the wheel itself, so that
`pip install --no-build-isolation ./python` needs nothing but pip, in any virtual environment or
system-wide, and no registry. The wheel holds the nucleus/ package and libnucleus.so.0:
$NUCLEUS_LIBRARY, else the checkout's build/rel/libnucleus.so.<version> (make lib). Without either
(or with NUCLEUS_BUNDLE=0) none is bundled, and the package loads libnucleus.so.0 from the dynamic
linker's paths (make install); docs/python.md says the same."""

import base64
import glob
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
NAME = "nucleus"


def _version():
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        return re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)


def _library():
    if os.environ.get("NUCLEUS_BUNDLE", "1") == "0":
        return None
    env = os.environ.get("NUCLEUS_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise RuntimeError(f"NUCLEUS_LIBRARY={env}: no such file")
        return env
    built = sorted(glob.glob(os.path.join(HERE, "..", "build", "rel", "libnucleus.so.*.*.*")))
    return built[-1] if built else None


def _metadata():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: llama-cpp-python's API over the nucleus inference engine (libnucleus.so)\n"
            "License: MIT\nRequires-Python: >=3.8\nProvides-Extra: numpy\n"
            "Requires-Dist: numpy; extra == \"numpy\"\nDescription-Content-Type: text/markdown\n\n" + readme)


def _dist_info():
    return f"{NAME}-{_version()}.dist-info"


def _tag(binary):
    if not binary:
        return "py3-none-any"
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


class _Wheel:
    """A wheel being written: every file hashed into RECORD."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, name, data, mode=0o644):
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{name},sha256={digest},{len(data)}")

    def close(self, dist_info):
        record = "\n".join(self.records + [f"{dist_info}/RECORD,,"]) + "\n"
        self.zip.writestr(f"{dist_info}/RECORD", record)
        self.zip.close()


def _write(wheel_directory, editable):
    lib = None if editable else _library()
    tag = _tag(lib is not None)
    filename = f"{NAME}-{_version()}-{tag}.whl"
    w = _Wheel(os.path.join(wheel_directory, filename))
    if editable:  # the source tree on sys.path; the library from NUCLEUS_LIBRARY or the checkout
        w.add(f"__editable__.{NAME}.pth", (HERE + "\n").encode())
    else:
        pkg = os.path.join(HERE, NAME)
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py") or name == "py.typed":
                with open(os.path.join(pkg, name), "rb") as f:
                    w.add(f"{NAME}/{name}", f.read())
        if lib is not None:
            print(f"nucleus: bundling {lib} as {NAME}/libnucleus.so.0")
            with open(lib, "rb") as f:
                w.add(f"{NAME}/libnucleus.so.0", f.read(), 0o755)
        else:
            print("nucleus: no libnucleus.so bundled: the package will load libnucleus.so.0 from the dynamic "
                  "linker's paths (make install)")
    di = _dist_info()
    w.add(f"{di}/METADATA", _metadata().encode())
    w.add(f"{di}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: nucleus_build\nRoot-Is-Purelib: "
                          f"{'false' if lib else 'true'}\nTag: {tag}\n").encode())
    w.close(di)
    return filename


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    di = os.path.join(metadata_directory, _dist_info())
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "_build/nucleus_build.py"] + sorted(
                f"{NAME}/{n}" for n in os.listdir(os.path.join(HERE, NAME)) if n.endswith(".py") or n == "py.typed"):
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return filename
