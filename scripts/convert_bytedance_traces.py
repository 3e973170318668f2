"""Convert ByteDance's labelled straggler traces into fleetscope recordings (the metric contract).

Source: ByteDance-Seed/StragglerAnalysis, ``data/`` (Apache-2.0): ``trace-{AR,SE,ST}.parquet``, one
row per recorded operation of a Megatron-style job (``dp_rank``, ``stage``, ``rank``, ``step``,
``optype``, ``start_ts`` within the step, ``duration``), and ``meta-*.yaml`` with the job's layout
(``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``). Tensor-parallel (and data-sequence-parallel)
ranks of one (dp, stage) group share its timings, so the trace holds one of them.

What the conversion does (tests/fixtures/bytedance/README.md says the same):

* every rank of the job is written (``world_size`` ranks: the traced rank's timings copied to its
  tensor- and sequence-parallel siblings), 8 ranks per node (``bd-<trace>-node-NN``, gpu = rank % 8);
* the sampled steps are replayed back to back, in their order, over and over until ``--minutes`` (AR and ST
40, SE 20);
  each step lasts its recorded wall time (the last operation's end over all ranks: synchronous
  training ends a step together) and adds to each rank's counters its own ``forward`` (the
  forward-compute operations), ``backward`` (backward-compute) and ``optimizer`` seconds (the
  optimizer, gradient clipping, reduce-scatter, all-gather and all-reduce operations);
* the counters are scraped every ``--scrape`` seconds: ``training_steps_total``,
  ``training_step_seconds_total``, ``training_phase_seconds_total``, ``training_tokens_total``
  (micro-batches x ``--tokens-per-microbatch``) and ``training_model_flops_total`` (a constant per
  step: 40% of an H100's dense bf16 peak over the job's median step, the traces carry no model
  size); no GPU series (the traces have none);
* ``--layout`` also writes ``training_info`` with ``pipeline_stage``, ``data_parallel_rank``,
  ``tensor_parallel_rank`` (and ``context_parallel_rank`` for the sequence-parallel copies).

Usage: ``python scripts/convert_bytedance_traces.py RAW_DIR [--out DIR]`` writes
``trace-<T>.om.gz`` and ``trace-<T>-layout.om.gz`` for every trace of RAW_DIR.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fleetscope import contract as c
from fleetscope.simulate.record import write_samples

#: 2026-11-30T10:00:00Z, the simulator's default start.
START = 1796032800.0
GPUS_PER_NODE = 8
H100_BF16_PEAK = 989e12
MFU = 0.40
#: Minutes recorded per trace: SE's 128 ranks over 20 minutes are already ~500 KB gzipped.
MINUTES = {"AR": 40.0, "SE": 20.0, "ST": 40.0}
OPTIMIZER_OPS = (
    "optimizer",
    "optimizer-clip-main-grad",
    "grads-reduce-scatter",
    "params-all-gather",
    "embedding-grads-all-reduce",
    "layernorm-grads-all-reduce",
)


@dataclass
class Trace:
    """Per traced (dp, stage) worker and sampled step: its phase seconds; per step: the wall time."""

    name: str
    layout: dict[str, int]
    workers: list[tuple[int, int]]  # (dp_rank, stage)
    wall: np.ndarray  # steps
    forward: np.ndarray  # steps x workers
    backward: np.ndarray
    optimizer: np.ndarray
    microbatches: np.ndarray  # workers


def read_trace(raw: Path, name: str) -> Trace:
    import pandas as pd
    import yaml

    meta = yaml.safe_load((raw / f"meta-{name}.yaml").read_text())
    layout = {k: int(meta[k]) for k in ("dp_size", "pp_size", "tp_size", "dsp_size", "world_size")}
    d = pd.read_parquet(raw / f"trace-{name}.parquet")
    d["end"] = d["start_ts"].astype(float) + d["duration"].astype(float)
    steps = sorted(d["step"].unique())
    workers = sorted({(int(a), int(b)) for a, b in zip(d["dp_rank"], d["stage"], strict=True)})
    wall = d.groupby("step")["end"].max().reindex(steps).to_numpy(float)

    def phase(ops: tuple[str, ...]) -> np.ndarray:
        sel = d[d["optype"].isin(ops)]
        s = sel.groupby(["step", "dp_rank", "stage"], observed=True)["duration"].sum()
        out = np.zeros((len(steps), len(workers)))
        for (st, dp, pp), v in s.items():
            out[steps.index(st), workers.index((int(dp), int(pp)))] = float(v)
        return out

    fwd = d[d["optype"] == "forward-compute"]
    mbs = fwd.groupby(["dp_rank", "stage"], observed=True)["mb_id"].nunique()
    micro = np.array([int(mbs.get((dp, pp), 1)) for dp, pp in workers])
    return Trace(
        name,
        layout,
        workers,
        wall,
        phase(("forward-compute",)),
        phase(("backward-compute",)),
        phase(OPTIMIZER_OPS),
        micro,
    )


def global_rank(layout: dict[str, int], dp: int, stage: int, tp: int, dsp: int) -> int:
    """Megatron order: tensor-parallel fastest, then sequence-parallel copies, data-parallel, stage."""
    inner = layout["tp_size"] * layout["dsp_size"]
    return stage * layout["dp_size"] * inner + dp * inner + dsp * layout["tp_size"] + tp


def convert(tr: Trace, *, minutes: float, scrape: float, tokens_per_mb: int, layout: bool) -> dict:
    """The samples of one recording (``write_samples``' shape)."""
    n_steps = len(tr.wall)
    total = minutes * 60.0
    order = np.resize(np.arange(n_steps), int(np.ceil(total / tr.wall.min())) + 1)
    ends = np.cumsum(tr.wall[order])
    order, ends = order[ends <= total], ends[ends <= total]
    times = np.arange(0.0, total + 1e-9, scrape)
    done = np.searchsorted(ends, times, side="right")  # steps completed at each scrape

    def cum(per_step: np.ndarray) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(per_step[order])])[done]

    flops_step = MFU * H100_BF16_PEAK * float(np.median(tr.wall))
    ts = START + times
    job = f"bytedance-{tr.name}"
    lay = tr.layout
    out: dict[str, dict] = {
        n: {}
        for n in (
            c.TRAINING_STEPS.name,
            c.TRAINING_STEP_SECONDS.name,
            c.TRAINING_PHASE_SECONDS.name,
            c.TRAINING_TOKENS.name,
            c.TRAINING_MODEL_FLOPS.name,
        )
    }
    if layout:
        out[c.TRAINING_INFO.name] = {}
    steps_c = done.astype(float)
    wall_c = cum(tr.wall)
    for w, (dp, stage) in enumerate(tr.workers):
        fwd, bwd, opt = cum(tr.forward[:, w]), cum(tr.backward[:, w]), cum(tr.optimizer[:, w])
        for dsp in range(lay["dsp_size"]):
            for tp in range(lay["tp_size"]):
                r = global_rank(lay, dp, stage, tp, dsp)
                base = (
                    ("job_id", job),
                    ("rank", str(r)),
                    ("local_rank", str(r % GPUS_PER_NODE)),
                    (c.NODE_LABEL, f"bd-{tr.name.lower()}-node-{r // GPUS_PER_NODE:02d}"),
                    ("gpu", str(r % GPUS_PER_NODE)),
                )
                out[c.TRAINING_STEPS.name][base] = (ts, steps_c)
                out[c.TRAINING_STEP_SECONDS.name][base] = (ts, np.round(wall_c, 3))
                for ph, v in (("forward", fwd), ("backward", bwd), ("optimizer", opt)):
                    out[c.TRAINING_PHASE_SECONDS.name][(*base, ("phase", ph))] = (ts, np.round(v, 3))
                out[c.TRAINING_TOKENS.name][base] = (ts, steps_c * tr.microbatches[w] * tokens_per_mb)
                out[c.TRAINING_MODEL_FLOPS.name][base] = (ts, steps_c * flops_step)
                if layout:
                    info = (
                        *base,
                        ("flops_convention", "megatron"),
                        (c.PIPELINE_STAGE_LABEL, str(stage)),
                        (c.DATA_PARALLEL_RANK_LABEL, str(dp)),
                        (c.TENSOR_PARALLEL_RANK_LABEL, str(tp)),
                    )
                    if lay["dsp_size"] > 1:
                        info = (*info, (c.CONTEXT_PARALLEL_RANK_LABEL, str(dsp)))
                    out[c.TRAINING_INFO.name][info] = (ts, np.ones(len(ts)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, help="the traces' directory (trace-*.parquet, meta-*.yaml)")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/bytedance"))
    ap.add_argument("--traces", default="AR,SE,ST", help="comma-separated trace names")
    ap.add_argument("--minutes", type=float, default=None, help="default: AR 40, SE 20, ST 40")
    ap.add_argument("--scrape", type=float, default=15.0)
    ap.add_argument("--tokens-per-microbatch", type=int, default=4096)
    args = ap.parse_args(argv)
    for name in args.traces.split(","):
        if (
            not (args.raw / f"trace-{name}.parquet").is_file()
            or not (args.raw / f"meta-{name}.yaml").is_file()
        ):
            print(
                f"convert: error: {args.raw} has no trace-{name}.parquet with meta-{name}.yaml",
                file=sys.stderr,
            )
            return 1
        try:
            tr = read_trace(args.raw, name)
        except Exception as exc:  # noqa: BLE001 - any unreadable or unexpected trace is one clear line
            print(f"convert: error: {args.raw}: trace {name} cannot be read: {exc}", file=sys.stderr)
            return 1
        for layout in (False, True):
            path = args.out / f"trace-{name}{'-layout' if layout else ''}.om.gz"
            samples = convert(
                tr,
                minutes=args.minutes or MINUTES.get(name, 40.0),
                scrape=args.scrape,
                tokens_per_mb=args.tokens_per_microbatch,
                layout=layout,
            )
            write_samples(samples, path)
            print(
                f"{path}: {tr.layout['world_size']} ranks, {len(tr.wall)} sampled steps, "
                f"{path.stat().st_size // 1024} KB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
