"""Usefulness benchmark: is a suggestion worth accepting? In the spirit of CrossCodeEval, on code
this machine has that no one here wrote (tasks.py's corpora: Python's standard library, the
extension's node_modules, C from the kernel's sources or /usr/include).

Each task holds one file of a folder out at a cut point (at a line start, after its
indentation, or inside the line, alternately; drawn with --seed) and asks for the rest of that
line. Half the tasks of a language are cut where the line uses a name another file defines
(as CrossCodeEval cuts), half are tasks.py's draw. A task is **cross-file** when the expected text names an identifier that
another file of the folder defines (a top-level function, class, constant, macro, type: the
regular expressions below) and the file itself does not define above the line (importing or
using it there is fine), else **in-file**. Cross-file tasks whose file does not even name that
identifier above the line are also reported as **unseen**: CrossCodeEval's kind of task (its
static analysis marks the uses of other files' names the file cannot tell), where only context
from other files can give the name.

Variants, each on the same tasks in one run (order rotated per task, so that the KV cache
favours none), each the daemon's own context assembly (service/context.py) with one value of
its contextSources setting:
  file-only         the file's own text before and after the line, as an editor sends it
  recent            and chunks of the folder's other files as the daemon takes them from
                    recently edited documents: up to three neighbours of the file in the
                    folder's listing, each edited at a line drawn with the seed
  retrieved         and the daemon's retrieval from the folder's files (workspace/retrieval.py:
                    definitions of names used above the line, then similar code)
  retrieved+recent  both, retrieval first (the daemon's default)

Metrics per language, class and variant: exact match of the first line, edit similarity
(1 - Levenshtein / the longer length), identifier precision / recall / F1 (the identifiers the
expected text ends with, against the suggestion's), accepted characters (the suggestion's
prefix that matches the expected text, what a user keeps word by word), and p50/p95 of the
request's latency, of its prompt tokens and of the time choosing its context took. On
cross-file tasks also the prompt's hit rate: the share of tasks whose prompt (the chunks from
other files that fit its budget and the file's own text around the cursor) names an identifier
the expected text takes from another file, one the model could copy rather than guess; what
file-only scores here the file's own text gives, the rest is the context's.

Before each variant's request the user is taken to have written the --typed-lines lines above
the cut line one after the other: the context is chosen at each of their starts, as the
daemon's would be, since what it chooses depends on what it chose before (its chunks stay
while they still serve, workspace/retrieval.py). Reported with it: on what share of those lines
the chunks changed (each change evaluates a whole prompt again in the editor).

--context-only builds each variant's prompt and reports the hit rate, prompt tokens and
context time alone, without decoding (seconds for 200 tasks a language): for comparing ways of
choosing the context before paying for the model's answers. --variants runs some variants only.

    .venv/bin/python bench/quality_bench.py [--languages python,javascript,c] [--limit 200]
        [--seed 1] [--model FILE.gguf ...] [--variants file-only,retrieved] [--context-only]
        [--typed-lines 12] [--threads N] [--json OUT.json]
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.engine import CompletionRequest, DecodeOptions, DraftCaches, Engine, EngineSettings
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.service.context import context_chunks
from lookahead_lsp.service.documents import Document
from lookahead_lsp.workspace.retrieval import FolderRetrieval
from tasks import LANGUAGES, Task, Workspaces, corpus_root, interleaved, pick_tasks, task_files

# Each variant's context sources (the daemon's contextSources setting), in prompt order.
VARIANTS: dict[str, tuple[str, ...]] = {
    "file-only": (),
    "recent": ("recent",),
    "retrieved": ("definitions", "similar"),
    "retrieved+recent": ("definitions", "similar", "recent"),
}
CLASSES = ("cross-file", "in-file")
UNSEEN = "unseen"  # a part of cross-file (the module doc)
_NEIGHBOURS = 3
_MAX_TOKENS = 48

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What a file defines at its top level, per language: deliberately simple, as a reader of the
# code would name them; a name missed only moves a task from cross-file to in-file.
DEFINITIONS = {
    "python": re.compile(r"^(?:async\s+def|def|class)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=(?!=)", re.M),
    "javascript": re.compile(
        r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:function\*?|class|const|let|var|interface|type|enum)\s+(\w+)"
        r"|^\s*(?:exports|module\.exports)\.(\w+)\s*=",
        re.M,
    ),
    "c": re.compile(
        r"^#\s*define\s+(\w+)|^(?:struct|union|enum)\s+(\w+)\s*\{|^typedef\b[^;\n]*?\b(\w+)\s*;"
        r"|^(?!static\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{\n]*$",
        re.M,
    ),
}
KEYWORDS = {
    "python": set("False None True and as assert async await break class continue def del elif else except "
                  "finally for from global if import in is lambda nonlocal not or pass raise return self try "
                  "while with yield".split()),
    "javascript": set("async await break case catch class const continue default delete do else export extends "
                      "false finally for function if import in instanceof let new null return super switch this "
                      "throw true try typeof undefined var void while yield".split()),
    "c": set("auto break case char const continue default do double else enum extern float for goto if inline "
             "int long register return short signed sizeof static struct switch typedef union unsigned void "
             "volatile while NULL".split()),
}  # fmt: skip


def defined_names(language: str, text: str) -> set[str]:
    return {name for match in DEFINITIONS[language].finditer(text) for name in match.groups() if name}


@dataclass
class QualityTask:
    task: Task
    line_start: int
    line_end: int  # the expected line's end (its newline excluded)
    kind: str  # CLASSES
    folder_defines: set[str]
    # The expected text's names that another file defines and the file does not above the line.
    from_elsewhere: frozenset[str] = frozenset()
    unseen: bool = False  # cross-file, and the file names none of from_elsewhere above the line

    @property
    def expected(self) -> str:
        return self.task.text[self.task.cursor : self.line_end]

    def identifiers(self, completion: str) -> list[str]:
        """The identifiers the line ends with once `completion` follows the cut: those that end
        after it (a word cut in two counts whole)."""
        head = self.task.text[self.line_start : self.task.cursor]
        keywords = KEYWORDS[self.task.language]
        return [m.group() for m in IDENTIFIER.finditer(head + completion) if m.end() > len(head) and m.group() not in keywords]


def quality_task(task: Task, defined_elsewhere: set[str]) -> QualityTask:
    text = task.text
    line_start = text.rfind("\n", 0, task.cursor) + 1
    newline = text.find("\n", task.cursor)
    line_end = len(text) if newline < 0 else newline
    q = QualityTask(task, line_start, line_end, "in-file", defined_elsewhere)
    # Imported or used before is fine: defined before the cut is not (the file then shows it).
    defined_before = defined_names(task.language, text[:line_start])
    q.from_elsewhere = frozenset(n for n in q.identifiers(q.expected) if n in defined_elsewhere and n not in defined_before)
    if q.from_elsewhere:
        q.kind = "cross-file"
        q.unseen = q.from_elsewhere.isdisjoint(IDENTIFIER.findall(text[:line_start]))
    return q


def prompt_names(q: QualityTask, prompt: str) -> bool:
    """Whether the prompt's text names one of the identifiers the expected text takes from elsewhere."""
    return not q.from_elsewhere.isdisjoint(IDENTIFIER.findall(prompt))


