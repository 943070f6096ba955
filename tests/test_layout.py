"""The package's folders import only downward: the layers of the README's "Layout", from the ground up.

Every import in ``infercrane/`` (at the top of a module or inside a function) is read with ``ast``; an import of a
folder on a higher layer than the importing file's is a failure naming the file, the line and the module. Lazy
lookups by name (``receipts/registry.py``'s ``LAB_RULES``, ``kernels/registry.py``'s ops, the CLI's commands) are
not imports and are not counted: they are how a lower layer finds what a higher one declares.
"""
from __future__ import annotations

import ast
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


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative ones resolved."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                out += [(node.lineno, f"{module}.{a.name}") for a in node.names] if node.module is None else \
                    [(node.lineno, module)]
            else:
                out.append((node.lineno, node.module or ""))
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


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert names == set(LAYERS), f"give these a layer (and a line in the README's Layout): {names ^ set(LAYERS)}"


def test_nothing_imports_upward() -> None:
    assert upward_imports() == []


def test_an_upward_import_is_found(tmp_path) -> None:
    """The check itself: a receipts module that imports the serving lab, in a package laid out like ours."""
    pkg = tmp_path / "infercrane"
    (pkg / "receipts").mkdir(parents=True)
    (pkg / "serving").mkdir()
    for name in ("__init__.py", "receipts/__init__.py", "serving/__init__.py", "serving/ab.py"):
        (pkg / name).write_text("")
    (pkg / "receipts" / "validate.py").write_text("def f():\n    from ..serving.ab import run_ab\n")
    global PACKAGE
    real, PACKAGE = PACKAGE, pkg
    try:
        assert upward_imports() == ["infercrane/receipts/validate.py:2 imports infercrane.serving.ab (serving: layer 6 "
                                    "> receipts: layer 3)"]
    finally:
        PACKAGE = real
