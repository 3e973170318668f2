"""Load a recorded OpenMetrics file (timestamps on every sample; gzip allowed) into frames.

Recordings are large (a 64-node hour holds 7 million lines, 1.3 GB of text), so the parser works on
runs of lines rather than on lines (:class:`_Reader`): recorders write a series' samples one after
another, a run's label set is parsed once, and its values and timestamps are parsed in bulk by C
code (:mod:`fleetscope.window.pairs`: Arrow's CSV reader on a thread of its own where pyarrow is
installed, as the analyzer extra does); gzip is inflated on another thread (ISA-L's inflate where
the ``isal`` package is installed, as the analyzer extra does; zlib otherwise), which also finds
each chunk's newlines. Families the
analyzers do not use are skipped after one look at their ``# TYPE`` line. Anything irregular goes
through the line-by-line parser, which is the reference: anything that is not a timestamped
OpenMetrics sample is an error with the line number, so a wrong or truncated file fails with one
clear message. docs/benchmarks.md#loading-at-scale has the numbers.
"""

from __future__ import annotations

import array
import bisect
import gzip
import os
import queue
import re
import threading
import types
import zlib
from collections import deque
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, cast

import numpy as np

from fleetscope.errors import FleetscopeError
from fleetscope.textformat import unescape_label_value
from fleetscope.window.frames import (
    MAX_GRID_CELLS,
    MAX_GRID_POINTS,
    Frames,
    RawSeries,
    check_grid,
    drop_bad_samples,
)
from fleetscope.window.grid import round_step
from fleetscope.window.memory import collector_paused
from fleetscope.window.pairs import Parsed, numbers, parse_pairs, parse_soon
from fleetscope.window.samples import frames_from_raw, series_spacing, summarize

_LABEL = re.compile(rb'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')
_NAME = re.compile(rb"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _inflater() -> tuple[types.ModuleType, type[Exception]]:
    """The gzip module recordings are inflated with, and its error: ISA-L's, about 3.5 times as
    fast as zlib (the analyzer extra installs it), or the standard library's without it."""
    try:
        from isal import igzip, isal_zlib
    except ImportError:  # pragma: no cover -- exercised where isal is not installed
        return gzip, zlib.error
    return igzip, cast(type[Exception], isal_zlib.error)  # isal's stub types it as an instance


_gzip, _InflateError = _inflater()


#: Label sets remembered by :func:`_parse_head` (each metric of a GPU repeats its labels), and the
#: longest one remembered: a bound on the memory, whatever a hostile file holds.
LABEL_CACHE_ENTRIES = 1 << 14
LABEL_CACHE_BYTES = 1 << 10


def _parse_head(
    head: bytes, lineno: int, cache: dict[bytes, dict[str, str]] | None = None
) -> tuple[str, dict[str, str]]:
    """A sample's name and labels; ``cache``: label sets parsed before, by their text (only a
    label set that parsed is remembered, so every error is met as without it)."""
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
        known = cache.get(body) if cache is not None else None
        if known is not None:
            labels = dict(known)
        else:
            labels = {}
            pos = 0
            while pos < len(body):
                m = _LABEL.match(body, pos)
                if not m:
                    raise FleetscopeError(f"line {lineno}: malformed labels")
                labels[m.group(1).decode()] = unescape_label_value(m.group(2).decode("utf-8", "replace"))
                pos = m.end()
            if cache is not None and len(body) <= LABEL_CACHE_BYTES and len(cache) < LABEL_CACHE_ENTRIES:
                cache[body] = dict(labels)
    if not _NAME.match(name):
        raise FleetscopeError(f"line {lineno}: not an OpenMetrics sample")
    return name.decode(), labels


#: Decompressed bytes handed to the parser at a time, and the gzip thread's buffers of them (one
#: being parsed, the others filled ahead: the thread's pace varies with the text it inflates).
CHUNK_BYTES = 8 << 20
INFLATE_BUFFERS = 4
#: iter_openmetrics hands over the family being parsed once its series hold this many samples (a
#: day of a large job's largest family would otherwise be held whole), checked every
#: BATCH_CHECK_CHUNKS chunks.
BATCH_SAMPLES = 8_000_000
BATCH_CHECK_CHUNKS = 8
#: Longest line read: a line longer than this is no recording's (a 1 GB line took 5.4 GB before
#: its error); refused as soon as it is passed, with one line.
MAX_LINE_BYTES = 4 << 20
#: Runs whose (span, spacing, first time) :meth:`_Reader.check_size` judges a grid's size by.
SHAPES = 200
#: Flushes whose parse may be outstanding at once (each holds its chunk's pairs and their floats,
#: about 2 MB for a recording's 8 MB chunk): past this the reader waits for the oldest.
JOBS_AHEAD = 3


def _too_long(path: Path) -> FleetscopeError:
    return FleetscopeError(
        f"{path} is not a recorded OpenMetrics file: a line is over {MAX_LINE_BYTES:,} bytes long"
    )


def _newlines(buf: bytes | bytearray, begin: int, end: int) -> np.ndarray:
    """The positions of the newlines of ``buf[begin:end]`` (in ``buf``)."""
    nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8, count=end - begin, offset=begin) == 10)
    if begin:  # a numpy call is a round of the GIL, which the gzip thread waits for
        nl += begin
    return nl


