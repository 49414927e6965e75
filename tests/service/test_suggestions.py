"""The suggestion cache: typing into a suggestion, huge documents, closing, threads, continuations."""

from __future__ import annotations

import threading

from lookahead_lsp.service.suggestions import PREFIX_TAIL_CHARS, CacheHit, SuggestionCache


def test_suggestion_cache_follows_typing() -> None:
    cache = SuggestionCache(size=2)
    cache.store("a", "x = ", ")\n", "compute(1, 2")
    assert cache.lookup("a", "x = ", ")\n") == CacheHit("compute(1, 2")
    assert cache.lookup("a", "x = comp", ")\n") == CacheHit("ute(1, 2", typed=True)
    assert cache.lookup("a", "x = compute(1, 2", ")\n") is None  # fully typed: nothing left
    assert cache.lookup("a", "x = cop", ")\n") is None  # typed something else
    assert cache.lookup("a", "x = comp", "]\n") is None  # the text after the cursor changed
    assert cache.lookup("b", "x = comp", ")\n") is None  # another document
    cache.store("a", "y = ", "", "1")
    cache.store("a", "z = ", "", "2")
    assert cache.lookup("a", "x = comp", ")\n") is None  # evicted (LRU of 2)


def test_suggestion_cache_of_a_huge_document_stays_small() -> None:
    # 60 completions while typing in a 4 MB document: each entry keeps a bounded tail and a
    # digest of the text before the cursor, not the text.
    cache = SuggestionCache()
    document = "value = compute(1, 2)\n" * (4_000_000 // 22)
    uri = "file:///big.py"
    for i in range(60):
        at = len(document) - 60 + i
        cache.store(uri, document[:at], document[at:], f"suggestion_{i}(x)")
    bound = cache.size * (PREFIX_TAIL_CHARS + 200 + len(uri) + 64)
    assert 0 < cache.retained_chars() <= bound < len(document) // 10
    # Typing the start of the last suggestion is still answered from the cache.
    at = len(document) - 1
    assert cache.lookup(uri, document[:at] + "sugg", document[at:]) == CacheHit("estion_59(x)", typed=True)
    # The same tail after another beginning is another text: no answer.
    changed = "other = 0\n" + document[10:at]
    assert len(changed) == at and changed[-PREFIX_TAIL_CHARS:] == document[:at][-PREFIX_TAIL_CHARS:]
    assert cache.lookup(uri, changed + "sugg", document[at:]) is None


def test_closing_a_document_drops_its_suggestions() -> None:
    cache = SuggestionCache()
    cache.store("a", "x = ", "", "compute()")
    cache.store("b", "x = ", "", "compute()")
    cache.drop("a")
    assert cache.lookup("a", "x = c", "") is None
    assert cache.lookup("b", "x = c", "") == CacheHit("ompute()", typed=True)
    cache.drop("b")
    assert cache.retained_chars() == 0


def test_suggestion_cache_is_safe_across_threads() -> None:
    # The worker stores while the server's loop looks up; neither may see a dict that changed
    # size under its iteration.
    cache = SuggestionCache(size=8)
    failures: list[BaseException] = []
    stop = threading.Event()

    def store() -> None:
        i = 0
        while not stop.is_set():
            cache.store(f"doc{i % 16}", f"x{i} = ", "", "value")
            i += 1

    writer = threading.Thread(target=store)
    writer.start()
    try:
        for _ in range(20_000):
            try:
                cache.lookup("doc3", "x3 = v", "")
            except RuntimeError as error:
                failures.append(error)
                break
    finally:
        stop.set()
        writer.join()
    assert not failures


def test_a_continuation_answers_until_it_is_typed_in_full() -> None:
    cache = SuggestionCache()
    cache.store("a", "x = 1", "", "\n    y = 2", continuation=True, ended=True)
    assert cache.lookup("a", "x = 1", "") == CacheHit("\n    y = 2", continuation=True, ended=True)
    assert cache.lookup("a", "x = 1\n    ", "") == CacheHit("y = 2", continuation=True, ended=True, typed=True)
    # All of it typed: what comes next is the model's end, still an answer to cut.
    assert cache.lookup("a", "x = 1\n    y = 2", "") == CacheHit("", continuation=True, ended=True, typed=True)
    assert cache.lookup("a", "x = 1\n    y = 2;", "") is None
