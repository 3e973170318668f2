"""The Lightning and Hugging Face callbacks, each driving a real framework on CPU with a tiny model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetscope.exporters.training import parse_rank_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _rank_file(directory: Path) -> dict[tuple[str, tuple[str, ...]], float]:
    (path,) = [p for p in directory.iterdir() if p.suffix == ".prom"]
    _header, _labels, samples = parse_rank_file(path.read_text())
    return {(name, extra): value for name, extra, value in samples}


def test_lightning_callback_counts_optimizer_steps_tokens_and_phases(tmp_path: Path) -> None:
    import pytorch_lightning as pl
    import torch

    from fleetscope.telemetry.lightning import FleetscopeCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(32, 8)
            self.head = torch.nn.Linear(8, 32)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            logits = self.head(self.embed(batch[:, :-1]))
            return torch.nn.functional.cross_entropy(logits.reshape(-1, 32), batch[:, 1:].reshape(-1))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.randint(0, 32, (64, 8)), batch_size=4)  # int token batches
    callback = FleetscopeCallback(
        job_id="pl-job", directory=tmp_path, interval=0.05, flops_per_token=100.0, remove_on_close=False
    )
    trainer = pl.Trainer(
        max_steps=6,
        accumulate_grad_batches=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(Tiny(), data)
    got = _rank_file(tmp_path)
    tokens = 6 * 2 * 4 * 8  # optimizer steps x micro-batches x batch x tokens
    assert got[("training_steps_total", ())] == 6
    assert got[("training_tokens_total", ())] == tokens
    assert got[("training_model_flops_total", ())] == tokens * 100.0
    assert got[("training_global_step", ())] == 6
    assert 0 < got[("training_loss", ())] < 10
    phases = {extra[0]: v for (name, extra), v in got.items() if name == "training_phase_seconds_total"}
    assert set(phases) == {"data", "forward", "backward", "optimizer"} and min(phases.values()) > 0
    assert got[("training_step_seconds_total", ())] >= phases["forward"] + phases["backward"]


def test_hf_trainer_callback_counts_steps_tokens_phases_and_checkpoints(tmp_path: Path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from fleetscope.telemetry import flops_per_token, non_embedding_params
    from fleetscope.telemetry.hf import FleetscopeTrainerCallback

    config = GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    fpt = flops_per_token(non_embedding_params(model), 1, 2, 16, 16)
    torch.manual_seed(0)
    rows = [{"input_ids": x, "labels": x} for x in torch.randint(0, 64, (32, 16))]
    out = tmp_path / "out"
    telemetry = tmp_path / "telemetry"
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=4,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="steps",
        save_steps=2,
        logging_steps=1,
        include_num_input_tokens_seen=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = FleetscopeTrainerCallback(
        job_id="hf-job", directory=telemetry, interval=0.05, flops_per_token=fpt, remove_on_close=False
    )
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback]).train()
    got = _rank_file(telemetry)
    tokens = 4 * 2 * 2 * 16  # steps x accumulation x batch x sequence
    assert got[("training_steps_total", ())] == 4
    assert got[("training_tokens_total", ())] == tokens
    assert got[("training_model_flops_total", ())] == pytest.approx(tokens * float(fpt))
    assert got[("training_info", ("palm", "", "", "", "", ""))] == 1
    assert got[("training_global_step", ())] == 4
    assert 0 < got[("training_loss", ())] < 10
    phases = {extra[0]: v for (name, extra), v in got.items() if name == "training_phase_seconds_total"}
    assert set(phases) == {"data", "forward", "backward", "optimizer", "checkpoint"}
    assert min(phases.values()) > 0
    assert (out / "checkpoint-2").is_dir()  # the checkpoint phase timed a real save