#: The inflate thread hands over a chunk's newline positions only when there are fewer than one per
#: this many bytes (recordings' lines are 100 to 250 bytes long): a file of empty lines would
#: otherwise queue 8 bytes per byte for the chunks ahead; the parsing thread finds those itself.
NEWLINE_SPACING_MIN = 16


def _chunks(path: Path) -> Iterator[tuple[bytes, int, np.ndarray | None]]:
    """The file's bytes in chunks of about :data:`CHUNK_BYTES`, with how far into the file each ends
    and where its newlines are (None: not found yet). A gzip file's chunk is one of the inflate
    thread's buffers, parsed where it lies: it is filled again once the next chunk is asked for.

    A gzip file is decompressed on a thread (ISA-L or zlib, both release the GIL), which also finds
    the chunk's newlines (numpy releases it too), at most INFLATE_BUFFERS - 1 chunks ahead, so on
    two cores that overlaps parsing this one; a decompression error is raised here, after the
    chunks before it, where the line-by-line reader would have met it.
    """
    with path.open("rb") as fh:
        magic = fh.read(2)
    if magic != b"\x1f\x8b":
        with path.open("rb") as fh:
            while data := fh.read(CHUNK_BYTES):
                yield data, fh.tell(), _newlines(data, 0, len(data))
        return
    # Buffers made here and passed back and forth: chunks allocated by the thread and freed by
    # this one fragment glibc's per-thread arenas (peak RSS grew by hundreds of MB); the parser reads
    # them in place (copying each to bytes cost 0.26 s of the parsing thread per 1.5 GB).
    free: queue.Queue = queue.Queue()
    for _ in range(INFLATE_BUFFERS):
        free.put(bytearray(CHUNK_BYTES))
    q: queue.Queue = queue.Queue()
    stop = threading.Event()

    def inflate() -> None:
        try:
            with path.open("rb") as raw, _gzip.GzipFile(fileobj=raw) as gz:
                while not stop.is_set():
                    buf = free.get()
                    if buf is None:  # stopped while waiting for a buffer
                        break
                    n = gz.readinto(buf)
                    if not n:
                        break
                    nl = _newlines(buf, 0, n)
                    q.put((buf, n, raw.tell(), nl if len(nl) * NEWLINE_SPACING_MIN <= n else None))
            q.put(None)
        except Exception as exc:  # noqa: BLE001 -- handed to the parsing thread, which raises it
            q.put(exc)

    worker = threading.Thread(target=inflate, name="fleetscope-gunzip", daemon=True)
    worker.start()
    try:
        while (item := q.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            buf, n, at, nl = item
            if n < len(buf):  # the last chunk
                del buf[n:]
            yield buf, at, nl
            free.put(buf)  # parsed: the thread may fill it again
    finally:
        stop.set()
        free.put(None)  # wakes the thread if it waits for a buffer (it polled every 0.1 s)
        worker.join()


def read_openmetrics(
    path: str | Path,
    metrics: Collection[str] | None = None,
    progress: Callable[[float], None] | None = None,
    window: tuple[float | None, float | None, float | None] = (None, None, None),
) -> tuple[dict[str, list[RawSeries]], float, float, float]:
    """Parse the file: (raw series by metric, first time, last time, typical sample spacing).

    Only the series of ``metrics`` are kept (all when None). Samples no exporter writes (see
    :func:`~fleetscope.window.frames.drop_bad_samples`) are left out, with one warning that
    says how many. ``window`` (start, end, step as asked for; None: the file's) lets a grid too
    large for the limits be refused after the first families instead of after the whole file.
    """
    return RecordingRead(path, metrics, window).finish(progress)


class RecordingRead:
    """One pass of :func:`read_openmetrics` that can stop after the recording's head: the window's
    length is judged from the first family (:meth:`first_family_seconds`), and a window loaded in
    one piece then reads on from there (:meth:`finish`) instead of reading the head again."""

    def __init__(
        self,
        path: str | Path,
        metrics: Collection[str] | None = None,
        window: tuple[float | None, float | None, float | None] = (None, None, None),
    ) -> None:
        self.path, self.window = Path(path), window
        self.reader = _Reader(self.path, metrics)
        self.reader.start, self.reader.end, self.reader.step = window
        self._chunks: Generator[float, None, None] = _feed_file(self.path, self.reader)
        self._at = 0.0  # the share of the file read

    def _read_on(self, until: Callable[[], bool]) -> None:
        while not until():
            done = next(self._chunks, None)
            if done is None:
                return
            self.reader.check_size()
            self._at = done

    def first_family_seconds(self) -> float | None:
        """The time the first family the analyzers read spans (None: no such family): a recording's
        families each span its window, so this is the window's length, from the file's head (the
        family's series as read when its ``# TYPE`` line after it, or the file's end, is met). A
        recording written time-major (every series' first samples first) says less here than its
        window holds."""
        reader = self.reader
        self._read_on(lambda: reader.first_family_read())
        reader.settle()
        if reader.first_wanted is None:
            return None
        name = reader.first_wanted[0]
        entries = [e for e in reader.series.values() if e.name == name]
        peeked = (_entry_series(self.path, e, keep=True) for e in entries)
        raw = {name: [s for s in peeked if s is not None]}
        drop_bad_samples(raw)  # the samples the loader drops (odd timestamps) do not count (it warns)
        times = [s.times for s in raw.get(name, []) if len(s.times)]
        if not times:
            return None
        return float(max(t.max() for t in times) - min(t.min() for t in times))

    def finish(
        self, progress: Callable[[float], None] | None = None
    ) -> tuple[dict[str, list[RawSeries]], float, float, float]:
        """The rest of the file read: :func:`read_openmetrics`' answer."""
        if progress and self._at:
            progress(self._at)
        for done in self._chunks:
            self.reader.check_size()
            if progress:
                progress(done)
        raw = _to_raw(self.path, self.reader)
        out = summarize(raw, str(self.path))
        if progress:
            progress(1.0)
        return out

    def close(self) -> None:
        """Stop reading (the gzip thread ends)."""
        self._chunks.close()


def _feed_file(path: Path, reader: _Reader) -> Generator[float, None, None]:
    """Feed ``path`` to ``reader`` chunk by chunk, whole lines at a time; after each chunk, yield
    the share of the file read. Unreadable input ends in one :class:`FleetscopeError`."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise FleetscopeError(f"cannot read {path}: {exc.strerror}") from None
    if size == 0:
        raise FleetscopeError(f"{path} is empty: expected a recorded OpenMetrics file")
    try:
        yield from _feed_chunks(path, reader, size)
    except (OSError, EOFError, zlib.error, _InflateError, gzip.BadGzipFile) as exc:
        raise FleetscopeError(f"{path} is truncated or corrupt: {exc}") from None
    except UnicodeDecodeError:
        raise FleetscopeError(f"{path} is not a text OpenMetrics file") from None


def _feed_chunks(path: Path, reader: _Reader, size: int) -> Generator[float, None, None]:
    """:func:`_feed_file`'s loop. An error met here (a line too long, a corrupt stream, a line the
    fast path refuses) waits for the parses sent before it: a line before it that does not parse
    is the error the line-by-line parser meets first."""
    try:
        carry = b""  # the start of a line that the previous chunk cut
        for data, at, found in _chunks(path):
            nl = _newlines(data, 0, len(data)) if found is None else found
            if not len(nl):
                if len(carry) + len(data) > MAX_LINE_BYTES:
                    raise _too_long(path)
                carry += data
                continue
            first, last = int(nl[0]) + 1, int(nl[-1]) + 1
            if len(carry) + first > MAX_LINE_BYTES:
                raise _too_long(path)
            if carry:  # the cut line whole, then the chunk's own lines (no copy of the chunk)
                line = carry + data[:first]
                reader.feed(line, 0, len(line), _newlines(line, 0, len(line)))
                reader.feed(data, first, last, nl[1:])
            else:
                reader.feed(data, 0, last, nl)
            carry = data[last:]
            yield min(at / size, 1.0)
        if carry:  # a last line without its newline reads the same with one
            line = carry + b"\n"
            reader.feed(line, 0, len(line), _newlines(line, 0, len(line)))
    except Exception:
        reader.settle()
        raise


def _to_raw(path: Path, reader: _Reader) -> dict[str, list[RawSeries]]:
    """The parsed entries as raw series (seconds), with the end-of-file checks."""
    reader.settle()
    _check_end(path, reader)
    raw: dict[str, list[RawSeries]] = {}
    for entry in reader.series.values():
        if not entry.wanted:
            continue
        one = _entry_series(path, entry)
        if one is not None:
            raw.setdefault(entry.name, []).append(one)
    if not raw:
        raise FleetscopeError(f"{path} holds none of the series the analyzers read")
    return raw


def _check_end(path: Path, reader: _Reader) -> None:
    if not reader.saw_eof:
        raise FleetscopeError(
            f"{path} is truncated: no '# EOF' at the end (a recorded OpenMetrics file ends with one)"
        )
    if not reader.series:
        raise FleetscopeError(f"{path} holds no samples")


def _milliseconds(times: np.ndarray) -> bool:
    """Whether a series' timestamps are milliseconds (the text format's convention): judged by the
    bulk, so one odd stamp decides nothing."""
    if times.size and times.max() < 1e11:  # every stamp in seconds (one pass; NaN goes below)
        return False
    finite = times[np.isfinite(times)]
    return bool(finite.size and (finite.min() > 1e11 or (finite.max() > 1e11 and np.median(finite) > 1e11)))


def _entry_series(path: Path, entry: _Series, keep: bool = False) -> RawSeries | None:
    """The samples a series entry holds now, as one raw series in seconds (None: none), emptied
    (``keep``: a copy, the entry keeps them, and its unit is not settled by them).

    Milliseconds (the text format's convention) are judged by the bulk, so one odd stamp decides
    nothing; an entry met again later (:func:`iter_openmetrics`) keeps the unit judged first.
    """
    _flush(path, entry)
    labels, vchunks, tchunks = entry.labels, entry.values, entry.times
    if not vchunks:
        return None
    if keep:
        labels, values, times = dict(labels), np.concatenate(vchunks), np.concatenate(tchunks)
    else:  # one run is one array already (most series): no copy, no second peak
        values = vchunks[0] if len(vchunks) == 1 else np.concatenate(vchunks)
        times = tchunks[0] if len(tchunks) == 1 else np.concatenate(tchunks)
        entry.values, entry.times = [], []
    # Every run below 1e11 is what _milliseconds' first test reads from the whole series.
    ms = entry.ms if entry.ms is not None else (not entry.seconds and _milliseconds(times))
    if not keep:
        entry.ms = ms
    if ms:
        times = times / 1000.0
    return RawSeries(labels, times, values)


#: Metric names a family ``F`` declares (``# TYPE F ...``): F itself and F with one of these.
FAMILY_SUFFIXES = ("", "_total", "_created", "_count", "_sum", "_bucket", "_info", "_gcount", "_gsum")


def iter_openmetrics(
    path: str | Path,
    metrics: Collection[str] | None = None,
    progress: Callable[[float], None] | None = None,
) -> Iterator[tuple[str, list[RawSeries]]]:
    """Parse the file family by family: (metric, its series) as soon as the family is finished,
    and a large family in batches of about :data:`BATCH_SAMPLES` samples.

    OpenMetrics forbids interleaving families, so when a ``# TYPE`` line opens the next family (or
    ``# EOF`` ends the file) the series of the one before are complete: they are yielded and
    dropped, and memory follows the largest family instead of the file. A family whose series hold
    :data:`BATCH_SAMPLES` before it ends is handed over as it stands (its metric then comes in
    several batches; a series cut by the hand-off comes again in the next), so memory follows the
    batch, not a family that grows with the window. Series are those
    :func:`read_openmetrics` returns, in its order, before :func:`~fleetscope.window.samples.summarize`
    (the caller cleans). A sample outside its family (a file that breaks the rule) is held until
    its own family ends, or the end of the file; a series met again after it was yielded comes
    again, as a second batch of its metric (the reader merges them: ``build_frames`` merges series
    of the same labels). Errors are :func:`read_openmetrics`' (truncated: after the batches before).
    """
    path = Path(path)
    reader = _Reader(path, metrics, streaming=True)
    for k, done in enumerate(_feed_file(path, reader), 1):
        if k % BATCH_CHECK_CHUNKS == 0 and reader.fresh_samples() >= BATCH_SAMPLES:
            reader.family_done(reader.family)
        yield from reader.take_ready()
        if progress:
            progress(done)
    reader.settle()
    _check_end(path, reader)
    reader.family_done(None)  # whatever is still held (samples outside their family)
    yield from reader.take_ready()
    if not reader.n_wanted:
        raise FleetscopeError(f"{path} holds none of the series the analyzers read")
    if progress:
        progress(1.0)


class _Series:
    """One series of the recording as the parser holds it: its samples' text not yet parsed
    (``vtext``/``ttext``, bytes per line) and its parsed runs (``values``/``times``, arrays)."""

    __slots__ = ("fresh", "labels", "ms", "name", "seconds", "times", "ttext", "values", "vtext", "wanted")

    def __init__(self, name: str, labels: dict[str, str], wanted: bool) -> None:
        self.name, self.labels, self.wanted = name, labels, wanted
        self.vtext: list[bytes] = []
        self.ttext: list[bytes] = []
        self.values: list[np.ndarray] = []
        self.times: list[np.ndarray] = []
        #: whether its times are in milliseconds, once judged (kept: a series met again keeps it)
        self.ms: bool | None = None
        #: whether every timestamp it holds is known to be below 1e11 (so in seconds), from each
        #: run's largest as it was added: most series are judged without a pass over their times
        self.seconds = True
        #: streaming: whether it took samples since it was last handed out (it is in ``fresh``)
        self.fresh = False


class _Job:
    """One flush of a chunk's runs: their ``value timestamp`` text gathered, being parsed (maybe on
    the pairs worker), and what its result is handed to once it is in."""

    __slots__ = ("counts", "ends", "lens", "parsed", "pending", "text")

    def __init__(
        self,
        pending: list[tuple[_Series, int, int, int, bytes]],
        counts: np.ndarray,
        text: bytes,
        ends: np.ndarray,
        lens: np.ndarray,
        parsed: Parsed,
    ) -> None:
        self.pending, self.counts, self.text = pending, counts, text
        self.ends, self.lens, self.parsed = ends, lens, parsed


class _Reader:
    """The parser's state over the chunks: series by their head bytes, the current family, EOF.

    Two paths give the same result. :meth:`_lines` is the line-by-line parser, with every check and
    its line number. :meth:`feed` sends what it can down a fast path: recorders write a series' samples
    one after another, so a run of lines that all begin with the same ``<name>{labels} `` is found
    with a few probes (:func:`_run_end`), checked in C (its line count against the count of that
    prefix after a newline), stripped of the prefix, and its ``value timestamp`` pairs are parsed with
    those of the other runs of the chunk in one call (:mod:`fleetscope.window.pairs`: with pyarrow,
    on its worker thread, while this one reads on). Lines of a family no one reads are skipped the
    same way. Anything else (comments, blank lines, a run whose pairs do not parse, a series that
    comes back later) goes to :meth:`_lines`, after the pending runs, so the samples stay in file
    order and every error is the line-by-line parser's.

    A flush's parse is taken in (:meth:`_take`) before anything that reads the series or could meet
    an error first: the next sample line the line-by-line parser reads, the end, a family handed
    out, an error of the reader's own; comment lines do not wait for it (a run that does not parse
    is then read line by line as in the family and state it was met in).
    """

    def __init__(self, path: Path, metrics: Collection[str] | None, streaming: bool = False) -> None:
        self.path = path
        # Streaming (iter_openmetrics): entries that took samples since they were last handed out,
        # and the finished families' batches waiting to be taken.
        self.streaming = streaming
        self.fresh: list[_Series] = []
        self.ready: list[tuple[str, list[RawSeries]]] = []
        self.wanted = set(metrics) if metrics is not None else None
        # series head bytes -> its series
        self.series: dict[bytes, _Series] = {}
        self.label_sets: dict[bytes, dict[str, str]] = {}  # _parse_head's cache
        self.family = b""
        self.family_skip = False
        self.saw_eof = False
        self.lineno = 0
        self.last_head: bytes | None = None
        self.last_entry: _Series | None = None  # the previous line's series (None before the first sample)
        # Runs of the current buffer waiting for the bulk parse: (entry, first line index, index after
        # the last, line number before the first, its lines' prefix).
        self.pending: list[tuple[_Series, int, int, int, bytes]] = []
        # Flushes whose parse is not taken in yet, oldest first (at most JOBS_AHEAD).
        self.jobs: deque[_Job] = deque()
        # The gather's index and bytes, kept from flush to flush (grown as needed).
        self.scratch = np.empty(0, dtype=np.intp)
        self.scratch_bytes = np.empty(0, dtype=np.uint8)
        self.begin = 0  # where the current buffer's lines begin
        self.chunk: tuple[bytes, np.ndarray] | None = None  # the buffer being fed, and its newlines
        self.run_lines = 0  # the last run's lines: the next run's likely length (a family's series
        # hold the same samples)
        self.n_wanted = 0  # series kept so far
        self.type_lines = 0  # ``# TYPE`` lines met
        self.first_wanted: tuple[str, int] | None = None  # the first series kept: (its name, type_lines)
        self.shapes: list[tuple[float, float, float]] = []  # (span, spacing, first time) of the first
        # SHAPES runs
        self.start: float | None = None  # the window asked for, when known (check_size)
        self.end: float | None = None
        self.step: float | None = None

    # ------------------------------------------------------------------ fast path
    def feed(self, buf: bytes, begin: int, end: int, nl: np.ndarray) -> None:
        """Parse the lines of ``buf[begin:end]`` (which ends with a newline; ``nl``: the positions of
        its newlines in ``buf``)."""
        if end <= begin:
            return
        # Indexed one at a time as Python ints: tolist() made (and freed) 8.5 M int objects an hour.
        nls = array.array("q", nl.astype(np.int64, copy=False).tobytes())
        n_lines = len(nls)
        self.begin, self.chunk = begin, (buf, nl)
        nonempty: np.ndarray | None = None  # indices of the lines that are not empty (made when needed)
        i = 0
        while i < n_lines:
            s = nls[i - 1] + 1 if i else begin
            c = buf[s]
            if c == 10:  # a run of empty lines: nothing to parse, only lines to count (300 MB of
                # them took minutes one at a time); line k is empty when its newline follows the last
                if nonempty is None:
                    nonempty = np.flatnonzero(np.diff(nl, prepend=begin - 1) != 1)
                k = int(np.searchsorted(nonempty, i + 1))
                j = int(nonempty[k]) if k < len(nonempty) else n_lines
                self.flush(buf, nl)
                self.lineno += j - i
                i = j
                continue
            if self.saw_eof or c == 35 or c in b" \t\r\n":  # '#', a blank line, anything after EOF
                self.flush(buf, nl)  # before: a fallback must see the state the lines before it left
                self._lines(buf, s, nls[i] + 1)
                i += 1
                continue
            if self.family_skip and buf.startswith(self.family, s):
                j = _next_comment(buf, nls, s, end)
                stop = nls[j - 1] + 1
                if 1 + buf.count(b"\n" + self.family, s, stop) == j - i:
                    self.lineno += j - i
                else:
                    self.flush(buf, nl)
                    self._lines(buf, s, stop)
                i = j
                continue
            line = buf[s : nls[i]]
            parts = line.rsplit(None, 2)
            if (
                len(parts) != 3
                or not line.startswith(parts[0] + b" ")
                or (b"}" not in parts[0] and b"{" in parts[0])
            ):
                self.flush(buf, nl)
                self._lines(buf, s, nls[i] + 1)
                i += 1
                continue
            head, v, t = parts
            head = bytes(head)
            entry = self._entry(head, v, t, line, self.lineno + 1)
            prefix = head + b" "
            j = _run_end(buf, nls, i, prefix, self.run_lines)
            if 1 + buf.count(b"\n" + prefix, s, nls[j - 1] + 1) != j - i:  # another series in between
                j = i + 1
                while j < n_lines and buf.startswith(prefix, nls[j - 1] + 1):
                    j += 1
            if entry.wanted:
                self.pending.append((entry, i, j, self.lineno, prefix))
            self.last_head, self.last_entry = head, entry
            self.run_lines = j - i
            self.lineno += j - i
            i = j
        self.flush(buf, nl)
        self.chunk = None

    def _entry(self, head: bytes, v: bytes, t: bytes, line: bytes, lineno: int) -> _Series:
        """The series entry of ``head``, made (with the line-by-line parser's checks) if new."""
        known = self.series.get(head)
        if known is not None:
            return known
        if b"}" in t or b"}" in v:
            _bad_line(self.path, lineno, line)
        try:
            name, labels = _parse_head(head, lineno, self.label_sets)
        except FleetscopeError as exc:
            raise FleetscopeError(f"{self.path}: {exc}") from None
        entry = _Series(name, labels, self.wanted is None or name in self.wanted)
        self.series[head] = entry
        self.n_wanted += bool(entry.wanted)
        if entry.wanted and self.first_wanted is None:
            self.first_wanted = (name, self.type_lines)
        return entry

    def first_family_read(self) -> bool:
        """Whether the family of the first series kept has ended (a ``# TYPE`` line after it, or
        ``# EOF``)."""
        return self.first_wanted is not None and (self.type_lines > self.first_wanted[1] or self.saw_eof)

    # ------------------------------------------------------------------ streaming
    def _mark(self, entry: _Series) -> None:
        entry.fresh = True
        self.fresh.append(entry)

    def family_done(self, family: bytes | None) -> None:
        """Queue the series of ``family`` that took samples since last time, by metric in order of
        first appearance (``None``: every series still held, at the end of the file)."""
        self.settle()
        if not self.fresh:
            return
        fam = None if family is None else family.decode("utf-8", "replace")
        batch: dict[str, list[RawSeries]] = {}
        held = []
        for entry in self.fresh:
            name = entry.name
            if fam is not None and not (name.startswith(fam) and name[len(fam) :] in FAMILY_SUFFIXES):
                held.append(entry)  # a sample outside its family: kept until its own ends
                continue
            entry.fresh = False
            one = _entry_series(self.path, entry)
            if one is not None:
                batch.setdefault(name, []).append(one)
        self.fresh = held
        self.ready.extend(batch.items())

    def fresh_samples(self) -> int:
        """Samples the series entries hold since they were last handed out."""
        self.settle()
        return sum(sum(a.size for a in e.values) + len(e.vtext) for e in self.fresh)

    def take_ready(self) -> list[tuple[str, list[RawSeries]]]:
        ready, self.ready = self.ready, []
        return ready

    def check_size(self) -> None:
        """Refuse, early and in check_grid's words, a recording whose grid will be over the limits.

        The grid is known only at the end, but its size can be judged after a few families: every
        series kept so far is a column, and a series spans (nearly) the whole window. The estimate
        (the median span and spacing of the first runs, so a stray timestamp moves nothing) must be
        over the limit by a margin, so a recording that fits is never refused here; the exact check
        runs when the grid is built.
        """
        if len(self.shapes) < SHAPES:  # the first runs' parses are what it judges by
            self.settle()
        if len(self.shapes) < 5:
            return
        span, spacing, first = np.median(np.array(self.shapes), axis=0)
        step = self.step or round_step(float(spacing))
        if not step > 0:
            return
        start = self.start if self.start is not None else float(first)
        end = self.end if self.end is not None else start + float(span)
        points = (end - start) / step + 1
        if points * self.n_wanted > 1.2 * MAX_GRID_CELLS or points > 1.2 * MAX_GRID_POINTS:
            self.settle()  # a line before that does not parse is the error met first
            check_grid(start, end, step, self.n_wanted)

    def flush(self, buf: bytes, nl: np.ndarray) -> None:
        """Send the pending runs of ``buf`` (newlines at ``nl``) to be parsed: their ``value
        timestamp`` parts gathered into one text, parsed in one call, taken in later in order."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        counts = np.array([p[2] - p[1] for p in pending], dtype=np.int64)
        firsts = np.array([p[1] for p in pending], dtype=np.int64)
        plens = np.array([len(p[4]) for p in pending], dtype=np.int64)
        starts, lens = _pair_spans(nl, self.begin, firsts, counts, plens)
        ends = np.cumsum(lens)
        # ``take`` of an index of numpy's own integer width: an int32 index (half the memory) was
        # cast to it first, which cost twice the gather (docs/benchmarks.md).
        size = int(ends[-1])
        if self.scratch.size < size:  # kept from flush to flush: a fresh one was allocated (8 bytes
            # a byte of pairs) and written to first for every flush
            self.scratch = np.empty(size + size // 4, dtype=np.intp)
            self.scratch_bytes = np.empty(self.scratch.size, dtype=np.uint8)
        index = _gather_index(starts, lens, ends, self.scratch[:size])
        gathered = self.scratch_bytes[:size]
        np.take(np.frombuffer(buf, dtype=np.uint8), index, mode="clip", out=gathered)
        text = gathered.tobytes()
        parsed = parse_soon(text, int(counts.sum()))
        while self.jobs and (len(self.jobs) >= JOBS_AHEAD or self.jobs[0].parsed.done()):
            self._take(self.jobs.popleft())
        self.jobs.append(_Job(pending, counts, text, ends, lens, parsed))

    def settle(self) -> None:
        """Take in every flush sent, in order (an error in one of them is raised here); the runs of
        a chunk left mid-way (an error of the fast path's own) are sent first."""
        if self.pending and self.chunk is not None:
            self.flush(*self.chunk)
        while self.jobs:
            self._take(self.jobs.popleft())

    def _take(self, job: _Job) -> None:
        """Hand a flush's parsed pairs to their series; a batch that does not parse is retried run
        by run, and a run that does not parse goes through the line-by-line parser."""
        parsed = job.parsed.result()
        if parsed is not None:
            values, times = parsed
            counts = job.counts.tolist()
            # Each run's largest timestamp, one numpy call a flush (NaN where one is NaN).
            largest = np.maximum.reduceat(times, np.cumsum(job.counts) - job.counts).tolist()
            at = 0
            for (entry, *_), n, most in zip(job.pending, counts, largest, strict=True):
                # Copies: a view would keep the chunk's whole table alive until the last series is
                # assembled, doubling the peak memory.
                self._add(entry, values[at : at + n].copy(), times[at : at + n].copy(), most)
                if len(self.shapes) < SHAPES and n > 1:
                    self.shapes.append(_shape(times[at : at + n]))
                at += n
            return
        # The lines are read as they were met: the fast path takes no line of a skipped family and
        # none after '# EOF', whatever the comment lines read since then said; and the reader is
        # left where it was (its line number, the last line's series).
        state = self.lineno, self.family_skip, self.saw_eof, self.last_head, self.last_entry
        self.family_skip = self.saw_eof = False
        line_at = np.concatenate([[0], np.cumsum(job.counts)])
        ends, lens = job.ends, job.lens
        for k, (entry, i, j, first, prefix) in enumerate(job.pending):
            a, b = int(ends[line_at[k]] - lens[line_at[k]]), int(ends[line_at[k + 1] - 1])
            pairs = job.text[a:b]
            one = parse_pairs(pairs, j - i)
            if one is not None:
                self._add(entry, one[0].copy(), one[1].copy())
            else:  # the run's own lines: its prefix and each line's pair (with its newline)
                self.lineno = first
                lines = b"".join([prefix + line + b"\n" for line in pairs.split(b"\n")[:-1]])
                self._lines(lines, 0, len(lines), settled=True)
        self.lineno, self.family_skip, self.saw_eof, self.last_head, self.last_entry = state

    def _add(
        self, entry: _Series, values: np.ndarray, times: np.ndarray, largest: float | None = None
    ) -> None:
        """Append a parsed run (``largest``: its largest timestamp, when known) to its series."""
        _flush(self.path, entry)
        if self.streaming and not entry.fresh:
            self._mark(entry)
        _append(entry, values, times, largest)

    # ------------------------------------------------------------------ line by line
    def _one_comment(self, buf: bytes, pos: int, stop: int) -> bool:
        """Whether ``buf[pos:stop]`` is one comment line that changes no series and meets no error
        (before '# EOF', outside streaming, where a ``# TYPE`` line hands out a family)."""
        return (
            not self.streaming
            and not self.saw_eof
            and buf[pos] == 35
            and buf.find(b"\n", pos, stop) == stop - 1
        )

    def _lines(  # noqa: C901 -- the reference parser
        self, buf: bytes, pos: int, stop: int, settled: bool = False
    ) -> None:
        """Parse ``buf[pos:stop]`` one line at a time (the reference for every case and error).
        The flushes sent before are taken in first (``settled``: they are), unless this is one
        comment line before '# EOF' outside streaming: that changes no series and meets no error."""
        if self.jobs and not settled and not self._one_comment(buf, pos, stop):
            self.settle()
        path, wanted, streaming = self.path, self.wanted, self.streaming
        lineno = self.lineno
        lines = bytes(buf[pos:stop]).split(b"\n")
        if lines and not lines[-1]:
            lines.pop()  # the empty piece after the region's last newline is not a line
        for line in lines:
            lineno += 1
            if self.saw_eof:
                if line.strip():
                    raise FleetscopeError(f"{path}: line {lineno}: data after '# EOF'")
                continue
            if line[:1] == b"#":
                if line.startswith(b"# TYPE "):
                    self.type_lines += 1
                    parts = line.split()
                    if streaming:
                        self.family_done(self.family)
                    self.family = family = parts[2] if len(parts) > 2 else b""
                    fam = family.decode()
                    # A family holds its own name and its suffixed series (a counter's ``_total``,
                    # a histogram's ``_bucket``/``_sum``/``_count``): it is read if any is wanted.
                    self.family_skip = wanted is not None and not any(
                        w.startswith(fam) and w[len(fam) :] in FAMILY_SUFFIXES for w in wanted
                    )
                elif line.rstrip() == b"# EOF":
                    self.saw_eof = True
                    if streaming:
                        self.family_done(self.family)
                continue
            if self.family_skip and line.startswith(self.family):
                continue
            if not line.strip():
                continue
            parts = line.rsplit(None, 2)
            if len(parts) != 3 or (b"}" not in parts[0] and b"{" in parts[0]):
                _bad_line(path, lineno, line)
            head, v, t = parts
            if (head is self.last_head or head == self.last_head) and self.last_entry is not None:
                entry = self.last_entry
            else:
                entry = self._entry(head, v, t, line, lineno)
                last = self.last_entry
                if last is not None and len(last.vtext) >= 64:
                    _flush(path, last)  # a finished run of one series -> numpy (less memory)
                self.last_head, self.last_entry = head, entry
            if entry.wanted:
                if streaming and not entry.fresh:
                    self._mark(entry)
                entry.vtext.append(v)
                entry.ttext.append(t)
        self.lineno = lineno


def _pair_spans(
    nl: np.ndarray, begin: int, firsts: np.ndarray, counts: np.ndarray, plens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where each line of the runs (``counts`` lines from line ``firsts``, prefixes ``plens`` bytes
    long) has its ``value timestamp`` part, and its length with the newline: runs one after another
    (nearly always) by slices, else line by line."""
    a, b = int(firsts[0]), int(firsts[-1] + counts[-1])
    if b - a == int(counts.sum()):
        starts = np.empty(b - a, dtype=np.int64)
        if a:
            np.add(nl[a - 1 : b - 1], 1, out=starts)
        else:
            starts[0] = begin
            np.add(nl[: b - 1], 1, out=starts[1:])
        lines = slice(a, b)
    else:
        before = np.cumsum(counts) - counts
        lines = np.arange(int(counts.sum())) + np.repeat(firsts - before, counts)
        starts = np.where(lines > 0, nl[np.maximum(lines - 1, 0)] + 1, begin)
    starts += np.repeat(plens, counts)
    lens = nl[lines] + 1
    lens -= starts
    return starts, lens


def _gather_index(starts: np.ndarray, lens: np.ndarray, ends: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The positions of the bytes of the pieces ``[starts[k], starts[k] + lens[k])`` one after the
    other (``ends``: the cumulative sum of ``lens``, each at least 1), written into ``index``
    (``ends[-1]`` integers, whatever they held): ones, with each piece's first position holding the
    jump to it, summed up."""
    index.fill(1)
    index[0] = starts[0]
    index[ends[:-1]] = starts[1:] - starts[:-1] - lens[:-1] + 1
    return np.cumsum(index, out=index)


def _shape(times: np.ndarray) -> tuple[float, float, float]:
    """(span, median spacing, first time) of one run's timestamps in seconds (milliseconds judged
    by their size)."""
    t = times[np.isfinite(times)]
    spacing = series_spacing(t) if t.size > 1 else None
    if spacing is None:
        return 0.0, 0.0, 0.0
    scale = 1000.0 if np.median(t) > 1e11 else 1.0
    lo = float(t.min())
    return (float(t.max()) - lo) / scale, spacing / scale, lo / scale


def _next_comment(buf: bytes, nls: Sequence[int], s: int, end: int) -> int:
    """The index of the first line at or after byte ``s`` that starts with ``#`` (the line count
    when none before ``end``)."""
    p = buf.find(b"#", s, end)
    while p > 0 and buf[p - 1] != 10:
        p = buf.find(b"#", p + 1, end)
    return len(nls) if p < 0 else bisect.bisect_left(nls, p)


def _run_end(buf: bytes, nls: Sequence[int], i: int, prefix: bytes, guess: int = 0) -> int:
    """The index of the first line after line ``i`` that does not begin with ``prefix``, assuming
    the series' lines are contiguous (the caller checks): ``guess`` lines when the last of them
    begins with it and the next does not (two probes), else gallop, then bisect."""
    n_lines = len(nls)
    c = i + guess
    if (
        guess > 1
        and c <= n_lines
        and buf.startswith(prefix, nls[c - 2] + 1)
        and (c == n_lines or not buf.startswith(prefix, nls[c - 1] + 1))
    ):
        return c
    good, k = i, 1
    while True:
        c = i + k
        if c >= n_lines:
            bad = n_lines
            break
        if not buf.startswith(prefix, nls[c - 1] + 1):
            bad = c
            break
        good, k = c, k * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if buf.startswith(prefix, nls[mid - 1] + 1):
            good = mid
        else:
            bad = mid
    return bad


def _flush(path: Path, entry: _Series) -> None:
    """Convert a series' pending value/timestamp bytes to float arrays."""
    if not entry.vtext:
        return
    try:
        values, times = numbers(entry.vtext), numbers(entry.ttext)
    except ValueError:
        raise FleetscopeError(
            f"{path}: series {entry.name} has a value or timestamp that is not a number"
        ) from None
    _append(entry, values, times)
    entry.vtext, entry.ttext = [], []


def _append(entry: _Series, values: np.ndarray, times: np.ndarray, largest: float | None = None) -> None:
    """Add a parsed run to its series (``largest``: its largest timestamp, when known), keeping
    ``entry.seconds`` true while every run's largest timestamp is below 1e11 (a NaN makes it
    false: :func:`_milliseconds` then judges the whole series)."""
    entry.values.append(values)
    entry.times.append(times)
    if entry.seconds:
        most = float(times.max(initial=-np.inf)) if largest is None else largest
        entry.seconds = most < 1e11


def _bad_line(path: Path, lineno: int, line: bytes) -> NoReturn:
    text = line.decode("utf-8", "replace").strip()
    if len(text.split()) == 2:
        raise FleetscopeError(
            f"{path}: line {lineno}: sample without a timestamp; a recording needs a timestamp on every "
            "sample"
        )
    raise FleetscopeError(f"{path}: line {lineno} is not an OpenMetrics sample: {text[:80]!r}")


def load_recording(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: Callable[[float], None] | None = None,
    head: RecordingRead | None = None,
) -> Frames:
    """Load a recording onto a grid from its first to its last sample (or ``start``/``end``);
    :func:`fleetscope.window.sources.open_source` routes a Parquet archive to its own loader.
    ``head``: the read of the recording's head made for :meth:`RecordingRead.first_family_seconds`
    (of this window), read on from there."""
    read = head if head is not None and head.window == (start, end, step) else None
    if read is None:
        if head is not None:
            head.close()
        read = RecordingRead(path, metrics, (start, end, step))
    with collector_paused():
        raw, t_min, t_max, spacing = read.finish(progress)
        return frames_from_raw(
            raw, t_min, t_max, spacing, step=step, start=start, end=end, source=os.fspath(path)
        )
