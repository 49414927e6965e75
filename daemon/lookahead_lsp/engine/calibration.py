"""What auto has learnt, kept per model beside the cost model so that the first completion after
a start decides as well as the last one before it: acceptance per kind of evidence (valid for the
model on any machine), and today's pass costs and the guard's verdicts (valid only for the
machine, threads and llama.cpp they were measured with).

The file is JSON, written atomically, versioned. It is read as untrusted input: a file that is
corrupt, of another version or for another model is ignored with one log line, and every value
is range-checked before use."""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from lookahead_lsp.base.cache_files import atomic_writer
from lookahead_lsp.engine.policy import AcceptanceBucket, AcceptanceModel, GuardState, SpeculationGuard

_LOG = logging.getLogger(__name__)
FORMAT = "lookahead-lsp calibration"
VERSION = 1
_HEAD_BYTES = 1 << 20
_MAX_ENTRIES = 10_000
_MAX_KEY_CHARS = 500
_MAX_POSITIONS = 4096


class CalibrationError(ValueError):
    """A calibration file that cannot be used (the message says why)."""


@dataclass
class Calibration:
    """The learnt state; `level` and `offsets` are OnlineCost's."""

    acceptance: AcceptanceModel = field(default_factory=AcceptanceModel)
    guard: SpeculationGuard = field(default_factory=SpeculationGuard)
    level: float = 0.0
    offsets: dict[int, float] = field(default_factory=dict)


def model_identity(model_path: Path) -> dict[str, object]:
    """The model, wherever its file lies: its name, size and the digest of its first MiB (the
    GGUF header: architecture, tokenizer)."""
    with model_path.open("rb") as file:
        head = file.read(_HEAD_BYTES)
    return {
        "name": model_path.name,
        "size": model_path.stat().st_size,
        "head_sha256": hashlib.sha256(head).hexdigest(),
    }


def calibration_path(cache_dir: Path, model: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"calibration-{digest}.json"


def encode(calibration: Calibration, model: dict[str, object], machine: dict[str, object]) -> bytes:
    acceptance = [
        [*key, round(b.prior, 6), round(b.accepted, 4), round(b.tried, 4)]
        for key, b in sorted(calibration.acceptance.buckets.items())
    ]
    guard = {
        key: [s.on, s.probing, round(s.ms, 3), round(s.tokens, 4), round(s.weight, 4), s.held, s.interval]
        for key, s in calibration.guard.states.items()
    }
    data = {
        "format": FORMAT,
        "version": VERSION,
        "model": model,
        "acceptance": acceptance,
        "machine": machine,
        "cost": {"level": calibration.level, "offsets": sorted(calibration.offsets.items())},
        "guard": guard,
    }
    return json.dumps(data, indent=0).encode()


def decode(data: bytes, model: dict[str, object], machine: dict[str, object]) -> Calibration:
    """The calibration in `data`. Timings of another machine are left out (the acceptance
    stays). CalibrationError when the file is not a calibration of this version for `model`."""
    try:
        root = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CalibrationError(f"not JSON ({error})") from None
    if not isinstance(root, dict) or root.get("format") != FORMAT:
        raise CalibrationError("not a calibration file")
    if root.get("version") != VERSION:
        raise CalibrationError(f"version {root.get('version')!r}, expected {VERSION}")
    if root.get("model") != model:
        raise CalibrationError("calibrated for another model")
    calibration = Calibration(acceptance=_acceptance(root.get("acceptance")))
    if root.get("machine") == machine:
        calibration.level, calibration.offsets = _cost(root.get("cost"))
        calibration.guard = _guard(root.get("guard"))
    return calibration


def load(path: Path, model: dict[str, object], machine: dict[str, object]) -> Calibration:
    """The calibration saved at `path`, or a fresh one (priors only) when there is none or it
    cannot be used (one log line says why)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Calibration()
    except OSError as error:
        _LOG.warning("%s: cannot read the calibration, starting from the priors (%s)", path, error)
        return Calibration()
    try:
        return decode(data, model, machine)
    except CalibrationError as error:
        _LOG.warning("%s: calibration ignored, starting from the priors (%s)", path, error)
        return Calibration()


def save(path: Path, data: bytes) -> None:
    """Writes encoded calibration data atomically; a failure is logged, not raised (the
    calibration is an optimisation)."""
    try:
        with atomic_writer(path) as out:
            out.write(data)
    except OSError as error:
        _LOG.warning("%s: cannot save the calibration (%s)", path, error)


# -- validation of untrusted content ---------------------------------------------------------


def _number(value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalibrationError(f"expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise CalibrationError(f"{number} is outside [{low}, {high}]")
    return number


def _integer(value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CalibrationError(f"expected an integer in [{low}, {high}], got {value!r}")
    return value


def _list(value: object, what: str) -> list[object]:
    if not isinstance(value, list) or len(value) > _MAX_ENTRIES:
        raise CalibrationError(f"{what}: expected a list of at most {_MAX_ENTRIES} entries")
    return value


def _acceptance(value: object) -> AcceptanceModel:
    model = AcceptanceModel()
    for row in _list(value, "acceptance"):
        fields = _list(row, "acceptance row")
        if len(fields) != 7:
            raise CalibrationError("acceptance row: expected 7 fields")
        source, ngram, count_bucket, share_bucket = (_integer(x, 0, 64) for x in fields[:4])
        prior = _number(fields[4], 0.0, 1.0)
        tried = _number(fields[6], 0.0, 1e9)
        accepted = _number(fields[5], 0.0, tried)
        model.buckets[(source, ngram, count_bucket, share_bucket)] = AcceptanceBucket(prior, accepted, tried)
    return model


def _cost(value: object) -> tuple[float, dict[int, float]]:
    if not isinstance(value, dict):
        raise CalibrationError("cost: expected an object")
    level = _number(value.get("level"), -20.0, 20.0)
    offsets: dict[int, float] = {}
    for pair in _list(value.get("offsets"), "cost offsets"):
        fields = _list(pair, "cost offset")
        if len(fields) != 2:
            raise CalibrationError("cost offset: expected [positions, offset]")
        offsets[_integer(fields[0], 1, _MAX_POSITIONS)] = _number(fields[1], -20.0, 20.0)
    return level, offsets


def _guard(value: object) -> SpeculationGuard:
    if not isinstance(value, dict) or len(value) > _MAX_ENTRIES:
        raise CalibrationError("guard: expected an object")
    guard = SpeculationGuard()
    for key, fields in value.items():
        if len(key) > _MAX_KEY_CHARS:
            raise CalibrationError("guard: key too long")
        row = _list(fields, "guard state")
        if len(row) != 7 or not isinstance(row[0], bool) or not isinstance(row[1], bool):
            raise CalibrationError("guard state: expected [on, probing, ms, tokens, weight, held, interval]")
        weight = _number(row[4], 0.0, 1e6)
        guard.states[key] = GuardState(
            on=row[0],
            probing=row[1],
            ms=_number(row[2], 0.0, 1e12),
            tokens=_number(row[3], weight, 1e9),  # every pass emits a token at least
            weight=weight,
            held=_integer(row[5], 0, 1 << 40),
            interval=_integer(row[6], 1, 1 << 20),
        )
    return guard
