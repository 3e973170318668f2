"""Load a recorded OpenMetrics file (timestamps on every sample; gzip allowed) into frames.

The parser is a tight loop over lines because recordings are large (a 64-node, 2-hour recording
holds about ten million samples): families the analyzers do not use are skipped after one look at
their ``# TYPE`` line, a series' label set is parsed once and then recognised by its raw bytes, and
values are converted with numpy in bulk. Anything that is not a timestamped OpenMetrics sample is an
error with the line number, so a wrong or truncated file fails with one clear message.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Collection
from pathlib import Path
from typing import BinaryIO, NoReturn

import numpy as np

from fleetscope.analyzers.frames import Frames, RawSeries
from fleetscope.analyzers.samples import frames_from_raw, summarize
from fleetscope.errors import FleetscopeError

_LABEL = re.compile(rb'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')
_NAME = re.compile(rb"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _unescape(b: bytes) -> str:
    s = b.decode("utf-8", "replace")
    if "\\" in s:
        s = s.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return s


def _parse_head(head: bytes, lineno: int) -> tuple[str, dict[str, str]]:
    brace = head.find(b"{")
    if brace < 0:
        name = head.strip()
        labels: dict[str, str] = {}
    else:
        name = head[:brace]
        body = head[brace + 1 :].rstrip()
        if not body.endswith(b"}"):
            raise FleetscopeError(f"line {lineno}: unterminated label set")
        body = body[:-1]
        labels = {}
        pos = 0
        while pos < len(body):
            m = _LABEL.match(body, pos)
            if not m:
                raise FleetscopeError(f"line {lineno}: malformed labels")
            labels[m.group(1).decode()] = _unescape(m.group(2))
            pos = m.end()
    if not _NAME.match(name):
        raise FleetscopeError(f"line {lineno}: not an OpenMetrics sample")
    return name.decode(), labels


def _open(path: Path) -> BinaryIO:
    with path.open("rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        # GzipFile.readline is Python code; a BufferedReader on top reads lines in C.
        return io.BufferedReader(gzip.open(path, "rb"), buffer_size=1 << 20)
    return path.open("rb", buffering=1 << 20)


# The hot loop of the module docstring: about ten million lines per recording, so the per-line cases
# stay inline in one function (a call per line costs more than the parse) rather than in helpers.
def read_openmetrics(  # noqa: C901
    path: str | Path,
    metrics: Collection[str] | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[dict[str, list[RawSeries]], float, float, float]:
    """Parse the file: (raw series by metric, first time, last time, typical sample spacing).

    Only the series of ``metrics`` are kept (all when None). Samples no exporter writes (see
    :func:`~fleetscope.analyzers.frames.drop_bad_samples`) are left out, with one warning that
    says how many.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise FleetscopeError(f"cannot read {path}: {exc.strerror}") from None
    if size == 0:
        raise FleetscopeError(f"{path} is empty: expected a recorded OpenMetrics file")
    wanted = set(metrics) if metrics is not None else None
    # series head bytes -> [name, labels, list of value bytes, list of time bytes, wanted]
    series: dict[bytes, list] = {}
    family_skip = False
    family: bytes = b""
    saw_eof = False
    n_samples = 0
    lineno = 0
    last_head: bytes | None = None
    last_entry: list = []  # the previous line's series entry ([] before the first sample)
    try:
        with _open(path) as fh:
            raw_fh = getattr(getattr(fh, "raw", None), "fileobj", None) or fh
            for lineno, line in enumerate(fh, 1):
                if saw_eof:
                    if line.strip():
                        raise FleetscopeError(f"{path}: line {lineno}: data after '# EOF'")
                    continue
                if line[:1] == b"#":
                    if line.startswith(b"# TYPE "):
                        parts = line.split()
                        family = parts[2] if len(parts) > 2 else b""
                        fam = family.decode()
                        family_skip = wanted is not None and not any(
                            w == fam or (w.startswith(fam) and w[len(fam) :] in ("_total", "_created"))
                            for w in wanted
                        )
                    elif line.rstrip() == b"# EOF":
                        saw_eof = True
                    if progress and lineno % 200000 == 0:
                        progress(min(raw_fh.tell() / size, 1.0))
                    continue
                if family_skip and line.startswith(family):
                    continue
                if not line.strip():
                    continue
                if progress and lineno % 200000 == 0:
                    progress(min(raw_fh.tell() / size, 1.0))
                parts = line.rsplit(None, 2)
                if len(parts) != 3 or (b"}" not in parts[0] and b"{" in parts[0]):
                    _bad_line(path, lineno, line)
                head, v, t = parts
                if head is last_head or head == last_head:
                    entry = last_entry
                else:
                    known = series.get(head)
                    if known is not None:
                        entry = known
                    else:
                        if b"}" in t or b"}" in v:
                            _bad_line(path, lineno, line)
                        try:
                            name, labels = _parse_head(head, lineno)
                        except FleetscopeError as exc:
                            raise FleetscopeError(f"{path}: {exc}") from None
                        entry = [name, labels, [], [], wanted is None or name in wanted, [], []]
                        series[head] = entry
                    if last_entry and len(last_entry[2]) >= 64:
                        _flush(path, last_entry)  # a finished run of one series -> numpy (less memory)
                    last_head, last_entry = head, entry
                if entry[4]:
                    entry[2].append(v)
                    entry[3].append(t)
                    n_samples += 1
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise FleetscopeError(f"{path} is truncated or corrupt: {exc}") from None
    except UnicodeDecodeError:
        raise FleetscopeError(f"{path} is not a text OpenMetrics file") from None
    if not saw_eof:
        raise FleetscopeError(
            f"{path} is truncated: no '# EOF' at the end (a recorded OpenMetrics file ends with one)"
        )
    if not series:
        raise FleetscopeError(f"{path} holds no samples")
    raw: dict[str, list[RawSeries]] = {}
    for entry in series.values():
        if not entry[4]:
            continue
        _flush(path, entry)
        name, labels, _, _, _, vchunks, tchunks = entry
        if not vchunks:
            continue
        values = np.concatenate(vchunks)
        times = np.concatenate(tchunks)
        entry[5], entry[6] = [], []
        # Milliseconds (text-format convention), judged by the bulk so one odd stamp decides nothing.
        finite = times[np.isfinite(times)]
        if finite.size and np.median(finite) > 1e11:
            times = times / 1000.0
        raw.setdefault(name, []).append(RawSeries(labels, times, values))
    if not raw:
        raise FleetscopeError(f"{path} holds none of the series the analyzers read")
    out = summarize(raw, str(path))
    if progress:
        progress(1.0)
    return out


