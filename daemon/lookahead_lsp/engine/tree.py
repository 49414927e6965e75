"""The candidates one pass verifies: a token tree rooted at the last accepted token, each node
tagged with where its guess came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Indices into SOURCES; the first three are the lookup core's evidence source ids. "previous":
# the rest of the last completion, when the user has typed its beginning.
SOURCES = ("context", "workspace", "repository", "window", "previous")
WINDOW = 3
PREVIOUS = 4


@dataclass
class DraftTree:
    """Nodes in insertion order (parents before children); equal paths are merged."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    _children: dict[tuple[int, int], int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    def child(self, parent: int, token: int) -> int | None:
        """The node under `parent` (-1: the root) holding `token`, if any."""
        return self._children.get((parent, token))

    def add_path(self, tokens: Sequence[int], sources: Sequence[int], max_nodes: int) -> None:
        """Adds a path from the root, sharing the nodes it has in common with earlier paths;
        stops where the tree would exceed max_nodes."""
        parent = -1
        for token, source in zip(tokens, sources):
            node = self._children.get((parent, token))
            if node is None:
                if len(self.tokens) >= max_nodes:
                    return
                node = self._append(parent, token, source)
            parent = node

    def add_tree(
        self, tokens: Sequence[int], parents: Sequence[int], sources: Sequence[int], max_nodes: int
    ) -> None:
        """Adds a tree given as parallel lists (parents before children, -1 for the root)."""
        mapped: list[int] = []
        for token, parent, source in zip(tokens, parents, sources):
            at = mapped[parent] if parent >= 0 else -1
            if at == -2:  # its parent did not fit
                mapped.append(-2)
                continue
            node = self._children.get((at, token))
            if node is None:
                node = self._append(at, token, source) if len(self.tokens) < max_nodes else -2
            mapped.append(node)

    def leaves(self) -> list[int]:
        has_child = set(parent for parent in self.parents if parent >= 0)
        return [i for i in range(len(self.tokens)) if i not in has_child]

    def depth(self, node: int) -> int:
        d = 0
        while self.parents[node] >= 0:
            node = self.parents[node]
            d += 1
        return d

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node`."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def accepted_path(self, root_choice: int, choices: Sequence[int]) -> list[int]:
        """The longest path the model agrees with: starting from the root, follow the child
        holding the model's choice at the current node (choices[i]: its choice after node i)."""
        path: list[int] = []
        node = self._children.get((-1, root_choice))
        while node is not None:
            path.append(node)
            node = self._children.get((node, choices[node]))
        return path

    def _append(self, parent: int, token: int, source: int) -> int:
        node = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.sources.append(source)
        self._children[(parent, token)] = node
        return node
