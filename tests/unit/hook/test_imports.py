"""The hook's import graph, read from the source (every import: module level, function-local and
``TYPE_CHECKING`` alike): acyclic inside ``diag/hook/``, and closed over stdlib + torch + diag's
contracts, so the training process never loads the analysis side."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import diag

PACKAGE = Path(diag.__file__).parent
HOOK = PACKAGE / "hook"
#: What a hook module may import from diag besides diag.hook itself (a prefix matches submodules).
CONTRACTS = ("diag.schema", "diag.config", "diag.errors", "diag.fsutil", "diag.flight_recorder",
             "diag.kernel_category", "diag.transport", "diag.proto")  # fmt: skip
THIRD_PARTY = {"torch"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports; ``from package import module`` counts as the module."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if _is_module(full) else base)
    return out


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(HOOK.rglob("*.py"))}


def test_the_hook_package_has_no_import_cycle() -> None:
    graph = _graph()
    inside = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError(
                "import cycle: " + " -> ".join([*path[path.index(module) :], module])
            )
        if module in done:
            return
        for dep in sorted(inside[module]):
            visit(dep, [*path, module])
        done.add(module)

    for module in sorted(inside):
        visit(module, [])


def test_the_hook_imports_only_stdlib_torch_and_the_contracts() -> None:
    stray = {}
    for module, deps in _graph().items():
        bad = sorted(
            d
            for d in deps
            if not (
                d.split(".")[0] in sys.stdlib_module_names
                or d.split(".")[0] in THIRD_PARTY
                or d == "diag.hook"
                or d.startswith("diag.hook.")
                or any(d == c or d.startswith(c + ".") for c in CONTRACTS)
            )
        )
        if bad:
            stray[module] = bad
    assert not stray
