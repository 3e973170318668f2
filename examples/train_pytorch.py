"""A tiny decoder-only transformer trained with plain PyTorch and fleetscope.telemetry.

One process per rank; launched by torchrun (or Slurm's srun) it trains with DistributedDataParallel
over gloo on CPU or NCCL on GPUs::

    torchrun --nproc-per-node 2 examples/train_pytorch.py --steps 200
    FLEETSCOPE_TRAINING_DIR=/tmp/fleetscope python examples/train_pytorch.py --steps 50

The telemetry is the five marked lines; everything else is an ordinary training loop. The model's
FLOPs per token come from fleetscope's PaLM formula (6·N + 12·L·H·Q·T).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from fleetscope.telemetry import TrainingMonitor, flops_per_token, non_embedding_params


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int, d_model: int, n_layers: int, n_heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        return self.head(self.blocks(x, mask=self.mask, is_causal=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--data-wait", type=float, default=0.0, help="seconds each batch takes to 'load'")
    p.add_argument("--stop-file", type=Path, help="stop (on every rank) once this file exists")
    p.add_argument("--summary-dir", type=Path, help="write rank<N>.json with the final totals here")
    args = p.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = TinyDecoder(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    fpt = flops_per_token(
        non_embedding_params(model), args.layers, args.heads, args.d_model // args.heads, args.seq_len
    )
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens_per_step = args.batch * args.seq_len

    monitor = TrainingMonitor(flops_per_token=fpt)  # 1: job id, rank and GPU from the environment
    for _ in range(args.steps):
        if args.stop_file is not None:
            stop = torch.tensor([float(args.stop_file.exists())], device=device)
            if distributed:
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
            if stop.item():
                break
        with monitor.step(tokens=tokens_per_step) as step:  # 2: one optimizer step
            with monitor.phase("data"):  # 3: each phase of it
                time.sleep(args.data_wait)
                batch = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), device=device)
            with monitor.phase("forward"):
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            with monitor.phase("backward"):
                loss.backward()
            with monitor.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            step.loss = loss  # 4: read later by the writer thread, no GPU sync here
    snap = monitor.snapshot()
    monitor.close()  # 5: the rank is finished; its file goes away
    if args.summary_dir is not None:
        args.summary_dir.mkdir(parents=True, exist_ok=True)
        summary = {
            "rank": monitor.identity.rank,
            "job_id": monitor.identity.job_id,
            "gpu": monitor.identity.gpu,
            "flops_per_token": float(fpt),
            "tokens_per_step": tokens_per_step,
            "steps": snap.steps,
            "step_seconds": snap.step_seconds,
            "tokens": snap.tokens,
            "flops": snap.flops,
        }
        (args.summary_dir / f"rank{monitor.identity.rank}.json").write_text(json.dumps(summary))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
