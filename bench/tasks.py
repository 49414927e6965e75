"""What the decode benchmarks share: completion tasks drawn from code this machine has (per
language, with a fixed seed), the workspace cache each task drafts from, greedy truths decoded
once per model, and the offline replay of auto's policy and the oracle on them.

Languages, from code this machine has:
  python      the standard library of the running interpreter
  javascript  vscode-client/node_modules (after `npm ci` there): .js .mjs .cjs .ts files,
              neither declarations (.d.ts) nor minified bundles
  c           lib/ and kernel/ of /usr/src/linux-source-*.tar.* (apt-get install linux-source),
              extracted once into the cache folder; /usr/include when that is absent

Tasks are drawn per language: a file of 6-80 KB, a cursor at a line start (after the
indentation) or inside a line, alternately; the text before the cursor is the prompt; the
file's folder (its files of that language) is the workspace, with the file itself cut at the
cursor, so no cache sees the code after it."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.base.cache_files import atomic_writer, default_cache_dir
from lookahead_lsp.base.tokenizer import TokenArray, tokenize_file_text
from lookahead_lsp.engine import CompletionRequest, DecodeOptions, DraftCaches, Engine
from lookahead_lsp.engine.calibration import model_identity
from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.policy import AcceptanceModel, AutoPolicy, SpeculationGuard
from lookahead_lsp.engine.replay import ReplayResult, ReplayTask, replay

REPO = Path(__file__).resolve().parent.parent
_MIN_FILE, _MAX_FILE = 6_000, 80_000
_MAX_FOLDER_BYTES = 2_000_000
_MAX_LINE = 300  # a longer line marks generated or minified code
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3", "dist", "min"}


# -- corpora ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Language:
    name: str
    extensions: tuple[str, ...]
    comments: tuple[str, ...]  # a line starting with one of these is not a task's line
    excluded: tuple[str, ...] = ()  # file name endings that do not count

    def matches(self, path: Path) -> bool:
        name = path.name
        return name.endswith(self.extensions) and not name.endswith(self.excluded)


LANGUAGES = {
    "python": Language("python", (".py",), ("#", '"', "'")),
    "javascript": Language("javascript", (".js", ".mjs", ".cjs", ".ts"), ("//", "/*", "*"), (".d.ts", ".min.js")),
    "c": Language("c", (".c", ".h"), ("//", "/*", "*", "#")),
}


def corpus_root(language: str) -> Path:
    """Where this machine's code in `language` is; SystemExit with what to do if there is none."""
    if language == "python":
        return Path(sysconfig.get_paths()["stdlib"])
    if language == "javascript":
        root = REPO / "vscode-client" / "node_modules"
        if not root.is_dir():
            raise SystemExit(f"{root} is missing: cd vscode-client && npm ci --ignore-scripts --no-audit --no-fund")
        return root
    tarballs = sorted(Path("/usr/src").glob("linux-source-*.tar.*"))
    if tarballs:
        return _extracted_kernel(tarballs[-1])
    if Path("/usr/include").is_dir():
        return Path("/usr/include")
    raise SystemExit("no C code: apt-get install linux-source (or C headers in /usr/include)")


def _extracted_kernel(tarball: Path) -> Path:
    """lib/ and kernel/ of a kernel source tarball, extracted once into the cache folder."""
    target = default_cache_dir() / "bench-corpora" / tarball.name.split(".tar")[0]
    done = target / ".complete"
    if done.exists():
        return target
    print(f"extracting lib/ and kernel/ of {tarball} into {target} (once)", file=sys.stderr, flush=True)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        wanted = []
        for member in archive:
            parts = Path(member.name).parts
            if len(parts) > 2 and parts[1] in ("lib", "kernel") and member.isfile() and ".." not in parts:
                wanted.append(member)
        archive.extractall(target, members=wanted, filter="data")
    done.touch()
    return target


@dataclass
class Task:
    language: str
    path: Path
    cursor: int  # character offset
    kind: str  # "line-start" or "mid-line"
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}@{self.cursor} ({self.kind})"


def _folders(root: Path, language: Language) -> Iterator[tuple[Path, list[Path]]]:
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        files = [Path(folder) / n for n in sorted(names) if language.matches(Path(n))]
        if len(files) >= 3 and sum(f.stat().st_size for f in files) <= _MAX_FOLDER_BYTES:
            yield Path(folder), files


def _usable(path: Path) -> bool:
    if not _MIN_FILE <= path.stat().st_size <= _MAX_FILE:
        return False
    lines = path.read_text(errors="replace").splitlines()
    return bool(lines) and max(len(line) for line in lines) <= _MAX_LINE


def task_files(language: Language, root: Path) -> list[Path]:
    """The files tasks are drawn from: of 6-80 KB, no line longer than _MAX_LINE, in folders
    of at least three files of the language."""
    files = [f for _, found in _folders(root, language) for f in found if _usable(f)]
    if not files:
        raise SystemExit(f"no {language.name} files of {_MIN_FILE}-{_MAX_FILE} bytes under {root}")
    return files


