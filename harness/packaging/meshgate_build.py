"""The PEP 517 build backend of the meshgate driver, standard library only.

The driver is pure Python (harness/meshgate: its layer folders core/, system/, gate/, run/,
timeline/ and commands/, and impls/) plus its JSON Schemas, so its wheel is a zip of those files
and a dist-info folder. setuptools before 70.1 cannot build a wheel without the
separate `wheel` package, which machines with no package index lack; this backend needs
nothing, so `pip install --no-build-isolation .` works on a bare Python 3.11. The metadata
comes from pyproject.toml's [project] table; the version from meshgate/__init__.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "harness"
PACKAGE = "meshgate"
# Every module of the package, in whichever folder, and the schemas.
PACKAGE_DATA = ("**/*.py", "schemas/*.schema.json")
TAG = "py3-none-any"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _version() -> str:
    text = (PACKAGE_DIR / PACKAGE / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if not match:
        raise RuntimeError(f"no __version__ in {PACKAGE_DIR / PACKAGE / '__init__.py'}")
    return match.group(1)


def _dist_name() -> str:
    return f"{_project()['name'].replace('-', '_')}-{_version()}"


def _metadata() -> str:
    project = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {_version()}",
             f"Summary: {project.get('description', '')}"]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {dep}; extra == \"{extra}\"" for dep in deps]
    readme = project.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _entry_points() -> str:
    scripts = _project().get("scripts", {})
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())


def _package_files() -> list[Path]:
    files = {p for pattern in PACKAGE_DATA for p in (PACKAGE_DIR / PACKAGE).glob(pattern)}
    return sorted(p for p in files if p.is_file())


def _dist_info(extra: dict[str, bytes]) -> dict[str, bytes]:
    info = f"{_dist_name()}.dist-info"
    return {
        f"{info}/METADATA": _metadata().encode(),
        f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: meshgate_build\nRoot-Is-Purelib: true\n"
                          f"Tag: {TAG}\n").encode(),
        f"{info}/entry_points.txt": _entry_points().encode(),
        **extra,
    }


def _write_wheel(directory: str, contents: dict[str, bytes]) -> str:
    name = f"{_dist_name()}-{TAG}.whl"
    record_path = f"{_dist_name()}.dist-info/RECORD"
    record = io.StringIO()
    with zipfile.ZipFile(Path(directory) / name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arcname, data in contents.items():
            wheel.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.write(f"{arcname},sha256={digest},{len(data)}\n")
        record.write(f"{record_path},,\n")
        wheel.writestr(record_path, record.getvalue())
    return name


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    for arcname, data in _dist_info({}).items():
        path = Path(metadata_directory) / arcname
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return f"{_dist_name()}.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {p.relative_to(PACKAGE_DIR).as_posix(): p.read_bytes() for p in _package_files()}
    return _write_wheel(wheel_directory, _dist_info(files))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth file puts harness/ of this checkout on sys.path."""
    pth = {f"__editable__.{_dist_name()}.pth": (str(PACKAGE_DIR) + "\n").encode()}
    return _write_wheel(wheel_directory, _dist_info(pth))


def build_sdist(sdist_directory, config_settings=None):
    name = f"{_dist_name()}.tar.gz"
    sources = [ROOT / "pyproject.toml", ROOT / "README.md", Path(__file__).resolve(),
               *_package_files()]
    with tarfile.open(Path(sdist_directory) / name, "w:gz") as sdist:
        for path in sources:
            sdist.add(path, arcname=f"{_dist_name()}/{path.relative_to(ROOT).as_posix()}")
        info = tarfile.TarInfo(f"{_dist_name()}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        sdist.addfile(info, io.BytesIO(data))
    return name
