"""A pure-Python reference for the native n-gram lookup core (`lookahead_lsp._lookup`).

Written to be obviously correct, not fast. It follows llama.cpp's prompt-lookup drafter
(`common/ngram-cache.cpp`, `llama-lookup-stats`) with the project's deterministic rules:

* A cache maps a key (a tuple of 1..4 token ids) to its followers {token: count}. Adding a token
  sequence with `first` counts, for every follower index i >= first and every n-gram size n <= i,
  key tokens[i-n:i] -> follower tokens[i]. `remove` undoes `add`.
* Drafting tries the context cache (lax thresholds) for n = 4..1, then the dynamic cache (strict
  thresholds) for n = 4..1, each follower's score being count * w with w = 100 * (its count among
  the static followers of the last two tokens) if it is one of them, else 1; then the static cache
  alone. Ties go to the lowest token id. Scores are Python ints: no overflow.

Also a few corpus helpers shared by the tests (a regex tokenizer over Python stdlib sources).
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the reference itself needs neither numpy nor the native module
    import numpy as np

    from lookahead_lsp import _lookup

NGRAM_MIN = 1
NGRAM_MAX = 4
STATIC_NGRAM = 2

# Context cache ("lax") and dynamic cache ("strict") thresholds, indexed by n-gram size.
LAX_MIN_SAMPLE = {1: 2, 2: 2, 3: 1, 4: 1}
LAX_MIN_PERCENT = {1: 66, 2: 50, 3: 50, 4: 50}
STRICT_MIN_SAMPLE = {1: 4, 2: 3, 3: 2, 4: 2}
STRICT_MIN_PERCENT = {1: 75, 2: 66, 3: 66, 4: 66}
# The static cache alone.
STATIC_MIN_SAMPLE = 2
STATIC_MIN_PERCENT = 50

Key = tuple[int, ...]


class RefCache:
    """key tuple -> {follower token: count}. `orders` are the n-gram sizes it counts:
    (1, 2, 3, 4) for a context/dynamic cache, (2,) for a static cache."""

    def __init__(self, orders: Sequence[int] = (1, 2, 3, 4)) -> None:
        self.orders = tuple(orders)
        self.data: dict[Key, dict[int, int]] = {}

    def _occurrences(self, tokens: Sequence[int], first: int) -> Iterable[tuple[Key, int]]:
        tokens = [int(t) for t in tokens]
        for n in self.orders:
            for i in range(max(first, n), len(tokens)):
                yield tuple(tokens[i - n : i]), tokens[i]

    def add(self, tokens: Sequence[int], first: int = 0) -> None:
        for key, tok in self._occurrences(tokens, first):
            followers = self.data.setdefault(key, {})
            followers[tok] = followers.get(tok, 0) + 1

    def remove(self, tokens: Sequence[int], first: int = 0) -> int:
        """Undo add(tokens, first); returns how many occurrences were not present."""
        missing = 0
        for key, tok in self._occurrences(tokens, first):
            followers = self.data.get(key)
            if followers is None or tok not in followers:
                missing += 1
                continue
            followers[tok] -= 1
            if followers[tok] == 0:
                del followers[tok]
                if not followers:
                    del self.data[key]
        return missing

    def merge(self, other: "RefCache") -> None:
        for key, followers in other.data.items():
            mine = self.data.setdefault(key, {})
            for tok, count in followers.items():
                mine[tok] = mine.get(tok, 0) + count

    def clear(self) -> None:
        self.data.clear()

    def copy(self) -> "RefCache":
        c = RefCache(self.orders)
        c.data = {k: dict(v) for k, v in self.data.items()}
        return c

    def followers(self, key: Sequence[int]) -> dict[int, int]:
        return self.data.get(tuple(int(t) for t in key), {})

    @property
    def n_keys(self) -> int:
        return len(self.data)

    @property
    def n_followers(self) -> int:
        return sum(len(f) for f in self.data.values())

    @property
    def total_count(self) -> int:
        return sum(sum(f.values()) for f in self.data.values())

    def sorted_items(self) -> list[tuple[Key, list[tuple[int, int]]]]:
        """Keys in ascending order of their -1-padded 4-tuples, followers by token id: the
        order of the native `to_arrays()`."""
        items = sorted(self.data.items(), key=lambda kv: padded(kv[0]))
        return [(k, sorted(f.items())) for k, f in items]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefCache) and self.data == other.data

    def __repr__(self) -> str:
        return f"RefCache({self.sorted_items()!r})"


def padded(key: Sequence[int]) -> tuple[int, ...]:
    return tuple(key) + (-1,) * (NGRAM_MAX - len(key))


def ref_cache_from_docs(docs: Iterable[Sequence[int]], orders: Sequence[int] = (1, 2, 3, 4)) -> RefCache:
    c = RefCache(orders)
    for d in docs:
        c.add(d)
    return c


def ref_static_from_docs(docs: Iterable[Sequence[int]]) -> RefCache:
    """The 2-gram counts of several documents (no 2-gram spans two documents)."""
    return ref_cache_from_docs(docs, orders=(STATIC_NGRAM,))


def ref_cache_from_arrays(
    keys: np.ndarray, offsets: np.ndarray, followers: np.ndarray, orders: Sequence[int] = (1, 2, 3, 4)
) -> RefCache:
    """A RefCache from a native `to_arrays()` triple (no checks: compare the result)."""
    c = RefCache(orders)
    key_rows = [[int(t) for t in row] for row in keys]
    bounds = [int(o) for o in offsets]
    pairs = [(int(t), int(n)) for t, n in followers]
    for i, row in enumerate(key_rows):
        key = tuple(t for t in row if t != -1)
        c.data[key] = {t: n for t, n in pairs[bounds[i] : bounds[i + 1]]}
    return c


# ---------------------------------------------------------------------------------------------
# Drafting


def _static_part(seq: Sequence[int], static: Optional[RefCache]) -> dict[int, int]:
    if static is None or len(seq) < STATIC_NGRAM:
        return {}
    return static.followers(seq[-STATIC_NGRAM:])


def _scored(followers: dict[int, int], weights: dict[int, int]) -> list[tuple[int, int, int]]:
    """(token, count, score) in ascending token order."""
    out = []
    for tok in sorted(followers):
        count = followers[tok]
        w = 100 * weights[tok] if tok in weights else 1
        out.append((tok, count, count * w))
    return out


def _best(scored: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """Highest score; ties to the first in ascending token order."""
    best = scored[0]
    for item in scored[1:]:
        if item[2] > best[2]:
            best = item
    return best


# Evidence sources, as draft_with_evidence numbers them.
SOURCE_CONTEXT, SOURCE_WORKSPACE, SOURCE_REPOSITORY = 0, 1, 2


def _candidate_keys(
    seq: Sequence[int],
    context: Optional[RefCache],
    dynamic: Optional[RefCache],
    static: Optional[RefCache],
) -> list[tuple[list[tuple[int, int, int]], int, int, int, int]]:
    """Every key to try, in priority order, as (scored followers, min_sample, min_percent,
    source, n)."""
    weights = _static_part(seq, static)
    keys = []
    for cache, min_sample, min_percent, source in (
        (context, LAX_MIN_SAMPLE, LAX_MIN_PERCENT, SOURCE_CONTEXT),
        (dynamic, STRICT_MIN_SAMPLE, STRICT_MIN_PERCENT, SOURCE_WORKSPACE),
    ):
        if cache is None:
            continue
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if n > len(seq):
                continue
            followers = cache.followers(seq[-n:])
            if not followers:
                continue
            keys.append((_scored(followers, weights), min_sample[n], min_percent[n], source, n))
    if static is not None and len(seq) >= STATIC_NGRAM:
        followers = static.followers(seq[-STATIC_NGRAM:])
        if followers:
            # The static cache alone: score = raw count.
            scored = [(tok, followers[tok], followers[tok]) for tok in sorted(followers)]
            keys.append((scored, STATIC_MIN_SAMPLE, STATIC_MIN_PERCENT, SOURCE_REPOSITORY, STATIC_NGRAM))
    return keys


def _qualifies(scored: list[tuple[int, int, int]], min_sample: int, min_percent: int) -> bool:
    total = sum(count for _, count, _ in scored)
    _, best_count, _ = _best(scored)
    return total >= min_sample and 100 * best_count >= min_percent * total


def _next_token(
    seq: Sequence[int],
    context: Optional[RefCache],
    dynamic: Optional[RefCache],
    static: Optional[RefCache],
) -> Optional[tuple[int, int, int, int, int]]:
    """(token, source, n, count, sum) of the first qualifying key, or None."""
    for scored, min_sample, min_percent, source, n in _candidate_keys(seq, context, dynamic, static):
        if _qualifies(scored, min_sample, min_percent):
            token, count, _ = _best(scored)
            return token, source, n, count, sum(c for _, c, _ in scored)
    return None


def ref_draft_evidence(
    tokens: Sequence[int],
    n_draft: int,
    context: Optional[RefCache] = None,
    dynamic: Optional[RefCache] = None,
    static: Optional[RefCache] = None,
) -> list[tuple[int, int, int, int, int]]:
    """ref_draft with each token's (token, source, n, count, sum)."""
    tokens = [int(t) for t in tokens]
    if len(tokens) < 2:
        return []
    seq = list(tokens)
    out: list[tuple[int, int, int, int, int]] = []
    while len(out) < n_draft:
        decision = _next_token(seq, context, dynamic, static)
        if decision is None:
            break
        out.append(decision)
        seq.append(decision[0])
    return out


