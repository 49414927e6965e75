"""Benchmark of the native lookup core on a corpus every machine has: all .py files under the
Python installation's lib/. A fixed slice (1 file in 100, chosen by a hash of its path) is held
out as the replay text; the rest becomes the static cache.

    .venv/bin/python bench/lookup_bench.py [--upstream-bin DIR] [--repeat 7]

Measures, side by side in one run (medians of --repeat runs): drafting us per drafted token at
n_draft 8 and 3 with and without the static cache (llama-lookup-stats' method), static cache
open / verify time, resident memory of the mapping, file size against upstream's format for
the same counts, build time and peak memory, and dynamic-cache add / remove of a 10,000-token
file. With --upstream-bin (a folder holding llama.cpp's llama-lookup-stats), runs upstream on
the same replay text and static cache too. Every figure comes with a correctness check.
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import hashlib
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lookahead_lsp._lookup import NgramCache, StaticCache, replay
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_files

HELD_OUT_ONE_IN = 100
N_CTX = 4096
DYNAMIC_WORKSPACE_TOKENS = (100_000, 1_000_000, 5_000_000)
EDIT_FILE_TOKENS = 10_000


def corpus_files() -> list[Path]:
    lib = Path(sys.base_prefix) / "lib"
    return sorted(p for p in lib.rglob("*.py") if p.is_file() and not p.is_symlink())


def is_held_out(path: Path) -> bool:
    return int(hashlib.sha1(str(path).encode()).hexdigest(), 16) % HELD_OUT_ONE_IN == 0


def tokenized_corpus(work: Path, model: Path, files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens of every file concatenated, offsets) cached on disk: tokenizing 160 MB takes a
    minute and is not what this benchmark measures."""
    key = hashlib.sha1((str(model) + "\n".join(map(str, files))).encode()).hexdigest()[:16]
    cached = work / f"corpus-{key}.npz"
    if cached.exists():
        with np.load(cached) as z:
            return z["tokens"], z["offsets"]
    started = time.perf_counter()
    index = {p: i for i, p in enumerate(files)}
    arrays: list[np.ndarray] = [np.empty(0, np.int32)] * len(files)
    total_bytes = 0
    for path, tokens, n_bytes in tokenize_files(model, files, jobs=2):
        if tokens is not None:
            arrays[index[path]] = tokens
            total_bytes += n_bytes
    seconds = time.perf_counter() - started
    print(f"tokenized {len(files)} files, {total_bytes / 1e6:.1f} MB in {seconds:.1f} s "
          f"({total_bytes / 1e6 / seconds:.2f} MB/s, {len(files) / seconds:.0f} files/s, 2 jobs)")
    offsets = np.zeros(len(files) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrays])
    tokens = np.concatenate(arrays)
    np.savez(cached, tokens=tokens, offsets=offsets)
    return tokens, offsets


BUILD_CHILD = """
import sys, time, numpy as np
from lookahead_lsp._lookup import StaticCacheBuilder
def hwm():  # peak resident set of this process image (ru_maxrss would count the forked parent)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
path, out, n_vocab, fingerprint, docs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
offsets = np.load(docs)
base = hwm()
started = time.perf_counter()
builder = StaticCacheBuilder(n_vocab)
with open(path, "rb") as f:
    for begin, end in zip(offsets[:-1], offsets[1:]):
        f.seek(int(begin) * 4)
        builder.add(np.fromfile(f, dtype=np.int32, count=int(end - begin)))
header = builder.write(out, fingerprint)
seconds = time.perf_counter() - started
print(seconds, hwm() - base, header["n_keys"], header["n_followers"])
"""


def build_static(work: Path, tokens: np.ndarray, docs: list[tuple[int, int]], n_vocab: int,
                 fingerprint: int) -> tuple[Path, float, int]:
    """Builds in a child process that reads one document at a time, so that its peak resident
    memory above its start is the builder's own."""
    raw = work / "held_in_tokens.bin"
    kept = np.concatenate([tokens[b:e] for b, e in docs])
    kept.tofile(raw)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([e - b for b, e in docs])
    np.save(work / "held_in_offsets.npy", offsets)
    out = work / "static.cache"
    result = subprocess.run(
        [sys.executable, "-c", BUILD_CHILD, str(raw), str(out), str(n_vocab), str(fingerprint),
         str(work / "held_in_offsets.npy")],
        check=True, capture_output=True, text=True,
    )
    seconds, peak_bytes, _, _ = result.stdout.split()
    raw.unlink()
    return out, float(seconds), int(peak_bytes)


