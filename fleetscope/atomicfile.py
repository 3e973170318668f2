"""Write a file whole or not at all: a temporary file beside it, synced, then renamed over it.

``analyze -o report.html`` on a full disk left a truncated file and had already destroyed the old
one; with :func:`write_text_atomic` the old file stays until the new one is complete.

A rename only replaces what is a regular file (or nothing yet): renaming over ``/dev/null`` as root
would replace the host's ``/dev/null`` with a file, over a FIFO would cut off its reader, and
``/dev/stdout`` or ``/dev/fd/1`` is the caller's own output, whatever it points to. So
:func:`output_target` decides: a symlink is followed to its target (which is replaced, the link
kept); a regular file or a new path is written by rename; anything else (a device, a FIFO, a
socket, a path through ``/dev/fd`` or ``/proc``) is written through, opened and written in place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

#: Symlinks followed before giving up (the kernel's own limit is 40).
_MAX_LINKS = 40
#: Paths that name a process's open descriptors: written through, never resolved and replaced.
_DESCRIPTOR_PREFIXES = ("/dev/fd/", "/dev/stdout", "/dev/stderr", "/proc/")


def _through_descriptor(path: str) -> bool:
    """Whether ``path``, or a link on the way to its target, names an open descriptor."""
    p = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if p.startswith(_DESCRIPTOR_PREFIXES) or p == "/dev/fd":
            return True
        try:
            link = os.readlink(p)
        except OSError:
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return False


def output_target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where an output ``path`` is written, and whether by atomic rename (True) or through (False).

    Symlinks are followed to the target; a missing target (a new path, a dangling link's target)
    or a regular file is written by rename; a directory is an ``IsADirectoryError``."""
    raw = os.fspath(path)
    if _through_descriptor(raw):
        return Path(raw), False
    try:
        mode = os.stat(raw).st_mode
    except FileNotFoundError:
        return Path(os.path.realpath(raw)), True
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", raw)
    if stat.S_ISREG(mode):
        return Path(os.path.realpath(raw)), True
    return Path(raw), False


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically where :func:`output_target` allows it (else through);
    on any error the old file is intact and no temporary file is left (the ``OSError`` is raised)."""
    target, atomic = output_target(path)
    if not atomic:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _rename(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def temp_path_for(path: str | os.PathLike[str], tag: str) -> Path:
    """A temporary file for building ``path``: beside its target when it can be renamed into
    place, else in the temporary directory (never beside a device, as in ``/dev``)."""
    target, atomic = output_target(path)
    folder = target.parent if atomic else Path(tempfile.gettempdir())
    return folder / f".{target.name}.{tag}.tmp"


def install(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Put the finished temporary file ``tmp`` at ``path``: renamed over a regular file or a new
    path (keeping an old file's permissions), else copied through and removed."""
    target, atomic = output_target(path)
    if atomic:
        _rename(tmp, target)
        return
    try:
        with open(tmp, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _rename(tmp: str | os.PathLike[str], target: Path) -> None:
    """Rename ``tmp`` over ``target`` (resolved by :func:`output_target`), keeping an old file's
    permissions, else giving a new one the umask's."""
    with contextlib.suppress(OSError):  # keep the old file's permissions where there was one
        os.chmod(tmp, os.stat(target).st_mode & 0o7777)
    if not target.exists():
        os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
