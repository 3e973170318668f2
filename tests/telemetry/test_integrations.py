"""The Lightning and Hugging Face callbacks, each driving a real framework on CPU with a tiny model."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from fleetscope.exporters.training import parse_rank_file

pytestmark = [pytest.mark.torch]

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
    assert phases.pop("eval") == phases.pop("checkpoint") == 0  # pause phases: there from the start
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
    assert phases.pop("eval") == 0  # a pause phase: there from the start
    assert set(phases) == {"data", "forward", "backward", "optimizer", "checkpoint"}
    assert min(phases.values()) > 0
    assert (out / "checkpoint-2").is_dir()  # the checkpoint phase timed a real save


PAUSE = 0.05  # seconds each validation batch and each checkpoint save sleeps in the tests below


def _phases(got: dict[tuple[str, tuple[str, ...]], float]) -> dict[str, float]:
    return {extra[0]: v for (name, extra), v in got.items() if name == "training_phase_seconds_total"}


def test_lightning_callback_times_validation_and_checkpoints_as_pauses(tmp_path: Path) -> None:
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

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            time.sleep(PAUSE)
            self.log("val_loss", self.head(batch).pow(2).mean())

        def on_save_checkpoint(self, checkpoint: dict) -> None:  # runs inside trainer.save_checkpoint
            time.sleep(2 * PAUSE)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=2)
    callback = FleetscopeCallback(
        job_id="pl-pause", directory=tmp_path / "t", interval=0.05, remove_on_close=False
    )
    saves = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    trainer = pl.Trainer(
        max_steps=4,
        val_check_interval=2,
        limit_val_batches=2,
        num_sanity_val_steps=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback, saves],
    )
    trainer.fit(Tiny(), data, data)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
    ]
    got = _rank_file(tmp_path / "t")
    phases = _phases(got)
    assert got[("training_steps_total", ())] == 4  # validation batches are no steps
    assert phases["eval"] >= (1 + 2 * 2) * PAUSE  # sanity batch + two validations of two batches
    assert phases["checkpoint"] >= 2 * 2 * PAUSE
    # neither pause leaks into the steps or into the next batch's data wait
    assert got[("training_step_seconds_total", ())] < 2 * PAUSE
    assert phases["data"] < 2 * PAUSE
    assert trainer.save_checkpoint.__func__ is pl.Trainer.save_checkpoint  # unwrapped at teardown


def test_hf_trainer_callback_times_evaluation_and_saves_as_pauses(tmp_path: Path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from fleetscope.telemetry.hf import FleetscopeTrainerCallback

    class Slow(TrainerCallback):
        """Runs before fleetscope's callback: its sleeps happen inside the evaluation and the save."""

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            time.sleep(PAUSE)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            time.sleep(2 * PAUSE)

    config = GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    rows = [{"input_ids": x, "labels": x} for x in torch.randint(0, 32, (16, 8))]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callback = FleetscopeTrainerCallback(
        job_id="hf-pause", directory=tmp_path / "t", interval=0.05, remove_on_close=False, tokens_per_step=16
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=rows,
        eval_dataset=rows[:4],
        callbacks=[Slow(), callback],
    )
    trainer.train()
    got = _rank_file(tmp_path / "t")
    phases = _phases(got)
    assert got[("training_steps_total", ())] == 4
    assert got[("training_tokens_total", ())] == 4 * 16
    assert phases["eval"] >= 2 * 2 * PAUSE  # two evaluations of two batches
    assert phases["checkpoint"] >= 2 * 2 * PAUSE  # checkpoint-2 and checkpoint-4
    assert (tmp_path / "out" / "checkpoint-2").is_dir() and (tmp_path / "out" / "checkpoint-4").is_dir()
    # the step is its phases (they tile it), and none of them absorbed a pause
    work = phases["data"] + phases["forward"] + phases["backward"] + phases["optimizer"]
    assert got[("training_step_seconds_total", ())] == pytest.approx(work, abs=1e-3)
    assert phases["data"] < 2 * PAUSE
    # an evaluation after training is no pause of the training (the monitor is closed by then)
    trainer.evaluate()
    assert _phases(_rank_file(tmp_path / "t"))["eval"] == phases["eval"]


def test_lightning_callback_takes_the_layout_from_the_strategys_device_mesh(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from fleetscope.telemetry.lightning import FleetscopeCallback
    from tests.telemetry.test_layout import FakeMesh

    class Strategy:  # ModelParallelStrategy's attribute name
        device_mesh = FakeMesh(data_parallel=(0, 1), dp=(3, 4), tp=(1, 2))

    class Early:  # before the processes exist, ModelParallelStrategy raises
        @property
        def device_mesh(self) -> None:
            raise RuntimeError("Accessing the device mesh before processes have initialized is not allowed.")

    for strategy, expected in [
        (Strategy(), {"data_parallel_rank": "3", "tensor_parallel_rank": "1"}),
        (Early(), {}),
    ]:

        def save(path: str) -> None:
            time.sleep(PAUSE)

        trainer = SimpleNamespace(global_rank=0, local_rank=0, strategy=strategy, save_checkpoint=save)
        callback = FleetscopeCallback(job_id="pl-mesh", directory=tmp_path, start=False, env={})
        callback.setup(trainer, None, "fit")
        assert callback.monitor is not None and callback.monitor.layout.labels() == expected
        trainer.save_checkpoint("x.ckpt")  # wrapped: timed as a checkpoint
        assert callback.monitor.snapshot().phase_seconds["checkpoint"] >= PAUSE
        callback.teardown(trainer, None, "fit")
        assert trainer.save_checkpoint is save  # the trainer's own attribute is back
