"""An Engine as the tests and benchmarks load one: a model file, a context, threads, and a
folder of its own for what it measures and learns (cost model, calibration), so that no test
reads another's or the user's."""

from __future__ import annotations

from pathlib import Path

from lookahead_lsp.engine import Engine, EngineSettings


def engine_on(
    model: Path, cache_dir: Path, n_ctx: int = 512, threads: int | None = 1, sampling: str = "auto"
) -> Engine:
    """The engine (its caller closes it). threads None: as the daemon chooses, from the load."""
    return Engine(EngineSettings(model, n_ctx=n_ctx, n_threads=threads, cache_dir=cache_dir, sampling=sampling))
