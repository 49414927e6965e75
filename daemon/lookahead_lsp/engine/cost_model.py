"""What one model pass costs as a function of how many positions it verifies: a seed curve
measured once per machine, model and thread count and kept on disk, then followed online
(OnlineCost) from the timings of the passes the engine really runs.

On a 2-core CPU a pass with 8 verified positions costs ~3.7 passes of one, on a GPU barely more
than one, and the same machine's curve moves with its load: the speculation policy must be
sized from today's timings, never from assumptions."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from lookahead_lsp.base.cache_files import atomic_writer, default_cache_dir
from lookahead_lsp.engine.runtime import MAIN_SEQ, ModelRuntime
from lookahead_lsp.engine.stages import MEASURING

_LOG = logging.getLogger(__name__)
FORMAT_VERSION = 1
# Batch sizes measured (every position with logits, as verification needs).
MEASURED_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
_REPEATS = 3
_CONTEXT_TOKENS = 384
_SAMPLE_CODE = (
    "def total(items):\n    result = 0\n    for item in items:\n        result += item.price\n"
    "    return result\n\n\nclass Cart:\n    def __init__(self):\n        self.items = []\n\n"
)


@dataclass(frozen=True)
class CostModel:
    """Milliseconds of one pass (decode + the model's choice at every position) by its number of
    positions, all with logits."""

    sizes: tuple[int, ...]
    ms: tuple[float, ...]

    def pass_ms(self, positions: int) -> float:
        """Interpolated linearly between measured sizes, extrapolated from the last two."""
        sizes, ms = self.sizes, self.ms
        if positions <= sizes[0]:
            return ms[0]
        for i in range(1, len(sizes)):
            if positions <= sizes[i]:
                left, right = sizes[i - 1], sizes[i]
                return ms[i - 1] + (ms[i] - ms[i - 1]) * (positions - left) / (right - left)
        slope = (ms[-1] - ms[-2]) / (sizes[-1] - sizes[-2])
        return ms[-1] + slope * (positions - sizes[-1])

    def relative(self, positions: int) -> float:
        """A pass of `positions` in units of a one-position pass."""
        return self.pass_ms(positions) / self.ms[0]


# How fast the online curve follows the machine. Every pass moves the common level by this share
# of its (clipped) log error: a change of load shows within ~10 passes whatever their sizes.
_LEVEL_RATE = 0.15
# A size's own correction moves slower: it learns the curve's shape (the fixed per-pass work
# weighs most on small passes) without taking a load change seen only at one size for its own.
_SIZE_RATE = 0.04
# One pass more than e^0.5 = 1.65x off the estimate counts as 1.65x off: a burst of load or a
# page fault moves the curve by a few percent, a lasting change within a few dozen passes.
_MAX_LOG_ERROR = 0.5
_MAX_POSITIONS = 4096


class OnlineCost:
    """The seed curve scaled by what passes cost today. For a pass of s positions,
    log ms(s) = log seed(s) + level + offset(s): `level` follows the whole machine (every pass
    updates it), `offset(s)` the sizes that were run (the fixed per-pass work of the engine's
    loop, which the seed's bare decodes lack). Sizes never run take their offset from the
    nearest run sizes (linear between, flat beyond), so they move with the level and keep the
    seed's shape."""

    def __init__(self, seed: CostModel, level: float = 0.0, offsets: dict[int, float] | None = None) -> None:
        self.seed = seed
        self.level = level
        self.offsets: dict[int, float] = dict(offsets or {})
        self._curve: CostModel | None = None

    def observe(self, positions: int, ms: float) -> None:
        """A pass of `positions` positions (all with logits) took `ms`, loop work included."""
        if not 1 <= positions <= _MAX_POSITIONS or not math.isfinite(ms) or ms <= 0:
            return
        error = math.log(ms) - math.log(self.pass_ms(positions))
        error = max(-_MAX_LOG_ERROR, min(_MAX_LOG_ERROR, error))
        self.level += _LEVEL_RATE * error
        self.offsets[positions] = self._offset(positions) + _SIZE_RATE * error
        self._curve = None

    @property
    def curve(self) -> CostModel:
        """Today's curve over the seed's sizes and every size run (never cheaper for more
        positions)."""
        if self._curve is None:
            sizes = sorted(set(self.seed.sizes) | set(self.offsets))
            scale = math.exp(self.level)
            ms = tuple(self.seed.pass_ms(s) * scale * math.exp(self._offset(s)) for s in sizes)
            self._curve = CostModel(tuple(sizes), _monotonic(ms))
        return self._curve

    def pass_ms(self, positions: int) -> float:
        return self.curve.pass_ms(positions)

    def relative(self, positions: int) -> float:
        return self.curve.relative(positions)

    def _offset(self, positions: int) -> float:
        if not self.offsets:
            return 0.0
        if positions in self.offsets:
            return self.offsets[positions]
        run = sorted(self.offsets)
        if positions < run[0]:
            return self.offsets[run[0]]
        if positions > run[-1]:
            return self.offsets[run[-1]]
        right = next(s for s in run if s > positions)
        left = max(s for s in run if s < positions)
        share = (positions - left) / (right - left)
        return self.offsets[left] + (self.offsets[right] - self.offsets[left]) * share


def machine_key(runtime: ModelRuntime) -> dict[str, object]:
    """Everything that changes the curve: the model file, threads, GPU offload, where the argmax
    is taken, the CPU and llama.cpp's version."""
    path = runtime.settings.model_path
    stat = path.stat()
    return {
        "format": FORMAT_VERSION,
        "model": str(path.resolve()),
        "model_size": stat.st_size,
        "model_mtime_ns": stat.st_mtime_ns,
        "threads": runtime.settings.threads,
        "gpu_layers": runtime.settings.n_gpu_layers if runtime.gpu_offload else 0,
        "sampling": runtime.sampling,
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "llama_cpp": llama_cpp.__version__,
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_or_measure(
    runtime: ModelRuntime, cache_dir: Path | None, report: Callable[[str], None] | None = None
) -> CostModel:
    """The cost model for this runtime: read from cache_dir if measured before, else measured
    now (a few seconds; report says so first) and saved there atomically. A cache file that
    cannot be read is measured again, with a warning."""
    key = machine_key(runtime)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = (cache_dir or default_cache_dir()) / f"cost-{digest}.json"
    if path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("key") == key:
                return CostModel(tuple(data["sizes"]), tuple(float(x) for x in data["ms"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            _LOG.warning("%s: unreadable cost model, measuring again (%s)", path, error)
    if report is not None:
        report(MEASURING)
    model = measure(runtime)
    try:
        with atomic_writer(path) as out:
            out.write(json.dumps({"key": key, **asdict(model)}, indent=1).encode())
    except OSError as error:
        _LOG.warning("%s: cannot save the cost model (%s)", path, error)
    return model


def measure(runtime: ModelRuntime, sizes: tuple[int, ...] = MEASURED_SIZES) -> CostModel:
    """Times passes of each size after a short context, the median of a few repeats each. The
    runtime's KV cache is left empty."""
    sizes = tuple(s for s in sizes if s <= runtime.batch.capacity)
    sample = runtime.tokenizer.tokenize(_SAMPLE_CODE * 40).tolist()[:_CONTEXT_TOKENS]
    runtime.clear()
    runtime.prefill(sample, runtime.batch.capacity, lambda: False)
    n_past = len(runtime.kv_tokens)
    timings: dict[int, list[float]] = {size: [] for size in sizes}
    # Interleaved repeats: a burst of load on the machine spreads over all sizes.
    for _ in range(_REPEATS + 1):
        for size in sizes:
            runtime.batch.clear()
            positions = np.arange(n_past, n_past + size, dtype=np.int32)
            runtime.batch.add_outputs(sample[:size], positions, np.ones((size, 1), dtype=bool), MAIN_SEQ)
            start = time.perf_counter()
            runtime.decode_batch()  # the argmax of every row included, wherever it is taken
            timings[size].append((time.perf_counter() - start) * 1000)
            runtime.truncate(n_past)
    runtime.clear()
    # The first round warms caches and allocations up; it is not kept.
    ms = tuple(statistics.median(t[1:]) for t in timings.values())
    _LOG.info("pass cost by positions: %s", ", ".join(f"{s}: {m:.1f} ms" for s, m in zip(sizes, ms)))
    return CostModel(sizes, _monotonic(ms))


def _monotonic(ms: tuple[float, ...]) -> tuple[float, ...]:
    """Noise can make a bigger batch look cheaper than a smaller one; a pass never gets cheaper
    by verifying more."""
    out: list[float] = []
    for value in ms:
        out.append(max(value, out[-1]) if out else value)
    return tuple(out)
