"""Turn an ``lctl get_param`` dump into the file tree a Lustre 2.12+ client exposes.

``lctl get_param`` prints ``name=value`` for one-line values and ``name=`` followed by the file's
lines for multi-line ones. Only the parameters the ``lustre`` collector reads are converted, to the
paths the kernel uses on 2.12+ (see docs/lustre.md):

* ``health_check``       -> ``sys/fs/lustre/health_check``               (sysfs)
* ``llite.<inst>.stats`` -> ``sys/kernel/debug/lustre/llite/<inst>/stats`` (debugfs)

Each file gets exactly the dumped lines, each ending with a newline (as seq_file output does).
"""

from __future__ import annotations

import re
from pathlib import Path

_PARAM = re.compile(r"^(?P<name>[A-Za-z_][\w.\-]*)=(?P<value>.*)$")


def parse_dump(text: str) -> dict[str, str]:
    """``param name -> file text`` for every parameter in the dump."""
    params: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = _PARAM.match(line)
        if m:
            current = params.setdefault(m["name"], [])
            if m["value"]:
                current.append(m["value"])
            continue
        if current is None:
            raise ValueError(f"line before any parameter: {line!r}")
        current.append(line)
    return {name: "".join(f"{line}\n" for line in lines) for name, lines in params.items()}


def tree_paths(params: dict[str, str]) -> dict[str, str]:
    """Relative path -> file text, for the parameters the collector reads."""
    out = {}
    for name, text in params.items():
        if name == "health_check":
            out["sys/fs/lustre/health_check"] = text
        elif name.startswith("llite.") and name.endswith(".stats"):
            inst = name[len("llite.") : -len(".stats")]
            out[f"sys/kernel/debug/lustre/llite/{inst}/stats"] = text
    return out


def write_tree(dump: Path, root: Path) -> list[str]:
    """Write the converted tree of ``dump`` under ``root``; returns the relative paths written."""
    files = tree_paths(parse_dump(dump.read_text()))
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(files)


if __name__ == "__main__":  # regenerate the committed tree: python -m tests.exporters.lustre.lctl_dump
    here = Path(__file__).resolve().parents[2] / "fixtures" / "lustre" / "2.14"
    for rel in write_tree(here / "llite_client.txt", here):
        print(rel)