def pick_tasks(language: Language, root: Path, n: int, seed: int) -> list[Task]:
    rng = random.Random(f"{seed}:{language.name}")
    files = task_files(language, root)
    tasks: list[Task] = []
    while len(tasks) < n:
        path = rng.choice(files)
        text = path.read_text(errors="replace")
        lines = text.splitlines(keepends=True)
        index = rng.randrange(len(lines) * 3 // 10, len(lines) * 95 // 100)
        line = lines[index]
        code = line.strip()
        if len(code) < 12 or code.startswith(language.comments):
            continue
        start = sum(len(x) for x in lines[:index])
        indent = len(line) - len(line.lstrip())
        kind = "line-start" if len(tasks) % 2 == 0 else "mid-line"
        cursor = start + indent if kind == "line-start" else start + indent + rng.randrange(3, len(code) - 3)
        tasks.append(Task(language.name, path, cursor, kind, text))
    return tasks


def interleaved(per_language: dict[str, list[Task]]) -> list[Task]:
    """Languages take turns, so that learning carried from task to task favours none of them."""
    out: list[Task] = []
    for i in range(max((len(t) for t in per_language.values()), default=0)):
        out += [tasks[i] for tasks in per_language.values() if i < len(tasks)]
    return out


class Workspaces:
    """Token arrays per file, tokenized once for all tasks of a folder."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._tokens: dict[Path, TokenArray] = {}

    def tokens(self, path: Path) -> TokenArray:
        if path not in self._tokens:
            self._tokens[path] = tokenize_file_text(self.engine.tokenizer, path.read_bytes())
        return self._tokens[path]

    def cache_for(self, task: Task) -> NgramCache:
        language = LANGUAGES[task.language]
        cache = NgramCache(self.engine.tokenizer.n_vocab)
        for other in sorted(task.path.parent.iterdir()):
            if other != task.path and other.is_file() and language.matches(other):
                cache.add(self.tokens(other))
        cache.add(tokenize_file_text(self.engine.tokenizer, task.text[: task.cursor].encode()))
        return cache


def request_of(task: Task) -> CompletionRequest:
    return CompletionRequest(task.text[: task.cursor], "", task.path.name)


def options_of(mode: str, max_tokens: int) -> DecodeOptions:
    return DecodeOptions(draft=mode, max_tokens=max_tokens, stop_rules=False)


def replay_task(engine: Engine, task: Task, truth: list[int], workspaces: Workspaces, max_tokens: int) -> ReplayTask:
    prompt = engine.build_prompt(request_of(task), options_of("auto", max_tokens))
    return ReplayTask(
        task.name, Path(task.path.name).suffix, engine.tokenizer.n_vocab, list(prompt.sources), prompt.tokens,
        truth, workspace=workspaces.cache_for(task),
    )


def replay_all(tasks: list[ReplayTask], curve: CostModel) -> list[ReplayResult]:
    """auto from a fresh install's priors, learning across the tasks in order, and the oracle."""
    policy = AutoPolicy(AcceptanceModel(), OnlineCost(curve), SpeculationGuard())
    return [replay(task, policy, curve) for task in tasks]


def parse_curve(text: str) -> CostModel:
    """"1:1,2:1.76,4:2.4": pass cost by positions, relative to one position."""
    pairs = sorted((int(a), float(b)) for a, b in (item.split(":") for item in text.split(",")))
    if not pairs or pairs[0][0] != 1:
        raise SystemExit("--cost needs a size 1 entry, e.g. 1:1,2:1.76,4:2.4,8:3.71")
    return CostModel(tuple(s for s, _ in pairs), tuple(m for _, m in pairs))


class TruthCache:
    """Greedy truths decoded once per model, task and length (a JSON file), so that replays of
    other policies or curves cost no model time."""

    def __init__(self, path: Path, model: Path, max_tokens: int) -> None:
        self.path = path
        identity = json.dumps(model_identity(model), sort_keys=True)
        self.prefix = hashlib.sha256(identity.encode()).hexdigest()[:12] + f":{max_tokens}:"
        try:
            self.entries: dict[str, list[int]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.entries = {}

    def get(self, task: Task) -> list[int] | None:
        return self.entries.get(self.prefix + f"{task.path}@{task.cursor}")

    def put(self, task: Task, tokens: list[int]) -> None:
        self.entries[self.prefix + f"{task.path}@{task.cursor}"] = tokens
        with atomic_writer(self.path) as out:
            out.write(json.dumps(self.entries).encode())


def replay_tasks_of(engine: Engine, tasks: list[Task], truths: TruthCache, max_tokens: int) -> list[ReplayTask]:
    """The tasks as the replay takes them, their truths decoded (plain greedy) where the cache
    has none."""
    workspaces = Workspaces(engine)
    out: list[ReplayTask] = []
    for task in tasks:
        truth = truths.get(task)
        if truth is None:
            engine.previous = None
            truth = engine.complete(request_of(task), options_of("none", max_tokens), DraftCaches()).tokens
            truths.put(task, truth)
            print(f"truth decoded: {task.name}", file=sys.stderr, flush=True)
        out.append(replay_task(engine, task, truth, workspaces, max_tokens))
    return out