def ref_draft(
    tokens: Sequence[int],
    n_draft: int,
    context: Optional[RefCache] = None,
    dynamic: Optional[RefCache] = None,
    static: Optional[RefCache] = None,
) -> list[int]:
    return [d[0] for d in ref_draft_evidence(tokens, n_draft, context, dynamic, static)]


def ref_root_candidates(
    tokens: Sequence[int],
    context: Optional[RefCache] = None,
    dynamic: Optional[RefCache] = None,
    static: Optional[RefCache] = None,
) -> list[int]:
    """All distinct qualifying next tokens in priority order (see ref_draft_tree)."""
    tokens = [int(t) for t in tokens]
    if len(tokens) < 2:
        return []
    out: list[int] = []
    for scored, min_sample, min_percent, _, _ in _candidate_keys(tokens, context, dynamic, static):
        if not _qualifies(scored, min_sample, min_percent):
            continue
        total = sum(count for _, count, _ in scored)
        best = _best(scored)
        others = [item for item in scored if item[0] != best[0] and 100 * item[1] >= min_percent * total]
        others.sort(key=lambda item: (-item[2], item[0]))
        for tok, _, _ in [best] + others:
            if tok not in out:
                out.append(tok)
    return out


def ref_draft_tree(
    tokens: Sequence[int],
    n_draft: int,
    max_branches: int = 3,
    context: Optional[RefCache] = None,
    dynamic: Optional[RefCache] = None,
    static: Optional[RefCache] = None,
) -> tuple[list[int], list[int]]:
    """(tokens, parents): branch 0 is ref_draft(tokens, n_draft); then, depth by depth along
    branch 0, each other qualifying candidate c for the token at depth k (in candidate order)
    starts a branch [c] + ref_draft(tokens + main[:k] + [c], n_draft - k - 1) whose first node's
    parent is main's node at depth k - 1 (-1 at depth 0), until there are max_branches. Nodes
    are listed branch by branch; inside a branch each node's parent is the node before it."""
    tokens = [int(t) for t in tokens]
    if n_draft <= 0 or max_branches <= 0:
        return [], []
    main = ref_draft(tokens, n_draft, context, dynamic, static)
    out_tokens = list(main)
    out_parents = [i - 1 for i in range(len(main))]
    n_branches = 1 if main else 0
    for k in range(len(main)):
        for cand in ref_root_candidates(tokens + main[:k], context, dynamic, static):
            if n_branches >= max_branches:
                return out_tokens, out_parents
            if cand == main[k]:
                continue
            branch = [cand] + ref_draft(tokens + main[:k] + [cand], n_draft - k - 1, context, dynamic, static)
            for j, tok in enumerate(branch):
                out_parents.append(k - 1 if j == 0 else len(out_tokens) - 1)
                out_tokens.append(tok)
            n_branches += 1
    return out_tokens, out_parents


