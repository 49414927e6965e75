"""lookahead/status: the model's state, the service's counters of completions and of work done
ahead, the last completion, the workspace (the folders' indexes added up, each folder's root,
static cache, watcher and index) and what the daemon shares among its sessions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_lsp import __version__
from lookahead_lsp.engine import Completion, Engine
from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.model_host import LoadedModel, ModelHost
from lookahead_lsp.service.next_places import NextPlaceCounts, PlaceKind
from lookahead_lsp.service.settings import Settings
from lookahead_lsp.workspace.folder import FolderStatus


@dataclass
class Counters:
    served: int = 0
    from_cache: int = 0
    cancelled: int = 0
    failed: int = 0


@dataclass
class AheadCounters:
    """What work done while the model was idle cost and saved."""

    runs: int = 0  # completions ahead that finished
    stopped: int = 0  # completions ahead a request interrupted
    served: int = 0  # answers cut from their continuations, from the cache
    adopted: int = 0  # requests that found their answer being computed ahead and waited for it
    ms_model: float = 0.0  # model time spent ahead of requests
    short_prompts: int = 0  # completions, ahead or not, whose cold prompt was cut short
    warmed_tokens: int = 0  # tokens of whole prompts evaluated after a short one served

    def record(self, result: Completion) -> None:
        self.ms_model += result.stats.ms_total
        if result.stop_reason == "cancelled":
            self.stopped += 1
        else:
            self.runs += 1

    def warmed(self, tokens: int, ms: float) -> None:
        self.warmed_tokens += tokens
        self.ms_model += ms


def _place_status(places: NextPlaceCounts, kind: PlaceKind) -> dict[str, Any]:
    count = places.of(kind)
    return {"offered": count.offered, "taken": count.taken, "prepared": places.prepares(kind)}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def ahead_status(
    a: AheadCounters, enabled: bool, engine: Engine | None, preempted: int, running: bool, places: NextPlaceCounts
) -> dict[str, Any]:
    """"ahead": what work done while the model was idle cost and saved (preempted: jobs of
    work ahead the worker stopped for requests; running: whether some runs now), where the user
    went after suggestions (places), and the KV states of recently used documents."""
    kv_states = engine.kv_states if engine is not None else None
    return {
        "enabled": enabled,
        "running": running,
        "runs": a.runs,
        "stopped": a.stopped + preempted,
        "served": a.served,
        "adopted": a.adopted,
        "ms_model": round(a.ms_model, 1),
        # Where the user went after suggestions, which decides what is prepared after the next.
        "next_places": {"accept": _place_status(places, "accept"), "enter": _place_status(places, "enter")},
        # Cold prompts cut short (cold_prompt.py), and the whole ones evaluated since.
        "short_prompts": a.short_prompts,
        "warmed_tokens": a.warmed_tokens,
        # What a prompt token costs on this machine now, which decides where prompts are cut.
        "prompt_token_ms": _rounded(engine.runtime.prompt_token_ms) if engine is not None else None,
        # KV states of recently used documents, and what putting them back spared.
        "kv_states": len(kv_states) if kv_states else 0,
        "kv_states_mib": round(kv_states.nbytes / 2**20, 1) if kv_states else 0.0,
        "kv_restored": kv_states.stats.restored if kv_states else 0,
        "kv_tokens_restored": kv_states.stats.tokens_restored if kv_states else 0,
    }



def workspace_status(roots: list[Path], statuses: list[FolderStatus], model_failed: bool) -> dict[str, Any]:
    """"index" (the workspace caches' files, tokens and n-grams, and whether any folder is
    indexing), "folders" (one entry per root, in order) and "static_cache" (the first
    folder's in use, or None). statuses: those of the folders created so far."""
    totals = {"files": 0, "tokens": 0, "ngrams": 0}
    indexing = False
    for status in statuses:
        totals["files"] += status.index.files
        totals["tokens"] += status.index.tokens
        totals["ngrams"] += status.index.ngrams
        indexing = indexing or status.index.state == "indexing" or not status.indexed
    # Until its first indexing ends a folder counts as indexing, also while it waits for
    # the model; only a model that failed to load leaves it unindexed for good. Later
    # rescans show in the index's own state.
    if len(statuses) < len(roots) and not model_failed:
        indexing = True
    by_root = {status.root: status for status in statuses}
    repository = [str(status.static_cache) for status in statuses if status.static_cache is not None]
    return {
        "index": {**totals, "state": "indexing" if indexing else "ready"},
        "folders": [_folder_status(root, by_root.get(root)) for root in roots],
        "static_cache": repository[0] if repository else None,
    }


def _folder_status(root: Path, status: FolderStatus | None) -> dict[str, Any]:
    """A folder's root, static cache in use, how its watcher learns of changes (watching
    events, or polling and why; stopped until it is indexed), its index: state, files,
    memory against the budget, and the folder table on disk (table_files 0: none), and its
    symbol table (retrieval's): files held, memory against its part of the folder's budget,
    files left out at it."""
    if status is None:
        return {
            "root": str(root), "static_cache": None, "watcher": {"mode": "stopped", "reason": ""}, "index": None,
            "symbols": None,
        }  # fmt: skip
    index = status.index
    return {
        "root": str(root),
        "static_cache": str(status.static_cache) if status.static_cache is not None else None,
        "watcher": {"mode": status.watcher.mode, "reason": status.watcher.reason},
        "index": {
            "state": "indexing" if index.state == "indexing" or not status.indexed else "ready",
            "files": index.files,
            "tokens": index.tokens,
            "memory_bytes": index.memory_bytes,
            "budget_bytes": index.budget_bytes,
            "table_files": index.table_files,
            "table_bytes": index.table_bytes,
        },
        "symbols": {
            "files": status.symbols.files,
            "memory_bytes": status.symbols.memory_bytes,
            "budget_bytes": status.symbols.budget_bytes,
            "left_out": status.symbols.left_out,
        },
    }


def session_status(
    loaded: LoadedModel[Any] | None,
    workspace: dict[str, Any],
    counters: Counters,
    last: dict[str, Any] | None,
    ahead: AheadCounters,
    next_places: NextPlaceCounts,
    settings: Settings,
    models: ModelHost[Any],
    folders: FolderHost,
) -> dict[str, Any]:
    """The whole lookahead/status of one session; workspace: workspace_status's."""
    error = loaded.error if loaded is not None else None
    loading = loaded is None or not loaded.ready.is_set()
    engine = loaded.engine if loaded is not None else None
    superseded = loaded.worker.superseded if loaded is not None else 0
    preempted = loaded.worker.ahead_preempted if loaded is not None else 0
    if loading:
        workspace["index"]["state"] = "indexing"
    return {
        "version": __version__,
        "model": str(loaded.path) if loaded is not None and loaded.path else None,
        "model_state": "loading" if loading else ("error" if error else "ready"),
        "model_error": error,
        # What preparing the model does now (loading, measuring the machine...): null once it
        # is ready.
        "model_stage": loaded.stage if loaded is not None and loading else None,
        # Which device runs the model ("CPU", "CUDA0", ...) and where each verified position's
        # argmax is taken ("backend" or "host"): null until a model is loaded.
        "backend": engine.backend if engine is not None else None,
        "sampling": engine.sampling if engine is not None else None,
        **workspace,
        "completions": {
            "served": counters.served,
            "from_cache": counters.from_cache,
            "cancelled": counters.cancelled + superseded,
            "failed": counters.failed,
        },
        "last": last,
        "ahead": ahead_status(
            ahead, settings.work_ahead, engine, preempted, loaded is not None and loaded.worker.ahead_running, next_places
        ),
        # Sessions (editor windows) of this daemon that share this one's model, and the models
        # and workspace folders the daemon holds for all its sessions.
        "shared": {
            "sessions": loaded.sessions if loaded is not None else 0,
            "models": models.loaded(),
            "folders": folders.folders(),
        },
        "draft": settings.draft,
    }
