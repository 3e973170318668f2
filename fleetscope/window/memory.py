"""Freed memory given back to the system between the phases of a long analysis.

A streamed window (``analyze --chunk``, and a long recording by default: parsed once and spooled,
then streamed) allocates and frees hundreds of MB per phase: a family converted, a chunk loaded
and analyzed. What is freed is not always given back: glibc keeps freed heap pages of its arenas
(the parser's gzip thread has its own) and pyarrow's memory pool keeps what it freed for reuse, so
the process' resident memory grows phase after phase, and the peak of a 4-hour window was 1.45
times that of a one-hour one where a chunk holds about what the hour does (docs/benchmarks.md,
"The default command on a recording").

* :func:`archive_memory_pool`: pyarrow's allocations go to its jemalloc pool with a decay of 0
  (freed pages are returned at once) where the wheel has it, instead of mimalloc, which keeps them.
* :func:`release_freed`: between phases, pyarrow's pool gives back what it holds unused, and glibc's
  ``malloc_trim`` the free pages of every arena (a few milliseconds; nothing elsewhere).
* :func:`collector_paused`: Python's cyclic garbage collector off while a recording is read. The
  reader makes hundreds of thousands of containers that live until the end (a series' entry, its
  labels, its list of runs), so the collector's passes, triggered by their number, went over all
  of them, and every object of the imported libraries, again and again and found nothing: 0.1 s
  of a 64-node hour's 3 s (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_trim: Any = None  # glibc's malloc_trim, once looked up (False: none here)
_pool_set = False


def archive_memory_pool(pa: Any) -> None:
    """Once per process: pyarrow's default pool is jemalloc, returning freed pages at once (decay 0),
    where the build has it; otherwise, or when ``ARROW_DEFAULT_MEMORY_POOL`` chooses one, the
    default pool stays."""
    global _pool_set
    if _pool_set:
        return
    _pool_set = True
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):  # the user's choice
        return
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(0)
    except (NotImplementedError, AttributeError, OSError):  # a build without jemalloc
        return
    pa.set_memory_pool(pool)


def release_freed() -> None:
    """Give what was freed back to the system: pyarrow's pool (when pyarrow is loaded) and glibc's
    free heap pages (on glibc; elsewhere nothing)."""
    global _trim
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    if _trim is None:
        try:
            _trim = ctypes.CDLL(None).malloc_trim
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (AttributeError, OSError):  # not glibc (musl, macOS)
            _trim = False
    if _trim:
        _trim(0)


_pause_lock = threading.Lock()
_pauses = 0  # blocks in collector_paused now, in every thread
_was_enabled = False  # the collector's state when the first of them began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, back as it was when the last such
    block of the process ends (they may nest, or run on several threads at once). Cycles made
    meanwhile are collected after, by the collector's next pass."""
    global _pauses, _was_enabled
    with _pause_lock:
        if not _pauses:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if not _pauses and _was_enabled:
                gc.enable()
