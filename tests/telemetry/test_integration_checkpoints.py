"""Checkpoint saves, resumes and restarts as the Lightning and Hugging Face callbacks report them,
each with the real framework on CPU and a tiny model: no user code beyond adding the callback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.exporters.training import parse_rank_file
from fleetscope.telemetry.monitor import checkpoint_size

pytestmark = [pytest.mark.torch]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SAVES = contract.TRAINING_CHECKPOINT_SAVES.name


def _rank_file(directory: Path) -> dict[tuple[str, tuple[str, ...]], float]:
    (path,) = [p for p in directory.iterdir() if p.suffix == ".prom"]
    _header, _labels, samples = parse_rank_file(path.read_text())
    return {(name, extra): value for name, extra, value in samples}


def _lightning_fit(tmp_path: Path, max_steps: int, fail_at: int | None = None, **fit: object) -> object:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint

    from fleetscope.telemetry.lightning import FleetscopeCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(4, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.head(batch).pow(2).mean()

        def on_save_checkpoint(self, checkpoint: dict) -> None:
            if self.trainer.global_step == fail_at:
                raise OSError("no space left on device")

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    callback = FleetscopeCallback(
        job_id="pl-ckpt", directory=tmp_path / "t", interval=30, remove_on_close=False, restart_attempt=1
    )
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            callback,
            ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1),
        ],
    )
    data = torch.utils.data.DataLoader(torch.randn(32, 4), batch_size=2)
    if fail_at is not None:
        with pytest.raises(OSError):
            trainer.fit(Tiny(), data, **fit)
        assert callback.monitor is not None
        callback.monitor.close()  # fit raised before teardown: write the file one last time, stop the writer
    else:
        trainer.fit(Tiny(), data, **fit)
    return trainer


def test_lightning_reports_saves_with_bytes_then_a_resume_with_its_load(tmp_path: Path) -> None:

    _lightning_fit(tmp_path, max_steps=4)
    files = sorted((tmp_path / "ckpt").iterdir())
    assert [p.name for p in files] == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
    got = _rank_file(tmp_path / "t")
    assert got[(SAVES, ("success",))] == 2 and got[(SAVES, ("failure",))] == 0
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_BYTES, ())] == sum(p.stat().st_size for p in files)
    assert got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, ())] == 4
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_SECONDS, ())] == pytest.approx(
        got[(contract.TRAINING_PHASE_SECONDS, ("checkpoint",))]
    )
    assert got[(contract.TRAINING_CHECKPOINT_LOADS, ())] == 0
    assert (contract.TRAINING_RESUMED_FROM_STEP, ()) not in got
    assert got[(contract.TRAINING_RESTART_ATTEMPT, ())] == 1
    assert got[(contract.TRAINING_STARTUP_SECONDS, ())] > 0

    trainer = _lightning_fit(tmp_path, max_steps=6, ckpt_path=str(files[-1]))  # the restarted run
    got = _rank_file(tmp_path / "t")
    assert got[(contract.TRAINING_CHECKPOINT_LOADS, ())] == 1
    assert got[(contract.TRAINING_CHECKPOINT_LOAD_SECONDS, ())] > 0
    assert got[(contract.TRAINING_RESUMED_FROM_STEP, ())] == 4
    assert got[(contract.TRAINING_GLOBAL_STEP, ())] == 6
    assert got[(contract.TRAINING_STEPS, ())] == 2  # this run's steps
    assert got[(SAVES, ("success",))] == 1  # step 6
    assert type(trainer.strategy).load_checkpoint is trainer.strategy.load_checkpoint.__func__  # unwrapped


def test_lightning_reports_a_failed_save(tmp_path: Path) -> None:
    _lightning_fit(tmp_path, max_steps=6, fail_at=4)
    got = _rank_file(tmp_path / "t")
    assert got[(SAVES, ("success",))] == 1 and got[(SAVES, ("failure",))] == 1
    assert got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, ())] == 2
    ok = tmp_path / "ckpt" / "epoch=0-step=2.ckpt"
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_BYTES, ())] == ok.stat().st_size


def test_hf_trainer_reports_saves_with_bytes_then_a_resume(tmp_path: Path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from fleetscope.telemetry.hf import FleetscopeTrainerCallback

    config = GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    rows = [{"input_ids": x, "labels": x} for x in torch.randint(0, 32, (32, 8))]
    out = tmp_path / "out"

    def train(max_steps: int, resume: str | None = None) -> dict[tuple[str, tuple[str, ...]], float]:
        args = TrainingArguments(
            output_dir=str(out),
            max_steps=max_steps,
            per_device_train_batch_size=2,
            save_strategy="steps",
            save_steps=2,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        callback = FleetscopeTrainerCallback(
            job_id="hf-ckpt", directory=tmp_path / "t", interval=30, remove_on_close=False, tokens_per_step=16
        )
        trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=rows, callbacks=[callback])
        trainer.train(resume_from_checkpoint=resume)
        return _rank_file(tmp_path / "t")

    got = train(4)
    sizes = [checkpoint_size(out / f"checkpoint-{s}") for s in (2, 4)]
    assert all(sizes) and got[(contract.TRAINING_CHECKPOINT_SAVE_BYTES, ())] == sum(sizes)
    assert got[(SAVES, ("success",))] == 2
    assert got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, ())] == 4
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_SECONDS, ())] > 0
    assert got[(contract.TRAINING_CHECKPOINT_LOADS, ())] == 0
    assert got[(contract.TRAINING_STARTUP_SECONDS, ())] > 0

    got = train(6, resume=str(out / "checkpoint-4"))
    assert got[(contract.TRAINING_CHECKPOINT_LOADS, ())] == 1
    assert got[(contract.TRAINING_RESUMED_FROM_STEP, ())] == 4
    assert got[(contract.TRAINING_GLOBAL_STEP, ())] == 6 and got[(contract.TRAINING_STEPS, ())] == 2
    assert got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, ())] == 6