def _flush(path: Path, entry: list) -> None:
    """Convert a series' pending value/timestamp bytes to float arrays."""
    if not entry[2]:
        return
    try:
        entry[5].append(np.array(entry[2], dtype=np.bytes_).astype(float))
        entry[6].append(np.array(entry[3], dtype=np.bytes_).astype(float))
    except ValueError:
        raise FleetscopeError(
            f"{path}: series {entry[0]} has a value or timestamp that is not a number"
        ) from None
    entry[2], entry[3] = [], []


def _bad_line(path: Path, lineno: int, line: bytes) -> NoReturn:
    text = line.decode("utf-8", "replace").strip()
    if len(text.split()) == 2:
        raise FleetscopeError(
            f"{path}: line {lineno}: sample without a timestamp; a recording needs a timestamp on every sample"
        )
    raise FleetscopeError(f"{path}: line {lineno} is not an OpenMetrics sample: {text[:80]!r}")


def load_file(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: Callable[[float], None] | None = None,
) -> Frames:
    """Load ``path`` onto a grid from its first to its last sample (or ``start``/``end``).

    A Parquet archive (``fleetscope record``, known by its magic bytes) goes to its own loader.
    """
    from fleetscope.analyzers.load_parquet import is_parquet

    if is_parquet(path):
        from fleetscope.analyzers.load_parquet import load_parquet

        return load_parquet(path, metrics, step=step, start=start, end=end, progress=progress)
    raw, t_min, t_max, spacing = read_openmetrics(path, metrics, progress)
    return frames_from_raw(
        raw, t_min, t_max, spacing, step=step, start=start, end=end, source=os.fspath(path)
    )
