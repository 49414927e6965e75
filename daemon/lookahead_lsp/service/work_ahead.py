"""Where one session's model works while no request waits, and in which order: where the cursor
rests (or the last edit ended, for editors that do not report the cursor), and after a
suggestion the places the user may go next (next_places.py), one after the other, those its
user goes to often enough; the whole prompt of a completion that was given a short one; and,
while the model loads, the last place asked for, for once it is ready. The service calls it
under its lock and submits what it chooses (`submit`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace

from lookahead_lsp.service.model_work import Work
from lookahead_lsp.service.next_places import NextPlaceCounts, PlaceKind, next_places
from lookahead_lsp.service.suggestions import answer_key


class WorkAhead:
    def __init__(
        self,
        session: str,
        enabled: Callable[[], bool],
        loaded: Callable[[], bool],
        answered: Callable[[str, str, str], bool],
        submit: Callable[[Work, Hashable, float, bool], None],
    ) -> None:
        """session: the prefix of this session's job keys; enabled: the workAhead setting;
        loaded: whether the model is ready; answered(uri, prefix, suffix): whether the
        suggestion cache answers there already; submit(work, answer, delay_s, if_free): queues
        idle work that computes `answer`."""
        self._session = session
        self._enabled = enabled
        self._loaded = loaded
        self._answered = answered
        self._submit = submit
        # The last place asked for while the model was loading: where the cursor rested then is
        # where the user is once it is ready.
        self.when_loaded: Work | None = None
        self.counts = NextPlaceCounts()
        # The places offered and not asked at yet, (document, prefix) per kind, and the Enter
        # place that accepting the offered suggestion offers.
        self._offered: dict[PlaceKind, tuple[str, str]] = {}
        self._enter_after_accept: str | None = None

    def at(self, work: Work, delay_s: float = 0.0, if_free: bool = False) -> bool:
        """Prepares the completion `work` describes (and then the places of work.then), not
        before delay_s, unless the cache knows it or the user turned this off; if_free: only if
        no other work ahead waits or runs. Whether some place was queued."""
        if not self._enabled():
            return False
        if not self._loaded():
            self.when_loaded = work
            return False
        prefixes = (work.prefix, *work.then)
        while prefixes and self._answered(work.uri, prefixes[0], work.suffix):
            prefixes = prefixes[1:]
        if not prefixes:
            return False
        first = replace(work, prefix=prefixes[0], ahead=True, then=prefixes[1:])
        self._submit(first, self._answer(first), delay_s, if_free)
        return True

    def after_shown(self, work: Work, shown: str) -> bool:
        """`shown` was suggested for `work`: the places the user may go next, those this user
        goes to. Whether there is any."""
        places = next_places(work.prefix, shown, work.suffix, work.language)
        enter = next((place.prefix for place in places if place.kind == "enter"), None)
        if shown:
            self._offer("accept", work.uri, work.prefix + shown)
            self._enter_after_accept = enter
        elif enter is not None:
            self._offer("enter", work.uri, enter)
        chosen = [place.prefix for place in places if self.counts.prepares(place.kind)]
        return bool(chosen) and self.at(replace(work, prefix=chosen[0], then=tuple(chosen[1:])))

    def asked(self, uri: str, prefix: str) -> None:
        """A request came at (uri, prefix): an offered place taken, if it is one."""
        if self._offered.get("accept") == (uri, prefix):
            del self._offered["accept"]
            self.counts.accept.taken += 1
            if self._enter_after_accept is not None:
                self._offer("enter", uri, self._enter_after_accept)
                self._enter_after_accept = None
        elif self._offered.get("enter") == (uri, prefix):
            del self._offered["enter"]
            self.counts.enter.taken += 1

    def _offer(self, kind: PlaceKind, uri: str, prefix: str) -> None:
        """Counts a place offered, once however many keys type through its suggestion."""
        if self._offered.get(kind) != (uri, prefix):
            self._offered[kind] = (uri, prefix)
            self.counts.of(kind).offered += 1

    def after_done(self, work: Work) -> bool:
        """Work ahead finished: the next of its places, after the user's newer work ahead.
        Whether one was queued."""
        return bool(work.then) and self.at(replace(work, prefix=work.then[0], then=work.then[1:]), if_free=True)

    def whole_prompt(self, work: Work) -> None:
        """`work` was given a short prompt (cold_prompt.py): its whole prompt is evaluated, for
        the next requests there to use. Called once no next place waits: it stops the work
        ahead running and replaces the one waiting."""
        if self._enabled() and self._loaded():
            warm = replace(work, ahead=True, warm=True, then=())
            self._submit(warm, ("warm", self._answer(warm)), 0.0, False)

    def _answer(self, work: Work) -> Hashable:
        return answer_key(self._session + work.uri, work.prefix, work.suffix)
