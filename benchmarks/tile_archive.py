"""A long archive from a short one: the short window repeated back to back (for benchmarks only).

Simulating 512 nodes for 24 hours and converting the recording takes longer than the benchmark it
feeds, so ``bench_stream_day.py`` simulates two hours and tiles them: copy k is shifted by k times
the source's span and one sample spacing (each row group keeps its rows and their order, and its
[t0, t1] in the metadata moves with it), and counters continue across the seams (copy k adds k
times a series' increase over the source and over its last step) instead of restarting, so the tiled day reads
as one long run of the same job, with the source's incident repeated in every copy. Row groups, statistics and
the metadata are those ``fleetscope record`` writes; ``fleetscope analyze --input`` reads it like any archive.

Usage::

    .venv/bin/python benchmarks/tile_archive.py SOURCE.parquet OUT.parquet --copies 12
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleetscope import contract  # noqa: E402
from fleetscope.window.archive.format import META_KEY, SERIES_COL, TIME_COL, VALUE_COL  # noqa: E402


def tile(source: Path, out: Path, copies: int) -> dict:
    pf = pq.ParquetFile(source)
    meta = json.loads(pf.metadata.metadata[META_KEY])
    if meta.get("grid"):
        raise SystemExit("tile an archive of a recording, not an export's grid values")
    first, last = meta["span"]
    shift_s = float(last - first + meta.get("spacing", 15.0))
    by_metric: dict[str, list[int]] = {}
    for i, g in enumerate(meta["row_groups"]):
        by_metric.setdefault(g["metric"], []).append(i)
    increase = {}  # metric -> each series' last minus first value (counters only)
    for name, ids in by_metric.items():
        m = contract.METRICS.get(name)
        if m is None or m.type != "counter":
            continue
        t = pf.read_row_groups(ids, columns=[SERIES_COL, TIME_COL, VALUE_COL])
        sid = t.column(SERIES_COL).to_numpy()
        tms = t.column(TIME_COL).to_numpy().view(np.int64)
        val = t.column(VALUE_COL).to_numpy()
        order = np.lexsort((tms, sid))
        sid, val = sid[order], val[order]
        firsts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
        lasts = np.r_[firsts[1:] - 1, sid.size - 1]
        inc = np.zeros(int(sid.max()) + 1)
        before = np.maximum(lasts - 1, firsts)
        inc[sid[firsts]] = val[lasts] - val[firsts] + (val[lasts] - val[before])
        increase[name] = inc
    tmp = out.with_name(f".{out.name}.tmp")
    groups = []
    with pq.ParquetWriter(
        tmp, pf.schema_arrow, compression="zstd", write_statistics=[TIME_COL, SERIES_COL]
    ) as w:
        for k in range(copies):
            for i, g in enumerate(meta["row_groups"]):
                t = pf.read_row_group(i)
                shift_ms = int(k * shift_s * 1000)
                tms = t.column(TIME_COL).to_numpy().view(np.int64) + shift_ms
                t = t.set_column(
                    t.schema.get_field_index(TIME_COL),
                    TIME_COL,
                    pa.array(tms, type=pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                )
                inc = increase.get(g["metric"])
                if inc is not None and k:
                    val = t.column(VALUE_COL).to_numpy() + k * inc[t.column(SERIES_COL).to_numpy()]
                    t = t.set_column(t.schema.get_field_index(VALUE_COL), VALUE_COL, pa.array(val))
                w.write_table(t, row_group_size=t.num_rows)
                groups.append({**g, "t0": g["t0"] + k * shift_s, "t1": g["t1"] + k * shift_s})
        meta = {
            **meta,
            "row_groups": groups,
            "span": [first, last + (copies - 1) * shift_s],
            "source": f"{meta.get('source', '')} tiled x{copies}",
        }
        w.add_key_value_metadata({META_KEY: json.dumps(meta).encode()})
    os.replace(tmp, out)
    return {"copies": copies, "shift_s": shift_s, "rows": pf.metadata.num_rows * copies}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=12)
    args = ap.parse_args()
    print(tile(args.source, args.out, args.copies))


if __name__ == "__main__":
    main()
