"""Reading files the node does not control (sysfs, procfs, debugfs, job-written files), safely.

A collector reads paths that anything on the node can replace: a FIFO where a counter should be
blocks a plain ``open()`` forever (no writer), a symlink to ``/dev/zero`` never ends and grows the
exporter without bound. :func:`read_bytes` therefore

* opens with ``O_NONBLOCK`` (opening a FIFO for reading then returns at once instead of waiting
  for a writer) and ``O_CLOEXEC``;
* refuses anything that is not a regular file, checked with ``fstat`` on the opened descriptor (so
  a swap between a check and the open cannot slip one past: sysfs, procfs and debugfs attributes
  are all regular files);
* reads at most ``limit`` bytes, and refuses a file that has more (:class:`TooLarge`): a partial
  stats file could pass a cut-off number as a smaller, valid value.

The refusals are :class:`UnsafeFile` (an ``OSError`` whose text names the problem, not the
path), so callers that already handle an unreadable
file handle these too; :func:`reason` gives the ``reason`` label for ``fleetscope_collector_errors_total``.

:func:`kernel_u64` is the check for values the kernel can only print as unsigned 64-bit integers:
anything else (400 digits, ``nan``, ``inf``, a negative number) is not a real reading.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

__all__ = [
    "DEFAULT_LIMIT",
    "U64_MAX",
    "NotRegularFile",
    "TooLarge",
    "UnsafeFile",
    "kernel_u64",
    "read_bytes",
    "read_text",
    "reason",
]

#: Bytes read from one file unless the caller says otherwise: an llite ``stats`` file of Lustre
#: 2.15 with every operation timed is about 4 KiB, a mount table of a busy node some 100 KiB.
DEFAULT_LIMIT = 1 << 20
U64_MAX = 2**64 - 1
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 64 * 1024


class UnsafeFile(OSError):
    """A file refused before or while reading it (see the module docstring)."""

    reason = "unsafe_file"


class NotRegularFile(UnsafeFile):
    """A FIFO, socket, device or directory where a regular file should be."""

    reason = "not_regular_file"


class TooLarge(UnsafeFile):
    """The file holds more than the caller's byte limit."""

    reason = "too_large"


def reason(exc: OSError) -> str:
    """The ``reason`` label for a failed read: ``not_regular_file``, ``too_large`` or ``unreadable``."""
    return exc.reason if isinstance(exc, UnsafeFile) else "unreadable"


def read_bytes(path: str | os.PathLike[str], limit: int = DEFAULT_LIMIT) -> bytes:
    """At most ``limit`` bytes of a regular file; raises ``OSError`` (:class:`UnsafeFile` for refusals)."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"not a regular file ({_kind(mode)})")
        chunks: list[bytes] = []
        total = 0
        while True:
            # procfs and sysfs files report size 0 or 4096 whatever they hold: read until EOF.
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"more than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str] | Path, limit: int = DEFAULT_LIMIT) -> str:
    """:func:`read_bytes` decoded as ASCII, undecodable bytes replaced (kernel text is ASCII)."""
    return read_bytes(path, limit).decode("ascii", errors="replace")


def kernel_u64(value: int | float) -> bool:
    """True for a value the kernel could have printed as a u64: finite, 0 <= value <= 2**64-1."""
    if isinstance(value, int):
        return 0 <= value <= U64_MAX
    return math.isfinite(value) and 0 <= value <= U64_MAX


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "special file"
