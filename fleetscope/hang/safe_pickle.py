"""Load a pickle from another machine without running any of its code, within size limits.

A Flight Recorder dump is a pickle of plain containers (dict, list, tuple, str, int, float, bool,
None). Every way a pickle runs code goes through a global (``find_class``: ``os.system``, a
class's ``__reduce__`` or ``__setstate__``) or a persistent id; both raise here, so a hostile
file can only fail to load. The size is checked before a byte is read, and the file is read
whole (at most :data:`MAX_PICKLE_BYTES`), so a huge or endless file (a FIFO, /dev/zero) costs
nothing.
"""

from __future__ import annotations

import io
import os
import pickle
import stat
from pathlib import Path

#: The largest dump read (a 20 000-entry ring with stack frames is a few tens of MB).
MAX_PICKLE_BYTES = 256 * 1024 * 1024


class UnsafePickle(ValueError):
    """The file is not a pickle of plain data (or is too big, truncated, or not a regular file)."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise UnsafePickle(f"refuses the global {module}.{name} (a dump holds only plain data)")

    def persistent_load(self, pid: object) -> object:
        raise UnsafePickle("refuses a persistent id (a dump holds only plain data)")


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (else :class:`UnsafePickle`)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise UnsafePickle(f"cannot read it: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePickle("is not a regular file")
    if st.st_size > limit:
        raise UnsafePickle(f"is {st.st_size} bytes, over the {limit}-byte limit")
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UnsafePickle(f"cannot read it: {exc.strerror}") from None
    if len(data) > limit:  # grew while read
        raise UnsafePickle(f"is over the {limit}-byte limit")
    return data


def loads_plain(data: bytes) -> object:
    """Unpickle plain data; any global, persistent id, truncation or garbage raises UnsafePickle."""
    if not data:
        raise UnsafePickle("is empty")
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except UnsafePickle:
        raise
    except (pickle.UnpicklingError, EOFError) as exc:
        raise UnsafePickle(f"is not a complete pickle ({exc or 'truncated'})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, MemoryError, RecursionError) as exc:
        raise UnsafePickle(f"is not a pickle of plain data ({type(exc).__name__}: {exc})") from None
