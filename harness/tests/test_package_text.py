"""What the sources say of themselves holds:

- the package docstring (meshgate/__init__.py) says the driver runs on the standard library
  alone: every driver module imports with jsonschema, torch and numpy unavailable (only
  meshgate.impls.torch, the PyTorch adapter, is left out, as the docstring says);
- source comments of harness/ and lib/ cite only documents the repository holds: no spec/ files
  or design notes kept elsewhere, and every docs/*.md they name exists.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "harness" / "meshgate"
SOURCE_ROOTS = (REPO / "harness", REPO / "lib")
SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py")
# Modules that import a package outside the standard library on purpose (the docstring says so).
NEEDS_MORE = ("meshgate.impls.torch",)
NOT_STANDARD = ("jsonschema", "torch", "numpy")

# Where a comment cites a file or a spec a clone does not have ((?<![\w-]) keeps mesh_spec/ out).
OUTSIDE = re.compile(r"(?<![\w-])spec/[\w-]+\.md|\bDESIGN\.md\b|\bspec (?:section|§)|\bspec \d")
# Tests that name those patterns to look for them.
PATTERN_LISTS = ("test_package_text.py", "test_docs.py")
DOC_CITATION = re.compile(r"(?<![\w/-])docs/([\w-]+\.md)")

# Blocks the packages outside the standard library, then imports every named module.
IMPORT_ALL = """
import importlib, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not in the standard library")
        return None
sys.meta_path.insert(0, Blocked())
for module in {modules!r}:
    importlib.import_module(module)
"""


def driver_modules() -> list[str]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue  # runs its command when imported
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not any(name == m or name.startswith(m + ".") for m in NEEDS_MORE):
            modules.append(name)
    return modules


def sources() -> list[Path]:
    """Every source file under SOURCE_ROOTS, their CMake files included."""
    found = []
    for root in SOURCE_ROOTS:
        found += [p for p in root.rglob("*") if p.is_file() and
                  (p.suffix in SOURCE_SUFFIXES or p.suffix == ".cmake" or p.name == "CMakeLists.txt")]
    return sorted(found)


class StandardLibraryOnly(unittest.TestCase):
    def test_every_driver_module_imports_without_packages_outside_the_standard_library(self):
        modules = driver_modules()
        self.assertIn("meshgate.core.schema", modules)
        code = IMPORT_ALL.format(blocked=set(NOT_STANDARD), modules=modules)
        proc = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])


class SourceCitations(unittest.TestCase):
    def test_comments_cite_no_document_outside_the_repository(self):
        found = []
        for path in sources():
            if path.name in PATTERN_LISTS:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                     .splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
        self.assertEqual(found, [], "comments that send the reader to files a clone lacks")

    def test_the_docs_pages_comments_name_exist(self):
        missing = []
        for path in sources():
            text = path.read_text(encoding="utf-8", errors="replace")
            for page in sorted(set(DOC_CITATION.findall(text))):
                if not (REPO / "docs" / page).exists():
                    missing.append(f"{path.relative_to(REPO)}: docs/{page}")
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main()
