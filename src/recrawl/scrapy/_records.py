"""The last record of each page, kept so a 304 can be handed the record it confirms.

recrawl's store keeps a page's record *hash* (what "changed" is judged by),
not the record itself. The add-on remembers the record it reported for each
URL with the validators that came with it (``ETag``, ``Last-Modified``): a
later 304 to a request carrying those validators says that record still
holds. Kept in memory and, with a path, in a JSON-lines file (one line per
record as it comes; rewritten with the last line per URL when the crawl
closes), so the next run of the spider still has them.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["Kept", "RecordMemory"]

log = logging.getLogger("recrawl.scrapy")


@dataclass(frozen=True)
class Kept:
    """One page's last record as the add-on reported it: the record (None when
    only the body's hash stood for it), its fingerprint (the store's
    ``record_hash``), and the validators of that response."""

    record: dict[str, Any] | None
    record_hash: str | None
    etag: str | None = None
    last_modified: str | None = None


class RecordMemory:
    """The last :class:`Kept` record per URL, optionally persisted at ``path``.

    >>> m = RecordMemory()
    >>> m.remember("http://a.example/p/1", Kept({"price": "2"}, "h1", etag='"v1"'))
    >>> m.confirmed("http://a.example/p/1", if_none_match='"v1"', if_modified_since=None)
    {'price': '2'}
    >>> m.confirmed("http://a.example/p/1", if_none_match='"v0"', if_modified_since=None) is None
    True
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._kept: dict[str, Kept] = {}
        self._out: IO[str] | None = None
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        bad = 0
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                    self._kept[str(row["url"])] = Kept(
                        row.get("record"),
                        row.get("record_hash"),
                        row.get("etag"),
                        row.get("last_modified"),
                    )
                except (ValueError, KeyError, TypeError):
                    bad += 1  # a line cut short by a crash: the ones before it hold
        if bad:
            log.warning("%s: %d unreadable lines skipped", path, bad)

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, url: str) -> Kept | None:
        """The last record kept for ``url``."""
        return self._kept.get(url)

    def remember(self, url: str, kept: Kept) -> None:
        """Keep ``kept`` as ``url``'s last record (and append it to the file)."""
        self._kept[url] = kept
        if self.path is not None:
            if self._out is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = self.path.open("a", encoding="utf-8")
            self._out.write(json.dumps({"url": url, **asdict(kept)}) + "\n")
            self._out.flush()

    def confirmed(
        self, url: str, *, if_none_match: str | None, if_modified_since: str | None
    ) -> dict[str, Any] | None:
        """The record a 304 confirms: ``url``'s kept record when the request
        carried that record's validators (its ``ETag`` as ``If-None-Match``, or
        its ``Last-Modified`` as ``If-Modified-Since``); None otherwise (the
        validators came from a fetch this add-on did not see, or none was kept)."""
        kept = self._kept.get(url)
        if kept is None or kept.record is None:
            return None
        if if_none_match is not None and kept.etag is not None and if_none_match == kept.etag:
            return kept.record
        if (
            if_modified_since is not None
            and kept.last_modified is not None
            and if_modified_since == kept.last_modified
        ):
            return kept.record
        return None

    def close(self) -> None:
        """Close the file, rewritten with one line per URL."""
        if self._out is not None:
            self._out.close()
            self._out = None
        if self.path is None or not self._kept:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for url, kept in self._kept.items():
                f.write(json.dumps({"url": url, **asdict(kept)}) + "\n")
        os.replace(tmp, self.path)
