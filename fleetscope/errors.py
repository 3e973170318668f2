"""The one exception type the CLI turns into a clear one-line message and a non-zero exit."""


class FleetscopeError(Exception):
    """A failure the user can act on: bad input, a missing file, an unreachable server.

    ``exit_code`` is what the CLI exits with (1 by default; 2 is kept for usage errors).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class NoData(FleetscopeError):
    """A window (or one chunk or piece of it) that holds no data at all: the one case a long window
    on a young Prometheus or a short archive may meet in some of its chunks, which streamed
    analysis and ``record`` skip rather than fail on."""
