"""The service's memory between plans: glibc's allocator told to give back
what a plan let go (:func:`tune_allocator`, :func:`release_free_memory`).

A plan of a million pages allocates numpy arrays of 1 to 8 MB by the dozen,
in whichever thread computed it (a request's, or the re-plan thread). glibc
serves a freed block of that size from its heaps once it has freed one
(its ``mmap`` threshold rises to the largest block freed, up to 32 MB), and
a heap of a thread's arena gives memory back to the system only from its
top: the arrays of the plan before stayed resident, and the next plan,
computed in another thread, took as much again. Measured with
``benchmarks/service_load.py --reporters 2 --batches 5 --pages 200000``
(2026-12-05, two runs each): 640 bytes a page above idle at the peak
instead of 716 without the two calls below, 448 held once the plan was
made again instead of 494.

Both calls do nothing where the C library is not glibc (macOS, musl).
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any, Final

__all__ = ["MMAP_THRESHOLD", "release_free_memory", "tune_allocator"]

_log = logging.getLogger("recrawl.service")

MMAP_THRESHOLD: Final = 128 * 1024
"""Blocks of at least this many bytes are mapped on their own and unmapped
when freed (glibc's default, made fixed: :func:`tune_allocator`)."""
_M_MMAP_THRESHOLD: Final = -3  # mallopt parameters, <malloc.h>
_libc: Any = None


def _glibc() -> Any:
    """The C library when it is glibc (it has ``malloc_trim``), else None."""
    global _libc
    if _libc is None:
        lib: Any = False
        if sys.platform.startswith("linux"):
            try:
                c = ctypes.CDLL("libc.so.6")
                if hasattr(c, "malloc_trim") and hasattr(c, "mallopt"):
                    c.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                    c.malloc_trim.argtypes = [ctypes.c_size_t]
                    lib = c
            except OSError:
                pass
        _libc = lib
    return _libc or None


def tune_allocator() -> bool:
    """Fix glibc's ``mmap`` threshold at :data:`MMAP_THRESHOLD` for the whole
    process: a large array (a plan's) is then always mapped on its own and
    given back to the system when freed, instead of staying in a heap once a
    block as large was freed. ``recrawl serve`` calls it at start; a program
    that embeds :func:`~recrawl.service.create_app` may. Returns whether
    the allocator took it (False off glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not ok:
        _log.debug("mallopt(M_MMAP_THRESHOLD) refused")
    return ok


def release_free_memory() -> None:
    """Give the system back the free memory of every allocator heap
    (glibc's ``malloc_trim``): after a plan replaced the one before, whose
    columns and lease pool were just freed. A few milliseconds."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
