"""The driver's layers (docs/architecture.md), read from the source of every module with `ast`,
imports inside functions included:

- each module imports only from its own layer or the ones below it:
  core <- system <- gate <- run <- timeline <- commands <- cli (the modules at the package's
  top: cli, __main__ and the `python3 -m meshgate.schema` entry point); the package root holds
  only the version and imports nothing;
- the pure modules (statistics, the decision rule, signals, comparisons, change points, the
  bisection search and every renderer) never reach a process, a database or the system layer,
  not even through the modules they import;
- only the system layer starts processes;
- no import cycle, and no absolute import that a module beside the importer would shadow (a
  package module named like a standard one, e.g. bisect);
- the implementation adapters (meshgate/impls, run in their own process by the runner) and the
  driver do not import each other.
"""

from __future__ import annotations

import ast
import unittest
from pathlib import Path
from tests.support import once

PACKAGE = Path(__file__).resolve().parents[1] / "meshgate"
LAYERS = ("core", "system", "gate", "run", "timeline", "commands", "cli")
# Pure: no process, no database, no system layer, through any chain of imports.
PURE = ("core.markup", "core.svg", "core.tables", "gate.stats", "gate.verdict", "gate.signals", "gate.compare",
        "gate.power", "gate.render", "gate.signal_report", "run.report", "run.summary",
        "timeline.changepoint", "timeline.series", "timeline.bisection", "timeline.render")
PROCESS_MODULES = ("subprocess", "multiprocessing", "pty")
PROCESS_CALLS = ("system", "popen", "fork", "forkpty", "spawnl", "spawnlp", "spawnv", "spawnvp",
                 "execv", "execve", "execvp", "execl", "execlp", "posix_spawn")
DATABASE_MODULES = ("sqlite3", "dbm", "shelve")


class Module:
    def __init__(self, path: Path):
        self.path = path
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        self.is_package = parts[-1] == "__init__"
        if self.is_package:
            parts = parts[:-1]
        self.name = ".".join(parts)  # "" for the package root
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

    @property
    def layer(self) -> str:
        first = self.name.split(".")[0]
        if first in LAYERS[:-1]:
            return first
        return "impls" if first == "impls" else ("root" if not self.name else "cli")

    def package(self) -> list[str]:
        parts = self.name.split(".") if self.name else []
        return parts if self.is_package else parts[:-1]

    def imports(self) -> list[tuple[int, str, list[str], int]]:
        """(line, module, imported names, level) of every import statement, nested ones too."""
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name, [], 0) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                found.append((node.lineno, node.module or "", [a.name for a in node.names], node.level))
        return found


def load_modules() -> dict[str, Module]:
    modules = [Module(p) for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts]
    return {m.name: m for m in modules}


MODULES = load_modules()


def driver_targets(module: Module) -> list[tuple[int, str]]:
    """The package's modules (or packages) `module` imports: (line, dotted name below meshgate,
    "" for the root)."""
    out = []
    for line, name, names, level in module.imports():
        if level:
            base = module.package()[:len(module.package()) - (level - 1)]
            target = base + (name.split(".") if name else [])
        elif name == "meshgate" or name.startswith("meshgate."):
            target = name.split(".")[1:]
        else:
            continue
        dotted = ".".join(target)
        children = [f"{dotted}.{n}" if dotted else n for n in names]
        hits = [c for c in children if c in MODULES]
        out += [(line, c) for c in hits] if hits else [(line, dotted)]
    return out


def external_imports(module: Module) -> list[tuple[int, str]]:
    return [(line, name.split(".")[0]) for line, name, _, level in module.imports()
            if not level and not (name == "meshgate" or name.startswith("meshgate."))]


