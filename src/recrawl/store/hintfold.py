"""What a batch of hints changes in the kept hint state: one bookkeeping for every store.

A store keeps, per page and source, the latest ``lastmod`` with when the
source first and last listed the page and when it first gave that
``lastmod``, and a log of each distinct ``lastmod`` with when it was first
seen. :func:`fold_hints` applies a batch to that state in memory; the store
reads the state before and writes what changed after (SQL or dictionaries).
No estimation here: which sources to trust is :mod:`recrawl.estimate.hints`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from recrawl.observe.sitemaps import Hint
from recrawl.store._protocol import HintResult

__all__ = ["HintKey", "HintState", "LogKey", "fold_hints"]

HintKey = tuple[int, str]
"""(page id, source)."""
LogKey = tuple[int, str, float]
"""(page id, source, lastmod)."""
HintState = dict[HintKey, list[float]]
"""Per (page, source): ``[lastmod, first_seen, last_seen, flag, lastmod_seen]``,
``flag`` 0 as read, 1 changed, 2 new (in this batch)."""


def fold_hints(
    batch: Sequence[Hint],
    id_of: Callable[[str], int | None],
    state: HintState,
    res: HintResult,
) -> tuple[dict[LogKey, float], set[HintKey]]:
    """Fold ``batch`` into ``state`` (in place; ``id_of`` gives a URL's page id,
    None for an unknown URL) and count it in ``res`` (stored, unchanged,
    unknown). Returns the log rows to upsert (each ``lastmod`` with its
    earliest sighting in the batch) and the (page, source) pairs whose latest
    ``lastmod`` moved to one the kept log may hold already: for those, when it
    was first seen must be looked up in the log too."""
    log: dict[LogKey, float] = {}
    moved: set[HintKey] = set()
    state_of = state.get  # (a loop over 50,000 hints)
    for h in batch:
        pid = id_of(h.url)
        if pid is None:
            res.unknown += 1
            continue
        key = (pid, h.source)
        t, lm = h.seen_at, h.lastmod
        st = state_of(key)
        if st is None:
            state[key] = [lm, t, t, 2, t]
        elif lm == st[0]:  # what the source said last: when it said so moves
            res.unchanged += 1
            if t < st[4]:  # an older read: it may have said so first
                st[4] = t
                st[3] = st[3] or 1
            if t > st[2]:
                st[2] = t
                st[3] = st[3] or 1
            elif t < st[2]:  # an older read: it may have said so first
                if t < st[1]:
                    st[1] = t
                    st[3] = st[3] or 1
                lk = (pid, h.source, lm)
                log[lk] = min(t, log.get(lk, t))
            continue
        else:
            if t >= st[2]:  # the latest read: its lastmod is the latest
                st[0], st[2] = lm, t
                st[4] = min(t, log.get((pid, h.source, lm), t))
                if st[3] != 2:
                    moved.add(key)
            st[1] = min(st[1], t)
            st[3] = st[3] or 1
        res.stored += 1
        lk = (pid, h.source, lm)
        log[lk] = min(t, log.get(lk, t))
    return log, moved
