"""Write a file whole or not at all: a temporary file beside it, synced, then renamed over it.

``analyze -o report.html`` on a full disk left a truncated file and had already destroyed the old
one; with :func:`write_text_atomic` the old file stays until the new one is complete.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically; on any error the old file is intact and no temporary
    file is left (the ``OSError`` is raised)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):  # keep the old file's permissions where there was one
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        if not target.exists():
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
