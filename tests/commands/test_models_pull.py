"""`lookahead-lsp models pull` against a local server that speaks the Hub's download protocol
(tests/hf_server.py): a pull lands where a catalogue name finds it, an interrupted pull resumes
where it stopped, a file whose sha256 is not the expected one is refused and not kept, a server
that sends more than it announced is cut off, and nothing planted beside the target is written
through."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.hf_server import FakeHub, ServedFile, fake_hub
from support.tiny_gguf import write_tiny_gguf

from lookahead_lsp.models import catalogue

pytest.importorskip("huggingface_hub", reason="models pull needs the hf extra")



def _entry(name: str) -> catalogue.CatalogueEntry:
    entry = catalogue.find(name)
    assert entry is not None
    return entry


QWEN = _entry("qwen2.5-coder-0.5b")
GEMMA = _entry(catalogue.DEFAULT_MODEL_NAME)
# huggingface_hub writes what it receives in pieces of 10 MB, so only a download cut after
# more than that has anything on disk to resume from.
_HUB_CHUNK = 10 * 1024 * 1024


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with fake_hub() as served:
        yield served


@pytest.fixture
def env(tmp_path: Path, hub: FakeHub) -> dict[str, str]:
    """The command's environment: the fake Hub, a private cache, no token, no proxy."""
    keep = {name: value for name, value in os.environ.items() if not name.upper().startswith(("HF_", "HTTP", "ALL_PROXY", "NO_PROXY"))}
    return {
        **keep,
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(tmp_path / "hf-home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "NO_PROXY": "127.0.0.1",
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lookahead_lsp", "models", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def _pulled(env: dict[str, str], source: catalogue.ModelSource) -> Path:
    return Path(env["XDG_CACHE_HOME"]) / "lookahead-lsp" / "models" / source.repo_id / source.filename


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def test_pull_a_catalogue_model_then_use_it_by_name(
    hub: FakeHub, env: dict[str, str], tmp_path: Path
) -> None:
    assert QWEN.pin is None and QWEN.fim
    write_tiny_gguf(tmp_path / "served.gguf")
    hub.files[QWEN.source.spec] = ServedFile((tmp_path / "served.gguf").read_bytes())

    done = _run(env, "pull", QWEN.name)

    assert done.returncode == 0, done.stderr
    target = _pulled(env, QWEN.source)
    assert done.stdout.strip() == str(target)
    assert target.read_bytes() == hub.files[QWEN.source.spec].content
    assert _leftovers(target.parent) == [target.name]
    info = json.loads(_run(env, "info", QWEN.name, "--json").stdout)
    assert info["path"] == str(target) and info["fim"] is True
    listed = {entry["name"]: entry for entry in json.loads(_run(env, "list", "--json").stdout)}
    assert listed[QWEN.name]["downloaded"] is True
    assert listed[catalogue.DEFAULT_MODEL_NAME]["downloaded"] is False
    # A second pull finds the file and asks the Hub nothing.
    asked = len(hub.requests)
    assert _run(env, "pull", QWEN.name).returncode == 0
    assert len(hub.requests) == asked


def test_interrupted_pull_resumes_where_it_stopped(hub: FakeHub, env: dict[str, str]) -> None:
    content = random.Random(7).randbytes(_HUB_CHUNK + 2_000_000)
    hub.files["someone/models/big.gguf"] = ServedFile(content, stall_after=_HUB_CHUNK + 500_000)
    source = catalogue.ModelSource("someone/models", "big.gguf")
    target = _pulled(env, source)
    command = [sys.executable, "-m", "lookahead_lsp", "models", "pull", source.spec, "--sha256", ServedFile(content).sha256]

    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert hub.stalled.wait(60)
    _wait_for(lambda: _part_size(target) >= _HUB_CHUNK)
    first.send_signal(signal.SIGINT)  # Ctrl-C in the middle of the download
    _, stderr = first.communicate(timeout=60)
    hub.release.set()

    assert first.returncode == 130, stderr
    assert "interrupted" in stderr
    assert not target.exists()
    kept = _part_size(target)
    assert kept >= _HUB_CHUNK
    # Kept where only this user may go.
    assert stat.S_IMODE((target.parent / ".partial").stat().st_mode) == 0o700
    assert stat.S_IMODE(_parts(target)[0].stat().st_mode) == 0o600

    second = _run(env, "pull", source.spec, "--sha256", ServedFile(content).sha256)

    assert second.returncode == 0, second.stderr
    assert f"resuming after {kept / 1e6:.1f} MB" in second.stderr
    assert target.read_bytes() == content
    assert hub.gets()[-1].range == f"bytes={kept}-"
    assert _leftovers(target.parent) == [target.name]


def test_wrong_checksum_is_refused_and_not_kept(hub: FakeHub, env: dict[str, str]) -> None:
    # The Hub names the expected file, but other bytes arrive (a corrupted transfer).
    pinned = "ab" * 32
    hub.files["someone/models/m.gguf"] = ServedFile(b"GGUF" + bytes(5000), etag=pinned)
    source = catalogue.ModelSource("someone/models", "m.gguf")

    done = _run(env, "pull", source.spec, "--sha256", pinned)

    assert done.returncode == 2
    assert f"expected {pinned}: the download was deleted" in done.stderr
    assert done.stderr.count("\n") == 3  # "downloading", "checking", the error; no traceback
    assert len(hub.gets()) == 1
    assert _leftovers(_pulled(env, source).parent) == []


def test_a_server_that_sends_more_than_it_announced_is_cut_off(hub: FakeHub, env: dict[str, str]) -> None:
    # The HEAD announces 4 KiB; the GET sends 64 MiB more, which used to be written whole, then
    # refused, and kept.
    announced = b"GGUF" + bytes(4092)
    hub.files["someone/models/m.gguf"] = ServedFile(announced, padding=64 << 20)
    source = catalogue.ModelSource("someone/models", "m.gguf")

    done = _run(env, "pull", source.spec)

    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "lookahead-lsp: the server sent more of someone/models/m.gguf than the 4096 bytes "
        "announced: the download was deleted"
    )
    assert "Traceback" not in done.stderr
    # Stopped at the first piece past the cap (huggingface_hub reads 10 MB at a time; the rest
    # is what the sockets held), and nothing of it on disk.
    assert hub.sent < 32 << 20
    assert _leftovers(_pulled(env, source).parent) == []


@pytest.mark.parametrize("where", ["old-part-name", "partial-folder", "hard-link"])
def test_a_planted_link_is_not_written_through(
    hub: FakeHub, env: dict[str, str], tmp_path: Path, where: str
) -> None:
    content = b"GGUF" + random.Random(3).randbytes(5000)
    hub.files["someone/models/m.gguf"] = ServedFile(content)
    source = catalogue.ModelSource("someone/models", "m.gguf")
    target = _pulled(env, source)
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    name = f"{target.name}.{ServedFile(content).sha256[:16]}.part"
    if where == "old-part-name":  # the name pulls used to append to, beside the target
        planted = target.with_name(f".{name}")
    else:  # inside the private folder, had anyone got in
        planted = target.parent / ".partial" / name
    planted.parent.mkdir(parents=True, mode=0o700)
    if where == "hard-link":
        planted.hardlink_to(victim)
    else:
        planted.symlink_to(victim)

    done = _run(env, "pull", source.spec)

    assert done.returncode == 0, done.stderr
    assert victim.read_bytes() == b"not yours"
    assert target.read_bytes() == content and not target.is_symlink()
    assert len(hub.gets()) == 1 and hub.gets()[0].range is None  # nothing "resumed" from it


@pytest.mark.parametrize("planted", ["symlink", "open-folder"])
def test_a_partial_folder_others_could_write_is_refused(
    hub: FakeHub, env: dict[str, str], tmp_path: Path, planted: str
) -> None:
    hub.files["someone/models/m.gguf"] = ServedFile(b"GGUF" + bytes(5000))
    source = catalogue.ModelSource("someone/models", "m.gguf")
    folder = _pulled(env, source).parent / ".partial"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.parent.mkdir(parents=True)
    if planted == "symlink":
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir()
        os.chmod(folder, 0o777)

    done = _run(env, "pull", source.spec)

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    why = "is a symbolic link, which is not followed" if planted == "symlink" else "is not a private folder"
    assert f"{folder} {why}" in done.stderr and "delete it" in done.stderr
    assert list(elsewhere.iterdir()) == [] and hub.gets() == []


def test_a_pinned_file_the_hub_no_longer_has_is_not_downloaded(hub: FakeHub, env: dict[str, str]) -> None:
    hub.files["someone/models/m.gguf"] = ServedFile(b"GGUF" + bytes(5000))

    done = _run(env, "pull", "someone/models/m.gguf", "--sha256", "ab" * 32)

    assert done.returncode == 2
    assert f"not the pinned {'ab' * 32}: not downloading" in done.stderr
    assert hub.gets() == []


def test_a_hub_whose_file_is_not_its_checksum_is_refused(hub: FakeHub, env: dict[str, str]) -> None:
    hub.files[QWEN.source.spec] = ServedFile(b"GGUF" + bytes(5000), etag="cd" * 32)

    done = _run(env, "pull", QWEN.name)

    assert done.returncode == 2
    assert "expected " + "cd" * 32 in done.stderr
    assert _leftovers(_pulled(env, QWEN.source).parent) == []


def test_a_pinned_model_of_another_size_is_not_downloaded(hub: FakeHub, env: dict[str, str]) -> None:
    assert GEMMA.pin is not None
    hub.files[GEMMA.source.spec] = ServedFile(b"GGUF" + bytes(5000))

    done = _run(env, "pull", GEMMA.name)

    assert done.returncode == 2
    assert f"not the pinned {GEMMA.pin.size}" in done.stderr
    assert hub.gets() == []


def test_missing_file_and_bad_names_are_one_line_errors(hub: FakeHub, env: dict[str, str]) -> None:
    missing = _run(env, "pull", "someone/models/absent.gguf")
    unknown = _run(env, "pull", "no-such-model")
    escaping = _run(env, "pull", "someone/models/../../etc/x.gguf")

    for done in (missing, unknown, escaping):
        assert done.returncode == 2
        assert done.stderr.startswith("lookahead-lsp: ") and "Traceback" not in done.stderr
    assert "someone/models/absent.gguf" in missing.stderr
    assert "models list" in unknown.stderr
    assert "not a GGUF file name" in escaping.stderr


def _parts(target: Path) -> list[Path]:
    folder = target.parent / ".partial"
    return list(folder.glob(f"{target.name}.*.part")) if folder.exists() else []


def _part_size(target: Path) -> int:
    parts = _parts(target)
    return parts[0].stat().st_size if parts else 0


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
