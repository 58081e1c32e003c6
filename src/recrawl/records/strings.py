"""Many strings in one buffer: :class:`StringColumn`.

A plan of a million pages keeps every page's URL for a whole cycle (its
tasks name them). As a list of ``str`` a URL of 35 characters costs about
90 bytes (the object's 49-byte header, its characters and the list's
pointer); packed here it costs its UTF-8 bytes and 16 more: its end offset
and its hash (int64 each), which the lease pool finds a URL by. A string is
made again only when it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

__all__ = ["CodeBuilder", "CodeColumn", "StringColumn", "string_hashes"]


class StringColumn(Sequence[str]):
    """Strings packed as UTF-8 in one buffer, with each one's end offset and
    :func:`hash` (this process's: an index built from them lives here only).

    Built with :meth:`extend` a chunk at a time (or :meth:`of`), then read:
    ``col[i]``, slices, iteration; compares equal to the list of the same
    strings.

    >>> col = StringColumn.of(["https://a.example/", "https://b.example/é"])
    >>> col[1], len(col), col == ["https://a.example/", "https://b.example/é"]
    ('https://b.example/é', 2, True)
    """

    __slots__ = ("__weakref__", "_buf", "_ends", "_hashes", "_n")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._ends = np.zeros(0, np.int64)
        self._hashes = np.zeros(0, np.int64)
        self._n = 0

    @classmethod
    def of(cls, strings: Iterable[str]) -> StringColumn:
        """A column of ``strings``."""
        col = cls()
        col.extend(list(strings))
        return col

    def reserve(self, size: int) -> None:
        """Make room for ``size`` strings in all (their ends and hashes), so
        that appending up to that many grows no array."""
        if size > len(self._ends):
            self._ends = np.resize(self._ends, size)
            self._hashes = np.resize(self._hashes, size)

    def extend(self, strings: Sequence[str]) -> None:
        """Append ``strings`` (the arrays grow by half their size when full)."""
        k = len(strings)
        if not k:
            return
        parts = [s.encode() for s in strings]
        lengths = np.fromiter(map(len, parts), np.int64, k)
        n = self._n
        if n + k > len(self._ends):
            room = max(n + k, len(self._ends) * 3 // 2)
            self._ends = np.resize(self._ends, room)
            self._hashes = np.resize(self._hashes, room)
        self._ends[n : n + k] = len(self._buf) + np.cumsum(lengths)
        self._hashes[n : n + k] = np.fromiter(map(hash, strings), np.int64, k)
        self._buf += b"".join(parts)
        self._n = n + k

    def __len__(self) -> int:
        return self._n

    def _get(self, i: int) -> str:
        start = int(self._ends[i - 1]) if i else 0
        return self._buf[start : int(self._ends[i])].decode()

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._get(k) for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("string index out of range")
        return self._get(i)

    def __iter__(self) -> Iterator[str]:
        buf, start = self._buf, 0
        for end in self._ends[: self._n].tolist():
            yield buf[start:end].decode()
            start = end

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (StringColumn, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StringColumn({self._n} strings, {len(self._buf):,} bytes)"

    @property
    def hashes(self) -> NDArray[np.int64]:
        """Each string's :func:`hash`, in order (a read-only view)."""
        out = self._hashes[: self._n]
        out.flags.writeable = False
        return out


def string_hashes(strings: Sequence[str], at: NDArray[Any] | None = None) -> NDArray[np.int64]:
    """The :func:`hash` of ``strings[i]`` for each ``i`` of ``at`` (all by
    default): from a :class:`StringColumn`'s hashes without reading a string."""
    if isinstance(strings, StringColumn):
        return strings.hashes if at is None else strings.hashes[at]
    if at is None:
        return np.fromiter(map(hash, strings), np.int64, len(strings))
    return np.fromiter((hash(strings[i]) for i in at.tolist()), np.int64, len(at))


class CodeColumn(Sequence[str]):
    """Strings of few distinct values (sites, page types) as each one's code
    into ``names`` (sorted, distinct): 1 or 2 bytes an item instead of a
    list's 8-byte pointer, and the codes ready for grouping.

    Reads as the list of the strings: ``col[i]``, slices, iteration,
    ``np.asarray(col, dtype=object)``; compares equal to that list.

    >>> col = CodeColumn.of(["b.example", "a.example", "b.example"])
    >>> col.names, col.codes.tolist(), col[2], col == ["b.example", "a.example", "b.example"]
    (['a.example', 'b.example'], [1, 0, 1], 'b.example', True)
    """

    __slots__ = ("codes", "names")

    def __init__(self, codes: NDArray[np.integer[Any]], names: list[str]) -> None:
        self.codes = codes
        self.names = names

    @classmethod
    def of(cls, strings: Iterable[str]) -> CodeColumn:
        """A column of ``strings``."""
        build = CodeBuilder()
        build.extend(list(strings))
        return build.column()

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        names = self.names
        if isinstance(i, slice):
            return [names[c] for c in self.codes[i].tolist()]
        return names[int(self.codes[i])]

    def __iter__(self) -> Iterator[str]:
        names = self.names
        return (names[c] for c in self.codes.tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> NDArray[Any]:
        out: NDArray[Any] = np.asarray(self.names, dtype=object)[self.codes]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (CodeColumn, StringColumn, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CodeColumn({len(self)} strings, {len(self.names)} distinct)"


class CodeBuilder:
    """A :class:`CodeColumn` built a chunk at a time (:meth:`extend`), its
    size known ahead or not (:meth:`reserve`)."""

    __slots__ = ("_codes", "_n", "_seen")

    def __init__(self, size: int = 0) -> None:
        self._seen: dict[str, int] = {}
        self._codes = np.empty(size, np.int32)  # in the order first seen, until column()
        self._n = 0

    def extend(self, strings: Sequence[str]) -> None:
        k = len(strings)
        n = self._n
        if n + k > len(self._codes):
            self._codes = np.resize(self._codes, max(n + k, len(self._codes) * 3 // 2))
        seen = self._seen
        self._codes[n : n + k] = np.fromiter(
            (seen.setdefault(s, len(seen)) for s in strings), np.int32, k
        )
        self._n = n + k

    def column(self) -> CodeColumn:
        """The column: codes renumbered in the order of the sorted names, in
        the narrowest unsigned integer that holds them."""
        seen = self._seen
        names = sorted(seen)
        dtype = (
            np.uint8 if len(names) <= 1 << 8 else np.uint16 if len(names) <= 1 << 16 else np.int32
        )
        rank: NDArray[np.integer[Any]] = np.empty(len(names), dtype)
        rank[[seen[name] for name in names]] = np.arange(len(names), dtype=dtype)
        codes: NDArray[np.integer[Any]] = rank[self._codes[: self._n]]
        self._codes = np.empty(0, np.int32)
        return CodeColumn(codes, names)
