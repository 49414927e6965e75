"""The type stub of the native module (_lookup.pyi) names exactly what the module exports."""

from __future__ import annotations

import ast
from pathlib import Path

import lookahead_lsp
from lookahead_lsp import _lookup


def stub_names() -> dict[str, set[str]]:
    """Top-level names of the stub, each with the member names of classes."""
    stub = Path(lookahead_lsp.__file__).with_name("_lookup.pyi")
    tree = ast.parse(stub.read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = set()
    names.pop("TokenArray", None)
    return names


def test_stub_matches_module() -> None:
    names = stub_names()
    exported = {n for n in dir(_lookup) if not n.startswith("_")}
    assert set(names) == exported
    for name, members in names.items():
        for member in members - {"__init__", "__eq__"}:
            assert hasattr(getattr(_lookup, name), member), f"{name}.{member}"
        if members:
            public = {m for m in dir(getattr(_lookup, name)) if not m.startswith("_")}
            assert public <= members, f"{name} has members the stub lacks: {public - members}"
