"""The layout holds: no import cycle among iobench's modules (modules are split by what they hold, not by a line
count), and the command line (iobench/cli/) holds no measuring code: it imports nothing of iobench.phases."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "iobench"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("iobench", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """The iobench modules a module imports when it is loaded (its top level, if/try blocks included; not the
    imports inside functions, which run later, nor those for types only, under TYPE_CHECKING, which never run).
    `from pkg import name` depends on pkg.name when that is a module (its package's __init__ runs first, but imports
    nothing of the importer's), else on pkg."""
    found: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            body += node.orelse
        elif isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + getattr(node, "finalbody", []) + [
                n for h in getattr(node, "handlers", []) for n in h.body]
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)
    return found


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {m: _imports(ast.parse(p.read_text()), modules) - {m} for m, p in modules.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_command_line_imports_nothing_of_the_phases() -> None:
    """iobench/cli/ is click only: a measured run is iobench.session's. Every import counts, inside functions too."""
    found = []
    for path in sorted((PACKAGE / "cli").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{path.name}: {n}" for n in names if n == "iobench.phases" or n.startswith("iobench.phases.")]
    assert found == [], f"iobench/cli/ imports the phases (go through iobench.session): {found}"


# What each package may import: its own layer and those below (docs/architecture.md draws them). Imports for types
# only (under TYPE_CHECKING) do not count; imports inside functions do.
LAYERS = [
    {"iobench", "errors"},
    {"safefs"},
    {"result_fields", "result_runs", "result"},
    {"host", "record", "s3"},
    {"dataset"},
    {"sources"},
    {"store", "engines", "pipelines"},
    {"gpu", "workload", "answer", "report", "ui", "output", "progress"},
    {"phases"},
    {"distributed"},
    {"session"},
    {"cli", "__main__"},
]


def _runtime_imports(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    types_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                  and node.test.id == "TYPE_CHECKING" for n in ast.walk(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in types_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            found |= {f"{node.module}.{a.name}" for a in node.names} & modules.keys() or {node.module}
    return found


def test_each_package_imports_only_its_layer_and_those_below() -> None:
    modules = _modules()
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}

    def home(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "iobench"

    assert {home(m) for m in modules} <= layer.keys(), "a new package: put it in LAYERS"
    upward = sorted(f"{m} imports {d}" for m, p in modules.items()
                    for d in _runtime_imports(ast.parse(p.read_text()), modules)
                    if layer[home(d)] > layer[home(m)])
    assert upward == [], "imports from a higher layer: " + "; ".join(upward)


def test_tests_say_what_they_hold_not_which_issue_asked() -> None:
    """A test names the behaviour it holds: an issue number means nothing to a reader of the tree."""
    import re

    here = Path(__file__).resolve().parent
    cited = [f"{p.name}:{n}" for p in sorted(here.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bissues? \d+", line)]
    assert not cited, cited


# The object backend: the only modules that may import the S3 client modules or know that a location is a bucket
# (store/ is the one interface and picks the backend; s3/ holds the clients; these sources read objects).
OBJECT_SOURCES = ("sources/s3.py", "sources/s3_tar.py", "sources/pack_s3.py")
OBJECT_BACKEND = ("store/", "s3/", *OBJECT_SOURCES)
S3_MODULES = ("iobench.s3", "iobench.store.s3", *(f"iobench.{p[:-3].replace('/', '.')}" for p in OBJECT_SOURCES))
# These read what a result recorded of where it ran (`result.mount.objects`: its words, columns and figures), and
# import nothing of the backend.
RESULT_READERS = ("answer/", "report/", "ui.py")


def _asks_the_backend(source: str, reads_results: bool = False) -> list[str]:
    """What in a module's source imports the object backend (any import, in a function or for types only too) or
    asks which backend it has (`S3Location`, a mount's or store's `.objects`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
                 if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        found += [f"imports {n}" for n in names if any(n == m or n.startswith(m + ".") for m in S3_MODULES)]
        if isinstance(node, ast.Name) and node.id == "S3Location":
            found.append(f"line {node.lineno}: S3Location")
        if isinstance(node, ast.Attribute) and node.attr == "objects" and not reads_results:
            found.append(f"line {node.lineno}: .objects")
    return found


def test_nothing_outside_the_store_asks_which_backend_it_has() -> None:
    """Files on a mount and objects behind an endpoint are two backends of one Store: the runtime layers (phases,
    sources, session, the command line, datasets, distributed) read through it and never import the S3 backend nor
    check which backend they have; the result's readers read the recorded mount, no more."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(OBJECT_BACKEND):
            found += [f"{rel}: {what}" for what in _asks_the_backend(path.read_text(), rel.startswith(RESULT_READERS))]
    assert found == [], f"outside the store, a module asks which backend it has (ask the Store): {found}"


def test_the_backend_check_sees_each_way_of_asking() -> None:
    asked = _asks_the_backend("from iobench.s3 import url\nimport iobench.sources.s3_tar\ndef f(x):\n"
                              "    from iobench.store.s3 import S3Store\n    return isinstance(x, S3Location)\n"
                              "y = result.mount.objects\n")
    assert sorted(asked) == ["imports iobench.s3", "imports iobench.s3.url", "imports iobench.sources.s3_tar",
                     "imports iobench.store.s3", "imports iobench.store.s3.S3Store", "line 5: S3Location",
                     "line 6: .objects"], asked
    assert _asks_the_backend("y = result.mount.objects\n", reads_results=True) == []
    assert _asks_the_backend("from iobench import store\nwhere = store.open(root)\nwhere.items\n") == []
