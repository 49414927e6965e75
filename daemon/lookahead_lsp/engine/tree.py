"""The candidates one pass verifies: a token tree rooted at the last accepted token, each node
tagged with where its guess came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass
class DraftTree:
    """Nodes in insertion order (parents before children); equal paths are merged."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)  # 0: a child of the root
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

    def branches(self) -> npt.NDArray[np.bool_]:
        """One column per leaf (in node order): [node, j] says whether the node lies on the
        path from the root to leaf j, i.e. belongs to that branch."""
        n = len(self.tokens)
        on_path = np.eye(n, dtype=bool)
        # Children come after their parents: walking backwards, a node's row is complete
        # before it is added to its parent's.
        for node in range(n - 1, -1, -1):
            parent = self.parents[node]
            if parent >= 0:
                on_path[parent] |= on_path[node]
        has_child = np.zeros(n, dtype=bool)
        has_child[[p for p in self.parents if p >= 0]] = True
        return on_path[:, ~has_child]

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
        self.depths.append(self.depths[parent] + 1 if parent >= 0 else 0)
        self._children[(parent, token)] = node
        return node
