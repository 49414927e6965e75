"""The package's folders are its layers: a module imports only from its own layer or the ones
below (commands -> lsp -> service -> engine, workspace, models, cluster -> base -> the
bindings), engine and workspace know nothing of each other, the protocol layer knows only the
service, and no imports go round a cycle.
Imports are read from the sources (inside functions and TYPE_CHECKING blocks too)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import lookahead_lsp

PACKAGE = Path(lookahead_lsp.__file__).parent
# Higher imports lower; the same rank may import itself only where SIDEWAYS allows.
RANKS = {
    "commands": 6,
    "lsp": 5,
    "service": 4,
    "cluster": 3,
    "engine": 2,
    "workspace": 2,
    "models": 2,
    "base": 1,
    "_lookup": 0,
}
# cluster builds what a folder lists, so it may read the workspace's listing.
SIDEWAYS = {("cluster", "workspace")}
# The protocol layer talks to the service alone: it never drives the engine or the index.
ONLY = {"lsp": {"service", "base", "_lookup"}}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """The lookahead_lsp modules path imports (a name imported from a package counts as the
    module of that name where there is one)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("lookahead_lsp"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lookahead_lsp"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield candidate if _exists(candidate) else node.module


def _exists(module: str) -> bool:
    relative = Path(*module.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").exists() or (PACKAGE / relative / "__init__.py").exists()


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package itself


def _graph() -> dict[str, set[str]]:
    return {
        _module_name(path): set(_imports(path)) - {_module_name(path)}
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_every_module_lives_in_a_layer() -> None:
    loose = sorted(m for m in _graph() if _layer(m) is not None and _layer(m) not in RANKS and m != "lookahead_lsp.__main__")
    assert loose == []


def test_no_import_goes_up_a_layer_or_sideways() -> None:
    wrong = []
    for module, imported in _graph().items():
        source = _layer(module)
        if source not in RANKS:
            continue
        for target in imported:
            layer = _layer(target)
            if layer is None or layer == source or layer not in RANKS:
                continue
            if RANKS[layer] > RANKS[source] or (RANKS[layer] == RANKS[source] and (source, layer) not in SIDEWAYS):
                wrong.append(f"{module} imports {target}")
            elif source in ONLY and layer not in ONLY[source]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_no_import_goes_round_a_cycle() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target == "lookahead_lsp" or target not in graph:
                continue
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []
