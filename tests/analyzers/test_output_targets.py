"""``-o`` writes atomically only over a regular file or a new path (issue 36, item 3): a device, a
FIFO or a ``/dev/fd/N`` target is written through, a symlink is followed to its target and kept.
The device is reached through a symlink in a temporary folder, and it is ``/dev/zero`` (writes
discarded, as ``/dev/null``'s): a test of the code before this fix, run as root, replaced the host's
``/dev/null`` with a regular file (``tests/analyzers/test_output.py`` wrote ``-o /dev/null``), so
``/dev/null`` may not be a device where these tests run, and is never a target here."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from fleetscope.atomicfile import output_target, write_text_atomic
from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    out, _ = write_scenario(
        ScenarioSpec(name="o", nodes=2, duration_s=600, seed=3), tmp_path_factory.mktemp("rec") / "r.om"
    )
    return out


class _Reader:
    """Reads a FIFO (or a pipe's read end) to its end in a thread."""

    def __init__(self, path: Path | None = None, fd: int | None = None) -> None:
        self.data = b""
        self.path, self.fd = path, fd
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        fd = self.fd if self.fd is not None else os.open(self.path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            self.data = fh.read()

    def result(self) -> bytes:
        self.thread.join(60)
        assert not self.thread.is_alive(), "nothing was written through to the reader"
        return self.data


DEVICE = "/dev/zero"


def _null_link(tmp_path: Path) -> Path:
    assert stat.S_ISCHR(os.stat(DEVICE).st_mode)
    link = tmp_path / "null"
    link.symlink_to(DEVICE)
    return link


def test_where_each_kind_of_target_is_written(tmp_path) -> None:
    regular = tmp_path / "a.json"
    regular.write_text("old")
    assert output_target(regular) == (regular.resolve(), True)
    assert output_target(tmp_path / "new.json") == ((tmp_path / "new.json").resolve(), True)
    link = tmp_path / "link.json"
    link.symlink_to(regular)
    assert output_target(link) == (regular.resolve(), True)
    assert output_target(_null_link(tmp_path))[1] is False
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert output_target(fifo) == (fifo, False)
    assert output_target("/dev/stdout")[1] is False and output_target("/dev/fd/1")[1] is False
    with pytest.raises(IsADirectoryError):
        output_target(tmp_path)


def test_a_symlink_is_followed_and_kept(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    target = real / "report.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "report.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    dangling = tmp_path / "later.json"
    dangling.symlink_to(real / "later.json")
    write_text_atomic(dangling, "first")
    assert dangling.is_symlink() and (real / "later.json").read_text() == "first"
    assert sorted(p.name for p in real.iterdir()) == ["later.json", "report.json"]


def test_analyze_into_a_character_device_writes_through(recording, tmp_path) -> None:
    link = _null_link(tmp_path)
    assert main(["analyze", "--input", str(recording), "--format", "json", "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == DEVICE  # not replaced by a file
    assert stat.S_ISCHR(os.stat(DEVICE).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary file left beside it


def test_analyze_into_a_fifo_reaches_its_reader(recording, tmp_path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    assert main(["analyze", "--input", str(recording), "--format", "json", "-o", str(fifo)]) == 0
    assert reader.result().startswith(b"{")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_analyze_into_dev_fd_writes_to_that_descriptor(recording) -> None:
    r, w = os.pipe()
    reader = _Reader(fd=r)
    try:
        assert main(["analyze", "--input", str(recording), "--format", "json", "-o", f"/dev/fd/{w}"]) == 0
    finally:
        os.close(w)
    assert reader.result().startswith(b"{")


def test_record_into_a_device_and_a_fifo(recording, tmp_path) -> None:
    link = _null_link(tmp_path)
    assert main(["record", "--input", str(recording), "-o", str(link), "--no-progress"]) == 0
    assert link.is_symlink() and os.readlink(link) == DEVICE
    assert [p.name for p in tmp_path.iterdir()] == ["null"]
    fifo = tmp_path / "archive.fifo"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    assert main(["record", "--input", str(recording), "-o", str(fifo), "--no-progress"]) == 0
    data = reader.result()
    assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