# ---------------------------------------------------------------------------------------------
# llama-lookup-stats


def ref_best_path(tokens: list[int], parents: list[int], truth: list[int]) -> list[int]:
    """The tokens from the root to the deepest node whose whole path matches `truth` (the
    earliest such node on ties): what a tree verifier accepts."""
    depth: list[int] = []
    matched: list[bool] = []
    best = -1
    for i, (tok, parent) in enumerate(zip(tokens, parents)):
        depth.append(0 if parent == -1 else depth[parent] + 1)
        ok = (parent == -1 or matched[parent]) and depth[i] < len(truth) and tok == truth[depth[i]]
        matched.append(ok)
        if ok and (best == -1 or depth[i] > depth[best]):
            best = i
    path: list[int] = []
    while best != -1:
        path.append(tokens[best])
        best = parents[best]
    return path[::-1]


def ref_replay(
    tokens: Sequence[int],
    n_ctx: int,
    n_draft: int,
    dynamic: Optional[RefCache] = None,
    static: Optional[RefCache] = None,
    max_branches: int = 1,
) -> dict[str, int]:
    """llama-lookup-stats over pre-tokenized text; `dynamic` is updated in place. With
    max_branches > 1 each step drafts a tree and keeps its longest matching path, counting all
    of the tree's nodes as drafted."""
    tokens = [int(t) for t in tokens]
    n_drafted = 0
    n_accept = 0
    context = RefCache()
    i_start = 0
    while i_start + n_ctx < len(tokens):
        chunk = tokens[i_start : i_start + n_ctx]
        out = [chunk[0]]
        while len(out) < n_ctx:
            if max_branches > 1:
                tree, parents = ref_draft_tree(out, n_draft, max_branches, context, dynamic, static)
                d, n_nodes = ref_best_path(tree, parents, chunk[len(out) :]), len(tree)
            else:
                d = ref_draft(out, n_draft, context, dynamic, static)
                n_nodes = len(d)
            n_drafted += n_nodes
            for tok in d:
                if len(out) >= n_ctx or tok != chunk[len(out)]:
                    break
                n_accept += 1
                out.append(tok)
                context.add(out, first=len(out) - 1)
            if len(out) < n_ctx:
                out.append(chunk[len(out)])
                context.add(out, first=len(out) - 1)
        if dynamic is not None:
            dynamic.merge(context)
        context.clear()
        i_start += n_ctx
    return {
        "n_predict": len(tokens) - len(tokens) % n_ctx if n_ctx > 0 else 0,
        "n_drafted": n_drafted,
        "n_accept": n_accept,
    }


