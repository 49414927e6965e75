"""How long a static cache takes to open through the user's store: the first use (the file
checked, copied into the store, the copy verified) and the uses after it (the copy mapped).

The cache is built from random token documents (a vocabulary of the default model's size,
phrases repeated so that pairs have several followers, as source code gives them) to about
--mb megabytes, once, in --work. Each round opens it through a fresh store, then again through
the same store. The binding in use is whichever lookahead_lsp the interpreter imports: run it
with PYTHONPATH set to another build to compare two versions side by side.

    .venv/bin/python bench/store_open_bench.py [--mb 50] [--rounds 5] [--work DIR]
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from lookahead_lsp import _lookup

N_VOCAB = 262_144


def build(path: Path, megabytes: int) -> None:
    rng = np.random.default_rng(11)
    phrases = [rng.integers(0, N_VOCAB, size=16, dtype=np.int32) for _ in range(4096)]
    builder = _lookup.StaticCacheBuilder(N_VOCAB)
    # About 14 bytes of cache per new token drawn: 28 bytes a key, one key per two tokens.
    for _ in range(megabytes * (1 << 20) // 14 // 4096):
        picks = rng.integers(0, len(phrases), size=256)
        builder.add(np.concatenate([phrases[int(i)] if i % 2 else rng.integers(0, N_VOCAB, size=16, dtype=np.int32) for i in picks]))
    builder.write(str(path), 0)


def timed_open(path: Path, store: Path) -> tuple[float, str]:
    started = time.perf_counter()
    cache = _lookup.StaticCache.open(str(path), N_VOCAB, 0, store=str(store))
    cache.verify()
    return (time.perf_counter() - started) * 1e3, cache.storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "store-open-bench")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / f"random-{args.mb}.cache"
    if not path.exists():
        build(path, args.mb)
    first, later = [], []
    for _ in range(args.rounds):
        store = args.work / "store"
        shutil.rmtree(store, ignore_errors=True)
        ms, storage = timed_open(path, store)
        assert storage == "new copy", storage
        first.append(ms)
        ms, storage = timed_open(path, store)
        assert storage == "stored copy", storage
        later.append(ms)
    size_mb = path.stat().st_size / 1e6
    print(f"{size_mb:.0f} MB cache, {args.rounds} rounds, median (min-max) ms, open + verify:")
    print(f"  first use (checked, copied, copy verified)  {statistics.median(first):8.1f}  ({min(first):.1f}-{max(first):.1f})")
    print(f"  later uses (the copy mapped)                {statistics.median(later):8.2f}  ({min(later):.2f}-{max(later):.2f})")


if __name__ == "__main__":
    main()