def folder_definitions(path: Path, language: str) -> set[str]:
    """Names the other files of path's folder define (files of the language only)."""
    names: set[str] = set()
    for other in sorted(path.parent.iterdir()):
        if other != path and other.is_file() and LANGUAGES[language].matches(other):
            names |= defined_names(language, other.read_text(errors="replace"))
    return names


def draw_tasks(language: str, n: int, seed: int) -> list[QualityTask]:
    """n tasks of the language, half of them cross-file: as CrossCodeEval cuts, right before a
    use of an identifier another file defines (or at the line's start, alternately); the other
    half from tasks.py's draw, kept where they are in-file."""
    root = corpus_root(language)
    rng = random.Random(f"{seed}:{language}:cross-file")
    files = task_files(LANGUAGES[language], root)
    rng.shuffle(files)
    cross: list[QualityTask] = []
    for path in files:
        if len(cross) >= n // 2:
            break
        elsewhere = folder_definitions(path, language)
        text = path.read_text(errors="replace")
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        candidates = []
        for index in range(len(lines) * 3 // 10, len(lines) * 95 // 100):
            code = lines[index].strip()
            if len(code) < 12 or code.startswith(LANGUAGES[language].comments):
                continue
            indent = len(lines[index]) - len(lines[index].lstrip())
            for match in IDENTIFIER.finditer(lines[index]):
                if match.group() in elsewhere and match.start() > indent:
                    candidates.append((offsets[index], offsets[index] + indent, offsets[index] + match.start()))
        rng.shuffle(candidates)
        for line_start, code_start, use in candidates[:2]:
            kind = "line-start" if len(cross) % 2 == 0 else "mid-line"
            task = Task(language, path, code_start if kind == "line-start" else use, kind, text)
            q = quality_task(task, elsewhere)
            if q.kind == "cross-file":
                cross.append(q)
    in_file: list[QualityTask] = []
    for task in pick_tasks(LANGUAGES[language], root, 4 * n, seed):
        if len(in_file) >= n - len(cross):
            break
        q = quality_task(task, folder_definitions(task.path, language))
        if q.kind == "in-file":
            in_file.append(q)
    return cross + in_file


def neighbours(task: Task, rng: random.Random) -> list[tuple[str, Document]]:
    """Up to _NEIGHBOURS files beside the task's in its folder's listing, most recent first,
    each as an open document last edited at a drawn line."""
    language = LANGUAGES[task.language]
    files = sorted(p for p in task.path.parent.iterdir() if p.is_file() and language.matches(p))
    at = files.index(task.path)
    near = sorted((p for p in files if p != task.path), key=lambda p: (abs(files.index(p) - at), p.name))[:_NEIGHBOURS]
    out = []
    for path in near:
        text = path.read_text(errors="replace")
        lines = max(1, text.count("\n"))
        out.append((path.as_uri(), Document(path, text, edited_line=rng.randrange(lines))))
    return out


def write_down_to(q: QualityTask, variant: str, recent: list[tuple[str, Document]], retrieval: FolderRetrieval, lines: int) -> tuple[int, int]:
    """The context chosen at the start of each of the `lines` lines above the cut line and then
    at the cut line's, as the user writing them reaches each: how many lines were asked, and on
    how many of them the context changed."""
    text = q.task.text
    starts = [q.line_start]
    while len(starts) <= lines and starts[-1] > 0:
        starts.append(text.rfind("\n", 0, starts[-1] - 1) + 1)
    chosen = [
        context_chunks(VARIANTS[variant], retrieval, q.task.path, text[:at], recent, lambda path, uri: str(path or uri))
        for at in reversed(starts)
    ]
    return len(chosen) - 1, sum(a != b for a, b in zip(chosen, chosen[1:]))


def request_for(q: QualityTask, variant: str, recent: list[tuple[str, Document]], retrieval: FolderRetrieval) -> CompletionRequest:
    task = q.task
    folder = task.path.parent
    # After the cut the editor holds the lines below the expected one, not the line's own rest.
    suffix = task.text[q.line_end :]
    prefix = task.text[: task.cursor]
    extra = context_chunks(
        VARIANTS[variant], retrieval, task.path, prefix, recent,
        lambda path, uri: f"{folder.name}/{path.relative_to(folder).as_posix()}" if path else uri,
    )  # fmt: skip
    # An owner per variant: the engine would otherwise serve a variant with the context another
    # variant's saved state of the same document was built with (kv_states.context_of).
    name = f"{folder.name}/{task.path.name}"
    return CompletionRequest(prefix, suffix, name, extra, owner=f"{variant}:{name}")


class Retrievals:
    """The daemon's retrieval over each task folder's files of its language, built once."""

    def __init__(self) -> None:
        self._built: dict[Path, FolderRetrieval] = {}

    def of(self, task: Task) -> FolderRetrieval:
        folder = task.path.parent
        if folder not in self._built:
            retrieval = FolderRetrieval(folder)
            language = LANGUAGES[task.language]
            retrieval.rebuild(sorted(p for p in folder.iterdir() if p.is_file() and language.matches(p)))
            self._built[folder] = retrieval
        return self._built[folder]


# -- metrics ----------------------------------------------------------------------------------


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


@dataclass
class Scored:
    exact: bool
    edit_similarity: float
    precision: float
    recall: float
    accepted_chars: int
    expected_chars: int
    ms: float
    prompt_tokens: int
    context_ms: float  # choosing the context (retrieval), before the request
    prompt_names: bool | None = None  # cross-file tasks: prompt_names for the request's prompt
    lines_written: int = 0  # lines written above the cut before the request (--typed-lines)
    context_changes: int = 0  # of which those on which the context changed


def score(q: QualityTask, completion: str, ms: float, prompt_tokens: int, context_ms: float) -> Scored:
    got = completion.split("\n", 1)[0].rstrip()
    want = q.expected.rstrip()
    longest = max(len(got), len(want))
    similarity = 1.0 - levenshtein(got, want) / longest if longest else 1.0
    got_ids, want_ids = set(q.identifiers(got)), set(q.identifiers(want))
    both = len(got_ids & want_ids)
    precision = both / len(got_ids) if got_ids else float(not want_ids)
    recall = both / len(want_ids) if want_ids else 1.0
    kept = 0
    for a, b in zip(got, want):
        if a != b:
            break
        kept += 1
    return Scored(got == want, similarity, precision, recall, kept, len(want), ms, prompt_tokens, context_ms)


@dataclass
class Summary:
    n: int = 0
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, s: Scored) -> None:
        self.n += 1
        for name, value in (
            ("exact", float(s.exact)), ("edit_similarity", s.edit_similarity), ("precision", s.precision),
            ("recall", s.recall), ("accepted_chars", float(s.accepted_chars)),
            ("accepted_share", s.accepted_chars / s.expected_chars if s.expected_chars else 1.0),
            ("ms", s.ms), ("prompt_tokens", float(s.prompt_tokens)), ("context_ms", s.context_ms),
        ):  # fmt: skip
            self.values[name].append(value)
        if s.prompt_names is not None:
            self.values["prompt_names"].append(float(s.prompt_names))
        self.values["lines_written"].append(s.lines_written)
        self.values["context_changes"].append(s.context_changes)

    def report(self) -> dict[str, float]:
        if not self.n:
            return {"n": 0}
        mean = {name: statistics.fmean(v) for name, v in self.values.items()}
        p, r = mean["precision"], mean["recall"]
        out = {
            "n": self.n,
            "exact_pct": round(100 * mean["exact"], 1),
            "edit_similarity": round(mean["edit_similarity"], 3),
            "identifier_precision": round(p, 3),
            "identifier_recall": round(r, 3),
            "identifier_f1": round(2 * p * r / (p + r) if p + r else 0.0, 3),
            "accepted_chars": round(mean["accepted_chars"], 1),
            "accepted_share_pct": round(100 * mean["accepted_share"], 1),
            "ms_p50": round(float(np.percentile(self.values["ms"], 50)), 1),
            "ms_p95": round(float(np.percentile(self.values["ms"], 95)), 1),
            "prompt_tokens_p50": int(np.percentile(self.values["prompt_tokens"], 50)),
            "prompt_tokens_p95": int(np.percentile(self.values["prompt_tokens"], 95)),
            "context_ms_p50": round(float(np.percentile(self.values["context_ms"], 50)), 2),
            "context_ms_p95": round(float(np.percentile(self.values["context_ms"], 95)), 2),
        }
        if self.values["prompt_names"]:
            out["prompt_names_pct"] = round(100 * statistics.fmean(self.values["prompt_names"]), 1)
        if sum(self.values["lines_written"]):
            out["context_changes_pct"] = round(100 * sum(self.values["context_changes"]) / sum(self.values["lines_written"]), 1)
        return out