# ---------------------------------------------------------------------------------------------
# Real code as token ids

# The running interpreter's own standard library sources: real code found on any machine.
STDLIB_DIR = sysconfig.get_paths()["stdlib"]
_TOKEN_RE = re.compile(r"\w+|\n|[^\w\s]")


def stdlib_path(name: str) -> str:
    return os.path.join(STDLIB_DIR, name)


def stdlib_available(*names: str) -> bool:
    return all(os.path.isfile(stdlib_path(n)) for n in names)


def words(text: str) -> list[str]:
    """A crude code tokenizer: identifiers/numbers, newlines, single punctuation characters."""
    return _TOKEN_RE.findall(text)


class Vocab:
    """Word -> id, growing as it sees new words."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.ids.setdefault(w, len(self.ids)) for w in words(text)]

    def encode_file(self, name: str) -> list[int]:
        with open(stdlib_path(name), encoding="utf-8") as f:
            return self.encode(f.read())

    def __len__(self) -> int:
        return len(self.ids)


def ref_from_native(cache: _lookup.NgramCache | _lookup.StaticCache, orders: Sequence[int] = (1, 2, 3, 4)) -> RefCache:
    """A RefCache holding what a native NgramCache / StaticCache holds (via `to_arrays()`)."""
    return ref_cache_from_arrays(*cache.to_arrays(), orders=orders)
