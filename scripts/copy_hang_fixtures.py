"""Copy the public hang fixtures the tests use into tests/fixtures/hang/ (run it; commit what it writes).

    python scripts/copy_hang_fixtures.py RAW_DIR

RAW_DIR holds ``nvrx-fr-dumps/<case>/_dump_<rank>`` (+ ``fault_injection.log``,
``nvrx_reference_output.txt``) and ``ncclras/*.json|txt`` with their licence files, as gathered
from the sources tests/fixtures/hang/README.md names. The files are copied byte for byte: the
point is the real format (pickle protocol 2 dumps of Flight Recorder "2.9", NCCL 2.28.9's
invalid JSON), so nothing is re-emitted. The tests never read RAW_DIR.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hang"
FR_CASES = ("gpu_error_2nd", "lock_gil_1st")
FR_LICENCE = "LICENSE-nvidia-resiliency-ext.txt"
RAS_LICENCE = "LICENSE-nccl.txt"


def main(raw: Path) -> None:
    for case in FR_CASES:
        src, dst = raw / "nvrx-fr-dumps" / case, OUT / "fr" / case
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        for f in sorted(src.iterdir()):
            if f.name.startswith("_dump_") or f.name in ("fault_injection.log", "nvrx_reference_output.txt"):
                shutil.copyfile(f, dst / f.name)
    shutil.copyfile(raw / "nvrx-fr-dumps" / FR_LICENCE, OUT / "fr" / FR_LICENCE)
    ras = OUT / "ras"
    shutil.rmtree(ras, ignore_errors=True)
    ras.mkdir(parents=True)
    for f in sorted((raw / "ncclras").iterdir()):
        shutil.copyfile(f, ras / f.name)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