# -- the run ----------------------------------------------------------------------------------


def run_model(model: Path, tasks: list[QualityTask], args: argparse.Namespace) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    engine = Engine(EngineSettings(model, n_ctx=4096, n_threads=args.threads, cache_dir=args.cache_dir))
    workspaces = Workspaces(engine)
    options = DecodeOptions(draft="auto", max_tokens=_MAX_TOKENS)
    summaries: dict[tuple[str, str, str], Summary] = defaultdict(Summary)
    rng = random.Random(f"{args.seed}:recent")
    retrievals = Retrievals()
    names = tuple(args.variants)
    try:
        for index, q in enumerate(tasks):
            recent = neighbours(q.task, rng)
            caches = DraftCaches(workspace=workspaces.cache_for(q.task))
            order = names[index % len(names) :] + names[: index % len(names)]
            cells = []
            retrieval = retrievals.of(q.task)  # the folder's table, filled once, untimed
            retrieval.prepare(q.task.path)  # as the folder's thread does when the file opens
            for variant in order:
                engine.previous = None  # no variant drafts from another's output
                written = write_down_to(q, variant, recent, retrieval, args.typed_lines)
                started = time.perf_counter()
                request = request_for(q, variant, recent, retrieval)
                retrieval_ms = (time.perf_counter() - started) * 1e3
                prompt = engine.build_prompt(request, options)
                if args.context_only:
                    scored = score(q, "", 0.0, len(prompt.tokens), retrieval_ms)
                else:
                    done = engine.complete(request, options, caches)
                    scored = score(q, done.text, done.stats.ms_total, done.stats.prompt_tokens, retrieval_ms)
                scored.lines_written, scored.context_changes = written
                if q.kind == "cross-file":
                    scored.prompt_names = prompt_names(q, engine.tokenizer.detokenize(prompt.tokens).decode("utf-8", "replace"))
                for language in (q.task.language, "all"):
                    for kind in (q.kind, "all", *([UNSEEN] if q.unseen else [])):
                        summaries[(language, kind, variant)].add(scored)
                answer = ("hit" if scored.prompt_names else "-") if args.context_only else "=" if scored.exact else f"{scored.edit_similarity:.2f}"
                cells.append(f"{variant}={answer}")
            print(f"{index + 1:4} {q.task.name[:56]:56} {q.kind:10} " + " ".join(cells), flush=True)
    finally:
        engine.close()
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (language, kind, variant), summary in sorted(summaries.items()):
        out.setdefault(language, {}).setdefault(kind, {})[variant] = summary.report()
    return out


