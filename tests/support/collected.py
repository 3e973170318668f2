"""What one collection of metric families holds, as plain data: the one ``samples()`` the exporter
tests read their collectors' answers with."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

#: (sample name, its labels sorted by name) -> value.
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(families: Iterable[Metric]) -> Series:
    """Every sample of ``families`` by (name, sorted labels); fails on a duplicate series."""
    out: Series = {}
    for family in families:
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out
