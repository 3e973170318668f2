"""The demo's own argument checks (the end-to-end run is in test_demo.py)."""

from __future__ import annotations

import argparse

import pytest

from fleetscope.demo.cli import positive_duration


def test_durations_are_prometheus_durations_or_seconds() -> None:
    assert positive_duration("90") == 90.0
    assert positive_duration("1.5") == 1.5
    assert positive_duration("2m") == 120.0
    assert positive_duration("1h30m") == 5400.0


@pytest.mark.parametrize(
    ("text", "message"), [("0", "must be > 0"), ("5x", "not a duration: '5x'"), ("", "not a duration")]
)
def test_a_bad_duration_is_one_argparse_error(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        positive_duration(text)