def mapping_resident_bytes(path: Path) -> int:
    """Resident memory of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and all(c in "0123456789abcdef-" for c in first):
                inside = line.rstrip().endswith(str(path.resolve()))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def median_replay(tokens: np.ndarray, n_draft: int, static: StaticCache | None, n_vocab: int,
                  repeat: int) -> dict[str, float]:
    runs = [replay(tokens, N_CTX, n_draft, NgramCache(n_vocab), static) for _ in range(repeat)]
    first = runs[0]
    # Drafting is deterministic: every run must make the same decisions.
    assert all((r["n_drafted"], r["n_accept"]) == (first["n_drafted"], first["n_accept"]) for r in runs)
    us = statistics.median(r["draft_ns"] / 1000 / max(r["n_drafted"], 1) for r in runs)
    return {"n_drafted": first["n_drafted"], "n_accept": first["n_accept"],
            "accept_pct": 100 * first["n_accept"] / max(first["n_drafted"], 1), "us_per_token": us}


def check_static_matches(static: StaticCache, tokens: np.ndarray, docs: list[tuple[int, int]]) -> None:
    """Every 2-gram of a sample of the indexed documents is in the static cache, with at least
    the count it has in the sample (other documents may add to it)."""
    sample = docs[:: max(1, len(docs) // 50)]
    for b, e in sample:
        doc = tokens[b:e]
        counts: dict[tuple[int, int, int], int] = {}
        for i in range(2, len(doc)):
            k = (int(doc[i - 2]), int(doc[i - 1]), int(doc[i]))
            counts[k] = counts.get(k, 0) + 1
        for (t0, t1, f), c in list(counts.items())[:200]:
            followers = static.followers(t0, t1)
            row = followers[followers[:, 0] == f]
            assert len(row) == 1 and row[0, 1] >= c, (t0, t1, f, c, followers)


def dynamic_edit_ms(tokens: np.ndarray, workspace_tokens: int, n_vocab: int,
                    repeat: int) -> dict[str, float]:
    """Median time to add, then remove, a 10,000-token file never seen before (the next slices
    of the corpus) in a workspace cache of `workspace_tokens`; the cache must come back equal."""
    workspace = NgramCache(n_vocab)
    workspace.add(tokens[:workspace_tokens])
    before = workspace.to_arrays()
    add_ms, remove_ms = [], []
    for r in range(repeat * 4):
        start = workspace_tokens + r * EDIT_FILE_TOKENS
        edit = tokens[start:start + EDIT_FILE_TOKENS]
        t0 = time.perf_counter()
        workspace.add(edit)
        t1 = time.perf_counter()
        missing = workspace.remove(edit)
        t2 = time.perf_counter()
        assert missing == 0
        add_ms.append((t1 - t0) * 1000)
        remove_ms.append((t2 - t1) * 1000)
    after = workspace.to_arrays()
    assert all(np.array_equal(a, b) for a, b in zip(before, after)), "add + remove changed the cache"
    return {"workspace_keys": workspace.n_keys, "memory_mb": workspace.memory_bytes / 1e6,
            "add_ms_median": statistics.median(add_ms), "remove_ms_median": statistics.median(remove_ms)}


def run_upstream(bin_dir: Path, text: Path, static_upstream: Path | None, model: Path,
                 n_draft: int) -> dict[str, float]:
    cmd = [str(bin_dir / "llama-lookup-stats"), "-m", str(model), "-f", str(text), "-c", str(N_CTX),
           "--spec-draft-n-max", str(n_draft), "-t", "1"]
    if static_upstream is not None:
        cmd += ["-lcs", str(static_upstream)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    log = out.stdout + out.stderr
    def field(name: str) -> float:
        m = re.search(rf"{name}\s*=\s*([0-9.]+)", log)
        if m is None:
            raise RuntimeError(f"upstream output lacks {name}:\n{log[-2000:]}")
        return float(m.group(1))
    us = re.search(r"t_draft\s*=\s*[0-9.]+ ms, ([0-9.]+) us per token", log)
    return {"n_drafted": field("n_drafted"), "n_accept": field("n_accept"), "accept_pct": field(r"\saccept"),
            "us_per_token": float(us.group(1)) if us else float("nan"), "load_ms": field("t_draft_flat")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="build/bench", help="folder for cached tokens and caches")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--upstream-bin", type=Path, help="folder with llama.cpp's llama-lookup-stats")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model = resolve_model_path(None)
    results: dict[str, object] = {}

    files = corpus_files()
    held_out = [i for i, p in enumerate(files) if is_held_out(p)]
    with Tokenizer(model) as tokenizer:
        n_vocab, fingerprint = tokenizer.n_vocab, tokenizer.fingerprint
        tokens, offsets = tokenized_corpus(work, model, files)
        text = work / "replay.txt"
        text.write_bytes(b"".join(files[i].read_bytes() for i in held_out))
        # One call, as llama-lookup-stats tokenizes (the CLI cuts pieces at line ends, which is
        # much faster and changes a token or so per cut), so the two replay identical tokens.
        replay_tokens = tokenizer.tokenize(text.read_bytes(), add_special=True, parse_special=True)
    held = set(held_out)
    docs = [(int(offsets[i]), int(offsets[i + 1])) for i in range(len(files)) if i not in held]
    results["corpus"] = {"files": len(files), "tokens": int(len(tokens)), "held_out_files": len(held_out),
                         "replay_bytes": text.stat().st_size, "replay_tokens": int(len(replay_tokens))}

    path, build_s, build_peak = build_static(work, tokens, docs, n_vocab, fingerprint)
    opens = []
    for _ in range(21):
        t0 = time.perf_counter()
        probe = StaticCache.open(str(path), n_vocab, fingerprint)
        opens.append((time.perf_counter() - t0) * 1000)
        probe.close()
    static = StaticCache.open(str(path), n_vocab, fingerprint)
    t0 = time.perf_counter()
    static.verify()
    verify_ms = (time.perf_counter() - t0) * 1000
    check_static_matches(static, tokens, docs)
    header = static.header
    upstream_file = work / "static.upstream.bin"
    static.save_upstream(str(upstream_file))
    results["static"] = {
        "keys": header["n_keys"], "followers": header["n_followers"], "file_mb": header["file_size"] / 1e6,
        "upstream_format_mb": upstream_file.stat().st_size / 1e6,
        "build_s": build_s, "build_peak_mb": build_peak / 1e6,
        "build_peak_over_file": build_peak / header["file_size"],
        "open_ms_median": statistics.median(opens[1:]), "verify_ms": verify_ms,
    }

    for n_draft in (8, 3):
        results[f"n_draft={n_draft} no static"] = median_replay(replay_tokens, n_draft, None, n_vocab, args.repeat)
        results[f"n_draft={n_draft} static"] = median_replay(replay_tokens, n_draft, static, n_vocab, args.repeat)
    # A mapping cannot hold more than its file; verify() has read all of it.
    results["static"]["mapping_resident_mb"] = mapping_resident_bytes(path) / 1e6  # type: ignore[index]

    for size in DYNAMIC_WORKSPACE_TOKENS:
        results[f"dynamic, workspace of {size} tokens"] = dynamic_edit_ms(tokens, size, n_vocab, args.repeat)

    if args.upstream_bin:
        for n_draft in (8, 3):
            for variant, cache in (("no static", None), ("static", upstream_file)):
                up = run_upstream(args.upstream_bin, text, cache, model, n_draft)
                ours = results[f"n_draft={n_draft} {variant}"]
                up["speedup_ours_vs_upstream"] = up["us_per_token"] / ours["us_per_token"]  # type: ignore[index]
                results[f"upstream n_draft={n_draft} {variant}"] = up
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
