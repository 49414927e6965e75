"""Where one session's model works while no request waits, and in which order: where the cursor
rests (or the last edit ended, for editors that do not report the cursor), and after a
suggestion the places the user may go next (next_places.py), one after the other; the whole
prompt of a completion that was given a short one; and, while the model loads, the last place
asked for, for once it is ready. The service calls it under its lock and submits what it
chooses (`submit`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace

from lookahead_lsp.service.model_work import Work
from lookahead_lsp.service.next_places import next_places
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

    def at(self, work: Work, delay_s: float = 0.0, if_free: bool = False) -> None:
        """Prepares the completion `work` describes (and then the places of work.then), not
        before delay_s, unless the cache knows it or the user turned this off; if_free: only if
        no other work ahead waits or runs."""
        if not self._enabled():
            return
        if not self._loaded():
            self.when_loaded = work
            return
        prefixes = (work.prefix, *work.then)
        while prefixes and self._answered(work.uri, prefixes[0], work.suffix):
            prefixes = prefixes[1:]
        if not prefixes:
            return
        first = replace(work, prefix=prefixes[0], ahead=True, then=prefixes[1:])
        self._submit(first, self._answer(first), delay_s, if_free)

    def after_shown(self, work: Work, shown: str) -> bool:
        """`shown` was suggested for `work`: the places the user may go next. Whether there is
        any."""
        places = next_places(work.prefix, shown, work.suffix)
        if places:
            self.at(replace(work, prefix=places[0], then=tuple(places[1:])))
        return bool(places)

    def after_done(self, work: Work) -> None:
        """Work ahead finished: the next of its places, after the user's newer work ahead."""
        if work.then:
            self.at(replace(work, prefix=work.then[0], then=work.then[1:]), if_free=True)

    def whole_prompt(self, work: Work) -> None:
        """`work` was given a short prompt (cold_prompt.py): its whole prompt is evaluated, for
        the next requests there to use."""
        if self._enabled() and self._loaded():
            warm = replace(work, ahead=True, warm=True, then=())
            self._submit(warm, ("warm", self._answer(warm)), 0.0, False)

    def _answer(self, work: Work) -> Hashable:
        return answer_key(self._session + work.uri, work.prefix, work.suffix)