def print_table(model: str, figures: dict[str, dict[str, dict[str, dict[str, float]]]], decoded: bool) -> None:
    print(f"\n{model}")
    header = (
        "language", "class", "variant", "n", "EM %", "edit sim", "id F1", "kept chars", "kept %", "ms p50/p95",
        "prompt p50/p95", "ctx ms p95", "names %", "changes %",
    )  # fmt: skip
    # Without decoding (--context-only) only the prompt's columns mean something.
    shown = range(len(header)) if decoded else (0, 1, 2, 3, 10, 11, 12, 13)
    print("  ".join(f"{header[i]:>10}" for i in shown))
    for language, classes in figures.items():
        for kind in ("cross-file", UNSEEN, "in-file", "all"):
            for variant, f in classes.get(kind, {}).items():
                if not f.get("n"):
                    continue
                row = (
                    language, kind, variant, f["n"], f["exact_pct"], f["edit_similarity"], f["identifier_f1"],
                    f["accepted_chars"], f["accepted_share_pct"], f"{f['ms_p50']:.0f}/{f['ms_p95']:.0f}",
                    f"{f['prompt_tokens_p50']}/{f['prompt_tokens_p95']}", f["context_ms_p95"],
                    f.get("prompt_names_pct", ""), f.get("context_changes_pct", ""),
                )  # fmt: skip
                print("  ".join(f"{str(row[i]):>10}" for i in shown))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", type=lambda s: s.split(","), default=list(LANGUAGES))
    parser.add_argument("--limit", type=int, default=200, help="tasks per language")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", type=Path, action="append", help="a GGUF file (repeat for several); default: the default model")
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS), help=f"some of {','.join(VARIANTS)}")
    parser.add_argument("--context-only", action="store_true", help="build the prompts, decode nothing")
    parser.add_argument("--typed-lines", type=int, default=12, help="lines written above the cut before each request (0: none)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose from {list(VARIANTS)}")
    per_language: dict[str, list[QualityTask]] = {}
    for language in args.languages:
        per_language[language] = draw_tasks(language, args.limit, args.seed)
        counts = {kind: sum(q.kind == kind for q in per_language[language]) for kind in CLASSES}
        counts[UNSEEN] = sum(q.unseen for q in per_language[language])
        print(f"{language}: {len(per_language[language])} tasks, " + ", ".join(f"{n} {kind}" for kind, n in counts.items()), file=sys.stderr)
    by_task = {id(q.task): q for qs in per_language.values() for q in qs}
    tasks = [by_task[id(t)] for t in interleaved({lang: [q.task for q in qs] for lang, qs in per_language.items()})]
    models = args.model or [resolve_model_path(None)]
    report = {}
    for model in models:
        figures = run_model(model, tasks, args)
        print_table(model.name, figures, not args.context_only)
        report[model.name] = figures
    if args.json:
        run = {"seed": args.seed, "limit": args.limit, "variants": args.variants, "context_only": args.context_only, "typed_lines": args.typed_lines}
        args.json.write_text(json.dumps({**run, "models": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
