"""The JSON contract is documented where it is promised, and the RAS parser stays light enough
for the node agent to import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from fleetscope.hang.model import CONFIDENCES, REASONS, Hang, HangResult, RankRef

ROOT = Path(__file__).resolve().parents[2]


def test_docs_hang_md_shows_the_shape_the_code_prints() -> None:
    text = (ROOT / "docs" / "hang.md").read_text()
    section = text[text.index("## JSON") :]
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    printed = HangResult([Hang("g", "nccl:x", 1, [RankRef(1)], "dead", True, "high")]).to_dict()
    assert set(example) == set(printed)
    assert set(example["hangs"][0]) == set(printed["hangs"][0])
    assert set(example["hangs"][0]["waiting_for"][0]) == set(printed["hangs"][0]["waiting_for"][0])
    table = section[section.index("| key |") :]
    for key in printed["hangs"][0]:
        assert f"`{key}`" in table, key
    assert all(f"`{r}`" in table for r in REASONS)
    assert all(f"`{c}`" in table for c in CONFIDENCES)


def test_the_ras_parser_imports_no_pandas_numpy_or_window() -> None:
    code = (
        "import sys, fleetscope.hang.ras_parse, fleetscope.hang.ras_reason, fleetscope.hang.fr_reason;"
        "bad = [m for m in ('pandas', 'numpy', 'fleetscope.window') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
