"""The import guard of the test environments (ci/python_envs.py copies it into each one as
_meshgate_hermetic.py, with a .pth file that imports it at every start of the interpreter).

Idle unless MESHGATE_HERMETIC names a log file, as CTest's Python suites do. Then:
- an import of a module that lives in a site-packages or dist-packages folder other than this
  environment's own raises HermeticViolation (not an ImportError, which code that probes for
  optional packages would take as "not installed" and skip);
- starting a Python interpreter that is not an isolated virtual environment (an interpreter's
  global installation, or a venv that sees its site-packages) raises it too, since nothing
  would guard the imports of that process.
Each violation is also appended to the log, so a test that swallows the exception still fails
the run (CTest's python_envs_clean reads the log after the suites)."""

import os
import sys

_LOG = os.environ.get("MESHGATE_HERMETIC")
_PACKAGE_DIRS = ("site-packages", "dist-packages")


class HermeticViolation(RuntimeError):
    pass


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def _refuse(what, hint):
    message = (f"{what}: outside the project's environments (build/venv, made by ci/bootstrap "
               f"from the pins of pyproject.toml); {hint}")
    try:
        with open(_LOG, "a", encoding="utf-8") as log:
            log.write(f"pid {os.getpid()}: {message}\n")
    except OSError:
        pass
    raise HermeticViolation(message)


def _foreign(path):
    """Whether `path` is inside a package folder that is not this environment's."""
    if not path:
        return False
    parts = os.path.realpath(path).split(os.sep)
    if not any(p in _PACKAGE_DIRS for p in parts):
        return False
    return not _inside(path, sys.prefix)


class _Finder:
    """Asks the finders after it, then refuses a spec found in a foreign package folder."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            places = [spec.origin] if spec.has_location else []
            places += list(spec.submodule_search_locations or [])
            for place in places:
                if _foreign(place):
                    _refuse(f"import of '{name}' from {place}",
                            "pin the package in pyproject.toml instead of installing it by hand")
            return spec
        return None


def _isolated_interpreter(executable, env):
    """Whether `executable` is a Python in an isolated venv (or is no Python at all)."""
    path = executable
    if os.sep not in path:
        search = (env or os.environ).get("PATH", os.defpath)
        for folder in search.split(os.pathsep):
            candidate = os.path.join(folder, path)
            if os.access(candidate, os.X_OK):
                path = candidate
                break
        else:
            return True
    name = os.path.basename(path)
    if not (name == "python" or name.startswith("python3")) or name.endswith(("-config",)):
        return True
    cfg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "pyvenv.cfg")
    if not os.path.isfile(cfg):
        return False
    with open(cfg, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition("=")
            if key.strip() == "include-system-site-packages":
                return value.strip().lower() == "false"
    return True


def _audit(event, args):
    if event == "subprocess.Popen":
        executable, argv, _cwd, env = args
        program = executable if executable is not None else (argv[0] if argv else None)
        if isinstance(program, (bytes, os.PathLike)):
            program = os.fsdecode(program)
        if isinstance(program, str) and not _isolated_interpreter(program, env):
            _refuse(f"start of the interpreter {program}",
                    "start Python as sys.executable or `python3` on the tests' PATH")
    elif event in ("os.exec", "os.posix_spawn"):
        path = os.fsdecode(args[0])
        if not _isolated_interpreter(path, args[2] if len(args) > 2 else None):
            _refuse(f"start of the interpreter {path}",
                    "start Python as sys.executable or `python3` on the tests' PATH")


if _LOG:
    sys.meta_path.insert(0, _Finder)
    sys.addaudithook(_audit)