def process_calls(module: Module) -> list[int]:
    """Lines that call os.system, os.popen, os.exec*, os.spawn*, os.fork ..."""
    lines = []
    for node in ast.walk(module.tree):
        if (isinstance(node, ast.Attribute) and node.attr in PROCESS_CALLS
                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            lines.append(node.lineno)
    return lines


def graph() -> dict[str, set[str]]:
    return {name: {t for _, t in driver_targets(m) if t in MODULES and t != name}
            for name, m in MODULES.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module, and modules importing themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def reach(start: str, edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Every module `start` imports, directly or not, with one chain of imports to it."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for nxt in sorted(edges.get(current, ())):
            if nxt not in chains:
                chains[nxt] = chains[current] + [nxt]
                todo.append(nxt)
    return chains


def where(module: Module, line: int) -> str:
    return f"meshgate/{module.path.relative_to(PACKAGE)}:{line}"


@once("an analysis of the source, the same on every Python")
class LayersTest(unittest.TestCase):
    def test_the_package_is_in_layers(self):
        self.assertTrue({"core.results", "system.launch", "gate.verdict", "run.session", "timeline.nightly",
                         "commands.run", "cli"} <= set(MODULES), sorted(MODULES))
        stray = [m.name for m in MODULES.values() if m.layer == "cli" and m.name not in ("cli", "__main__", "schema")]
        self.assertEqual(stray, [], "modules at the top of the package belong in a layer folder")

    def test_imports_go_down_the_layers_and_not_around_in_circles(self):
        problems = []
        rank = {layer: i for i, layer in enumerate(LAYERS)}
        for name, module in sorted(MODULES.items()):
            for line, target in driver_targets(module):
                if target not in MODULES:
                    problems.append(f"{where(module, line)}: imports meshgate.{target}, which does not exist")
                    continue
                other = MODULES[target]
                if module.layer == "root":
                    problems.append(f"{where(module, line)}: the package root imports meshgate.{target}")
                elif (module.layer == "impls") != (other.layer == "impls"):
                    problems.append(f"{where(module, line)}: the driver and the implementation adapters "
                                    f"do not import each other (meshgate.{target})")
                elif other.layer in ("root", "impls"):
                    continue
                elif rank[other.layer] > rank[module.layer]:
                    problems.append(f"{where(module, line)}: {module.layer} module meshgate.{name} imports "
                                    f"meshgate.{target} of the {other.layer} layer above it")
        for group in cycles(graph()):
            problems.append("import cycle: " + " -> ".join(f"meshgate.{n}" for n in group))
        self.assertEqual(problems, [], "\n".join(problems))

    def test_pure_modules_reach_no_process_no_database_and_no_system_layer(self):
        problems = []
        edges = graph()
        for name in PURE:
            self.assertIn(name, MODULES, f"meshgate.{name} is listed as pure but does not exist")
            for reached, chain in sorted(reach(name, edges).items()):
                module = MODULES[reached]
                via = " -> ".join(chain)
                if module.layer == "system":
                    problems.append(f"meshgate.{name} reaches the system layer: {via}")
                    continue
                for line, external in external_imports(module):
                    if external in PROCESS_MODULES + DATABASE_MODULES:
                        problems.append(f"meshgate.{name} reaches {external} ({where(module, line)}, via {via})")
                problems += [f"meshgate.{name} reaches a process call ({where(module, line)}, via {via})"
                             for line in process_calls(module)]
        self.assertEqual(problems, [], "\n".join(problems))

    def test_only_the_system_layer_starts_processes(self):
        problems = []
        for module in MODULES.values():
            if module.layer in ("system", "impls"):
                continue
            for line, external in external_imports(module):
                if external in PROCESS_MODULES:
                    problems.append(f"{where(module, line)}: imports {external} outside system/")
            problems += [f"{where(module, line)}: starts a process outside system/" for line in process_calls(module)]
        self.assertEqual(problems, [], "\n".join(problems))

    def test_no_module_is_shadowed_by_a_module_beside_it(self):
        # Run as a script (`python3 meshgate/<folder>/<file>.py`), a module's folder comes first
        # on sys.path: an absolute import of `bisect` would then load a bisect.py beside it.
        problems = []
        for module in MODULES.values():
            siblings = {p.stem for p in module.path.parent.glob("*.py")} - {"__init__"}
            for line, external in external_imports(module):
                if external in siblings:
                    problems.append(f"{where(module, line)}: `import {external}` would load "
                                    f"{module.path.parent.name}/{external}.py when run from its folder")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_the_checks_see_what_they_check(self):
        # The rules above would pass vacuously on a parser that found no imports.
        self.assertIn("core.results", graph()["gate.compare"] | reach("gate.compare", graph()).keys())
        self.assertIn("subprocess", {e for _, e in external_imports(MODULES["system.git"])})
        self.assertEqual(cycles({"a": {"b"}, "b": {"a"}, "c": set()}), [["a", "b"]])
        nested = [m for m in MODULES.values() if any(
            isinstance(n, (ast.Import, ast.ImportFrom)) for f in ast.walk(m.tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f))]
        for module in nested:  # imports inside functions are in the graph too
            inner = {line for f in ast.walk(module.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                     for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom)) for line in [n.lineno]}
            self.assertTrue(inner <= {line for line, *_ in module.imports()}, module.name)


if __name__ == "__main__":
    unittest.main()
