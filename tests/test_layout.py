"""The package's folders import only downward (the layers of the README's "Layout", from the ground up), and no
files import each other in a circle.

Every import in ``infercrane/`` (at the top of a module or inside a function) is read with ``ast``; an import of a
folder on a higher layer than the importing file's is a failure naming the file, the line and the module. Lazy
lookups by name (``receipts/registry.py``'s ``LAB_RULES``, ``kernels/registry.py``'s ops, the CLI's commands) are
not imports and are not counted: they are how a lower layer finds what a higher one declares.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "infercrane"

# the README's layout, bottom up: a top-level module or folder of infercrane/ -> its layer
LAYERS: dict[str, int] = {
    **dict.fromkeys(("errors", "hashing", "options", "datafiles", "proc"), 0),
    **dict.fromkeys(("stats", "models", "env"), 1),
    "decide": 2,
    "receipts": 3,
    "kernels": 4,
    "vllm_plugin": 5,
    "serving": 6,
    "poc": 7,
    **dict.fromkeys(("executors", "report"), 8),
    **dict.fromkeys(("commands", "cli", "__main__", "__init__"), 9),
}


def _part(module: str) -> str | None:
    """``infercrane.serving.ab`` -> ``serving``; None outside the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "infercrane" else None


@functools.lru_cache(maxsize=None)
def _is_module(dotted: str, root: Path | None = None) -> bool:
    path = (root or PACKAGE).parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved; ``from M import N`` is module
    ``M.N`` where N is a module of the package, else ``M``."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                if (node.lineno, sub if _is_module(sub, PACKAGE) else module) not in out:
                    out.append((node.lineno, sub if _is_module(sub, PACKAGE) else module))
    return out


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        for line, module in _imports(path):
            target = _part(module)
            if target is None or target == own or target not in LAYERS:  # not ours, ours, or a name (__version__)
                continue
            if LAYERS[target] > LAYERS[own]:
                found.append(f"infercrane/{rel}:{line} imports {module} ({target}: layer {LAYERS[target]} > "
                             f"{own}: layer {LAYERS[own]})")
    return found


def _module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts
    return ".".join(parts)


def circles() -> list[list[str]]:
    """Groups of files that import each other in a loop (an import inside a function counts), each sorted."""
    files = {_module_of(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for _, target in _imports(path):
            while target and target not in files:  # a name imported from a module: the module
                target = target.rpartition(".")[0]
            if target and target != mod and target != "infercrane":
                graph[mod].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_files_import_each_other_in_a_circle() -> None:
    assert circles() == []


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert names == set(LAYERS), f"give these a layer (and a line in the README's Layout): {names ^ set(LAYERS)}"


def test_nothing_imports_upward() -> None:
    assert upward_imports() == []


def test_an_upward_import_and_a_circle_are_found(tmp_path) -> None:
    """The checks themselves: a receipts module that imports the serving lab, and two serving modules that import
    each other (one inside a function), in a package laid out like ours."""
    pkg = tmp_path / "infercrane"
    (pkg / "receipts").mkdir(parents=True)
    (pkg / "serving").mkdir()
    for name in ("__init__.py", "receipts/__init__.py", "serving/__init__.py", "serving/ab.py"):
        (pkg / name).write_text("")
    (pkg / "receipts" / "validate.py").write_text("def f():\n    from ..serving.ab import run_ab\n")
    (pkg / "serving" / "ab.py").write_text("from .engine import Engine\n")
    (pkg / "serving" / "engine.py").write_text("def g():\n    from infercrane.serving import ab\n")
    global PACKAGE
    real, PACKAGE = PACKAGE, pkg
    try:
        assert upward_imports() == ["infercrane/receipts/validate.py:2 imports infercrane.serving.ab (serving: layer 6 "
                                    "> receipts: layer 3)"]
        assert circles() == [["infercrane.serving.ab", "infercrane.serving.engine"]]
    finally:
        PACKAGE = real
