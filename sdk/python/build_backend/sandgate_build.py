"""A PEP 517 build backend for the sandgate SDK, in the tree.

pip builds a project in an isolated environment holding only what
``build-system.requires`` names; with this backend that is nothing, so
``pip install ./sdk/python`` works with no index and no network. It builds
a pure-Python wheel of the ``sandgate`` package and nothing else.
"""

import base64
import hashlib
import os
import tomllib
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "sandgate"


def _project():
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata(p):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
    ]
    return "\n".join(lines) + "\n"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    dist = f"{p['name']}-{p['version']}"
    path = os.path.join(wheel_directory, f"{dist}-py3-none-any.whl")
    files = []
    src = os.path.join(_ROOT, _PACKAGE)
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") or name == "py.typed":
            with open(os.path.join(src, name), "rb") as f:
                files.append((f"{_PACKAGE}/{name}", f.read()))
    files.append((f"{dist}.dist-info/METADATA", _metadata(p).encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: sandgate_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files.append((f"{dist}.dist-info/WHEEL", wheel.encode()))
    record = [_record_line(n, d) for n, d in files] + [f"{dist}.dist-info/RECORD,,"]
    files.append((f"{dist}.dist-info/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(name, data)
    return os.path.basename(path)


def build_sdist(sdist_directory, config_settings=None):
    import tarfile

    p = _project()
    dist = f"{p['name']}-{p['version']}"
    path = os.path.join(sdist_directory, f"{dist}.tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for name in ("pyproject.toml", "README.md", "build_backend", _PACKAGE):
            full = os.path.join(_ROOT, name)
            if os.path.exists(full):
                t.add(full, arcname=f"{dist}/{name}",
                      filter=lambda i: None if "__pycache__" in i.name else i)
        info = tarfile.TarInfo(f"{dist}/PKG-INFO")
        meta = _metadata(p).encode()
        info.size = len(meta)
        import io

        t.addfile(info, io.BytesIO(meta))
    return os.path.basename(path)
