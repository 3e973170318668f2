"""The text format's label escaping, written once for every writer and reader."""

from __future__ import annotations

import pytest

from fleetscope.textformat import escape_label_value, unescape_label_value


@pytest.mark.parametrize(
    "value",
    ["plain", 'a "quoted" b', "two\nlines", "back\\slash", "\\n literally", 'mix\\"\n\\\\n', ""],
)
def test_unescape_inverts_escape(value: str) -> None:
    assert unescape_label_value(escape_label_value(value)) == value


def test_escaped_backslash_before_n_is_not_a_newline() -> None:
    # A replace chain that undoes \n before \\ turns this into a backslash-less newline.
    assert unescape_label_value("a\\\\nb") == "a\\nb"


def test_unknown_escape_is_kept_as_written() -> None:
    assert unescape_label_value("a\\tb") == "a\\tb"
