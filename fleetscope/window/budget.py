"""What one load of a window from Prometheus may cost in all: time, bytes and samples.

Each answer is bounded on its own (``--timeout``, ``--max-answer-bytes``, :mod:`.prometheus`); a
window is many answers (one per metric and time chunk, 29 or more), so those bounds alone let a
window add up to far more than any one of them (29 answers each just under 256 MiB decode to about
5.6 GB; each query of a wave that started late ran its own full timeout after the first had
failed). A :class:`LoadBudget` is shared by all the queries of one load:

* one deadline: every request ends by ``timeout`` seconds after the load began, retries included;
* the bytes of all answers together: at most :data:`WINDOW_ANSWERS` times ``--max-answer-bytes``
  or :data:`BYTES_PER_CELL` bytes per cell of the window's cell limit (2.4 GB, what a window at
  that limit takes as JSON), whichever is larger; counted from ``Content-Length`` before the body
  is read, or as the body arrives;
* the samples of all answers together, counted in the body before it is decoded, and the series
  times the grid's length: at most the window's cell limit
  (:data:`~fleetscope.window.frames.MAX_GRID_CELLS`), as :func:`~fleetscope.window.frames.check_grid`
  checks it once the series are known.

Past a bound the load ends with one :class:`~fleetscope.errors.FleetscopeError` naming the flag to
change; nothing more is read.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from fleetscope.errors import FleetscopeError
from fleetscope.window.frames import MAX_GRID_CELLS

#: The answers of one load together may hold this many times ``--max-answer-bytes``, or this many
#: bytes per cell of the cell limit (JSON takes about 25 bytes per sample), whichever is larger.
WINDOW_ANSWERS = 4
BYTES_PER_CELL = 24
#: Retries of a query that failed for a reason that may pass (connection lost, 5xx), and the
#: first back-off (doubled each time); only while the load's deadline leaves room for them.
DEFAULT_RETRIES = 3
FIRST_BACKOFF_S = 0.25


class LoadBudget:
    """The deadline and the byte and sample budgets of one load (thread-safe)."""

    def __init__(
        self, url: str, timeout: float, max_answer_bytes: int, grid_points: int = 1, clock=time.monotonic
    ) -> None:
        self.url, self.timeout = url, float(timeout)
        self.max_bytes = max(WINDOW_ANSWERS * int(max_answer_bytes), BYTES_PER_CELL * MAX_GRID_CELLS)
        self.max_answer_bytes = int(max_answer_bytes)
        self.grid_points = max(int(grid_points), 1)
        self._clock = clock
        self._end = clock() + self.timeout
        self._lock = threading.Lock()
        self.bytes = 0
        self.samples = 0
        self._series: dict[str, int] = {}

    def remaining(self) -> float:
        """Seconds left before the load's deadline (0 or less: past it)."""
        return self._end - self._clock()

    def can_wait(self, seconds: float) -> bool:
        """Whether a retry after ``seconds`` still leaves some of the deadline for the request."""
        return self.remaining() > seconds + 0.1 * self.timeout

    def too_slow(self) -> FleetscopeError:
        return FleetscopeError(
            f"Prometheus at {self.url} did not answer within {self.timeout:g} s "
            "(all the window's queries together, whole answers included, by --timeout)"
        )

    def take_bytes(self, n: int) -> None:
        """Count ``n`` more answer bytes; an error once all answers together pass the budget."""
        with self._lock:
            self.bytes += n
            over = self.bytes > self.max_bytes
        if over:
            raise FleetscopeError(
                f"Prometheus at {self.url} sent over {self.max_bytes:,} bytes for one window (all answers "
                f"together: {WINDOW_ANSWERS} x --max-answer-bytes, or {BYTES_PER_CELL} bytes per cell of the "
                "cell limit); narrow the window (--start/--end, --window), coarsen --step, or raise "
                "--max-answer-bytes"
            )

    def take_samples(self, n: int, series: int, metric: str) -> None:
        """Count an answer's ``n`` samples and ``series`` (of ``metric``) before they are decoded."""
        with self._lock:
            self.samples += n
            self._series[metric] = max(self._series.get(metric, 0), series)
            cells = sum(self._series.values()) * self.grid_points
            samples = self.samples
        if samples > MAX_GRID_CELLS or cells > MAX_GRID_CELLS:
            raise FleetscopeError(
                f"the answers of Prometheus at {self.url} hold over {MAX_GRID_CELLS:,} samples or grid cells "
                f"({samples:,} samples; {sum(self._series.values()):,} series x {self.grid_points:,} grid "
                "times so far); narrow the window with --start/--end or coarsen it with --step"
            )


@contextlib.contextmanager
def memory_is_one_line(url: str) -> Iterator[None]:
    """A ``MemoryError`` while a window's answers are fetched or decoded becomes one clear line
    (the answers are let go as it unwinds): the budgets above bound a window's answers, not the
    memory a host has left (answers just under the budget ended in a ``MemoryError`` traceback at
    4.0 GB under a 4.5 GiB limit)."""
    try:
        yield
    except MemoryError:
        raise FleetscopeError(
            f"the window's answers from Prometheus at {url} did not fit in the memory left to this "
            "process; narrow the window (--start/--end, --window), coarsen --step, or lower "
            "--max-answer-bytes"
        ) from None
