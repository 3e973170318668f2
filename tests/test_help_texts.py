"""Help texts and docs say what the product does: training and inference, GPUs and Trainium; every
option that takes a value explains it; the JSON shape in docs/analyzers.md is the one printed."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from fleetscope.analyzers.report import goodput_to_dict
from fleetscope.cli import build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _help(*argv: str) -> str:
    parser = build_parser(list(argv))
    for name in argv:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]  # type: ignore[attr-defined]
    return " ".join(parser.format_help().split())


def test_top_level_help_covers_training_and_inference() -> None:
    text = _help()
    assert "GPU training clusters" not in text
    assert "training and inference" in text and "Trainium" in text


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_simulate_and_analyze_help_cover_inference(command: str) -> None:
    text = _help(command)
    assert "inference" in text or "serving" in text, text[:300]


@pytest.mark.parametrize(
    ("command", "option", "words"),
    [
        ("demo", "--seed", "random seed"),
        ("plan", "--scheduler", "kubectl"),
        ("plan", "--format", "shell script"),
        ("plan", "--max-fraction", "at least 1"),
    ],
)
def test_options_explain_themselves(command: str, option: str, words: str) -> None:
    text = _help(command)
    options = text[text.index("options:") :]
    # the option's own entry: "--format {text,json} its help" or "--seed SEED its help"
    entry = re.search(rf"{option} (?:\{{[^}}]*\}}|[A-Z_]+) (.*?)(?= --|$)", options)
    assert entry, f"{option} not in {command} --help"
    assert words in entry.group(1), entry.group(0)


def test_analyzers_doc_gives_the_json_shape_with_goodput() -> None:
    text = (DOCS / "analyzers.md").read_text()
    section = text[text.index("## Findings: kinds and JSON shape") :]
    shape = section[: section.index("| key |")]
    assert '"goodput"' in shape
    # every key of one account, as goodput_to_dict returns it, is named there
    (ret,) = [n for n in ast.walk(ast.parse(inspect.getsource(goodput_to_dict))) if isinstance(n, ast.Return)]
    assert isinstance(ret.value, ast.Dict)
    keys = [k.value for k in ret.value.keys if isinstance(k, ast.Constant)]
    assert len(keys) >= 10
    named = set(re.findall(r"`(\w+)`", shape))
    assert not set(keys) - named, set(keys) - named
