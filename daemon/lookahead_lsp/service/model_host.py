"""The models of one daemon, shared by its sessions (editor windows): sessions whose settings
name the same model and hardware use share one loaded model and its one worker thread, so N
windows hold one model in memory and their requests queue on one worker instead of contending
for the cores. A model is loaded in the background when its first session needs it and freed
when its last session lets it go."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from lookahead_lsp.base.errors import UserError
from lookahead_lsp.engine import Engine, EngineSettings
from lookahead_lsp.engine.stages import LOADING
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.service.scheduler import CompletionWorker

T = TypeVar("T")
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelKey:
    """What decides which model runs, and how: sessions with equal keys share it. Its fields
    are the settings the schema marks reloads_model (settings.MODEL_SETTINGS)."""

    model_path: str | None
    context_size: int
    threads: int | None
    gpu_layers: int
    sampling: str


@dataclass(eq=False)
class LoadedModel(Generic[T]):
    """One model (loading, ready or failed) and the worker that runs it."""

    key: ModelKey
    worker: CompletionWorker[T]
    ready: threading.Event = field(default_factory=threading.Event)
    engine: Engine | None = None
    path: Path | None = None
    error: str | None = None
    stage: str = LOADING  # what the load does now (engine/stages.py), while not ready
    sessions: int = 0
    # Called for each session using the model when the load moves to its next stage, and once
    # when it ended (ready set: engine or error).
    listeners: list[Callable[[LoadedModel[T]], None]] = field(default_factory=list)


class ModelHost(Generic[T]):
    def __init__(self, cache_dir: Path | None) -> None:
        self.cache_dir = cache_dir
        self._models: dict[ModelKey, LoadedModel[T]] = {}
        self._lock = threading.Lock()

    def acquire(self, key: ModelKey, on_change: Callable[[LoadedModel[T]], None]) -> LoadedModel[T]:
        """The model for key, loading it in the background if no session has it;
        on_change(model) runs at each stage of the load and when it is ready or failed (at once
        if it is already)."""
        with self._lock:
            model = self._models.get(key)
            fresh = model is None
            if model is None:
                model = LoadedModel(key, CompletionWorker())
                self._models[key] = model
            model.sessions += 1
            model.listeners.append(on_change)
            done = model.ready.is_set()
        if fresh:
            threading.Thread(target=self._load, args=(model,), name="lookahead-load", daemon=True).start()
        elif done:
            on_change(model)
        return model

    def release(self, model: LoadedModel[T], on_change: Callable[[LoadedModel[T]], None]) -> None:
        """A session no longer uses the model; the last one out frees it, on its worker (the
        thread that used it)."""
        with self._lock:
            model.sessions -= 1
            if on_change in model.listeners:
                model.listeners.remove(on_change)
            last = model.sessions == 0
            if last:
                del self._models[model.key]
        if last:
            threading.Thread(target=self._free, args=(model,), name="lookahead-free", daemon=True).start()

    def close(self) -> None:
        """Frees every model now (the daemon is leaving)."""
        with self._lock:
            models = list(self._models.values())
            self._models.clear()
        for model in models:
            self._free(model)

    def loaded(self) -> int:
        """Models held (loading ones included)."""
        with self._lock:
            return len(self._models)

    def _load(self, model: LoadedModel[T]) -> None:
        key = model.key

        def stage(text: str) -> None:
            with self._lock:
                model.stage = text
                listeners = list(model.listeners)
            for listener in listeners:
                listener(model)

        try:
            path = resolve_model_path(None, key.model_path, asker="editor")
            stage(f"{LOADING} {path.name}")
            engine = Engine(EngineSettings(path, key.context_size, key.threads, key.gpu_layers, self.cache_dir, key.sampling))
            engine.prepare(stage)  # not in the first request
        except (UserError, OSError, ValueError) as error:
            with self._lock:
                model.error = str(error)
        else:
            with self._lock:
                model.engine, model.path = engine, path
            _LOG.info("model loaded: %s", path)
        with self._lock:
            listeners = list(model.listeners)
            model.ready.set()
        for listener in listeners:
            listener(model)

    def _free(self, model: LoadedModel[T]) -> None:
        model.ready.wait()  # a load under way finishes first: its engine is freed below
        # The worker stops first (a running completion is cancelled between passes): nothing
        # uses the engine any more when it is freed.
        model.worker.stop()
        engine, model.engine = model.engine, None
        if engine is not None:
            engine.close()
