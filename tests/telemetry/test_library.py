"""fleetscope.telemetry on its own: identity, FLOPs, accounting, the writer's atomicity and failures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from fleetscope.exporters.training import parse_rank_file
from fleetscope.telemetry import TrainingMonitor, dense_decoder_params, detect, flops_per_token
from fleetscope.telemetry.flops import non_embedding_params
from tests.support.prom import wait_for

ROOT = Path(__file__).resolve().parents[2]


# ---- identity ---------------------------------------------------------------------------------
def test_slurm_identity() -> None:
    env = {"SLURM_JOB_ID": "4711", "SLURM_PROCID": "13", "SLURM_LOCALID": "5", "CUDA_VISIBLE_DEVICES": "5"}
    ident = detect(env=env)
    assert (ident.job_id, ident.rank, ident.local_rank, ident.gpu) == ("4711", 13, 5, "5")
    assert ident.file_stem() == "4711-rank13"


def test_torchrun_identity_prefers_rank_and_maps_visible_devices() -> None:
    env = {
        "TORCHELASTIC_RUN_ID": "run/7 x",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "CUDA_VISIBLE_DEVICES": "4,6",
        "SLURM_PROCID": "0",
    }
    ident = detect(env=env)
    assert (ident.job_id, ident.rank, ident.local_rank, ident.gpu) == ("run/7 x", 3, 1, "6")
    assert ident.file_stem() == "run_7_x-rank3"  # the label keeps the id, the file name is safe


def test_kubernetes_indexed_job_and_explicit_overrides() -> None:
    env = {"JOB_NAME": "llama-pretrain", "JOB_COMPLETION_INDEX": "2", "CUDA_VISIBLE_DEVICES": "GPU-1a2b"}
    ident = detect(env=env)
    assert (ident.job_id, ident.rank, ident.local_rank, ident.gpu) == ("llama-pretrain", 2, 0, "0")
    env["FLEETSCOPE_JOB_ID"] = "override"
    env["FLEETSCOPE_GPU"] = "7"
    assert detect(env=env).job_id == "override" and detect(env=env).gpu == "7"
    assert detect(job_id="a", rank=1, local_rank=1, gpu=3, env=env).gpu == "3"


def test_torchelastic_default_run_id_is_not_a_job_id_and_fallback_is_local() -> None:
    ident = detect(env={"TORCHELASTIC_RUN_ID": "none", "RANK": "1", "LOCAL_RANK": "1"})
    assert ident.job_id == f"local-{os.getppid()}"
    assert detect(env={}).job_id == f"local-{os.getpid()}"


def test_bad_rank_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="rank must be an integer"):
        detect(env={"RANK": "zero"})


# ---- FLOPs ------------------------------------------------------------------------------------
def test_flops_per_token_gpt3_175b_by_hand() -> None:
    # GPT-3 175B: L=96, d=12288, H=96, Q=128, T=2048; N = 12·L·d² = 173,946,175,488 (weights only).
    n = dense_decoder_params(96, 12288)
    assert n == 173_946_175_488
    palm = flops_per_token(n, 96, 96, 128, 2048)
    # 6N = 1,043,677,052,928 ; 12·L·H·Q·T = 12·96·96·128·2048 = 28,991,029,248
    assert palm == 1_043_677_052_928 + 28_991_029_248 == 1_072_668_082_176
    assert palm.convention == "palm"
    megatron = flops_per_token(n, 96, 96, 128, 2048, convention="megatron")
    assert megatron == 1_043_677_052_928 + 14_495_514_624
    assert megatron.convention == "megatron"
    with pytest.raises(ValueError, match="unknown FLOPs convention"):
        flops_per_token(n, 96, 96, 128, 2048, convention="hfu")  # type: ignore[arg-type]


@pytest.mark.torch
def test_non_embedding_params_excludes_embedding_tables() -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 4))
    assert non_embedding_params(model) == 8 * 4 + 4


def test_library_does_not_import_torch() -> None:
    code = "import sys, fleetscope.telemetry, fleetscope.exporters.training; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- accounting -------------------------------------------------------------------------------
def test_steps_phases_tokens_flops_loss(tmp_path: Path) -> None:
    fpt = flops_per_token(1000, 2, 2, 8, 16, convention="megatron")
    m = TrainingMonitor(job_id="j", rank=0, directory=tmp_path, start=False, flops_per_token=fpt)
    for i in range(3):
        with m.step(tokens=64) as step:
            with m.phase("forward"):
                time.sleep(0.002)
            with m.phase("backward"):
                pass
            step.loss = 3.0 - i
    with m.step(tokens=64, flops=5.0):  # FLOPs passed directly win over the per-token rate
        pass
    with pytest.raises(RuntimeError), m.step(tokens=1000):
        raise RuntimeError("a failed step is not a completed step")
    snap = m.snapshot()
    assert snap.steps == 4 and snap.tokens == 256
    assert snap.flops == 3 * 64 * float(fpt) + 5.0
    assert snap.loss == 1.0 and snap.global_step == 4
    assert snap.phase_seconds["forward"] >= 0.006 and snap.step_seconds >= snap.phase_seconds["forward"]
    assert snap.last_step_timestamp is not None and abs(snap.last_step_timestamp - time.time()) < 5
    m.set_global_step(1000)
    m.begin_step()
    m.end_step(tokens=1)
    assert m.snapshot().global_step == 1001
    assert m.flush()
    _header, labels, samples = parse_rank_file(Path(m.writer.path).read_text())
    assert labels == {"job_id": "j", "rank": "0", "local_rank": "0", "gpu": "0"}
    assert ("training_info", ("megatron", "", "", "", "", ""), 1.0) in samples  # layout unknown
    m.close()
    assert not Path(m.writer.path).exists()  # a finished rank removes its file


@pytest.mark.torch
def test_loss_tensor_is_detached_and_read_by_the_writer(tmp_path: Path) -> None:
    import torch

    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False)
    with m.step(loss=loss):
        pass
    assert not m._loss.requires_grad  # no autograd graph kept alive between steps
    assert m.snapshot().loss == 6.0


def test_too_many_phase_names_are_capped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False)
    for i in range(100):
        with m.phase(f"p{i}"):
            pass
    assert len(m.snapshot().phase_seconds) == 32
    assert sum("phase names" in r.message for r in caplog.records) == 1


# ---- the writer -------------------------------------------------------------------------------
def test_rank_file_is_replaced_atomically(tmp_path: Path) -> None:
    m = TrainingMonitor(job_id="atomic", directory=tmp_path, interval=0.001)
    for i in range(30):  # a file of a few kB
        m.add_phase_time(f"phase{i}", 1.0)
    path = Path(m.writer.path)
    wait_for(path.exists, timeout=5)
    reads = 0
    start = m.writer.writes
    try:
        while reads < 500 or m.writer.writes < start + 100:
            with m.step(tokens=1):
                pass
            text = path.read_text()
            parse_rank_file(text)  # raises on a partial file
            assert text.endswith("\n")
            assert all(n.endswith(".prom") is False or not n.startswith(".") for n in os.listdir(tmp_path))
            reads += 1
    finally:
        m.close()
    assert m.writer.failures == 0


def test_nonexistent_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    m = TrainingMonitor(job_id="j", directory=target, start=False)
    assert m.flush()
    assert (target / "j-rank0.prom").is_file()
    m.close()


def _run_rank_in_subprocess(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(
        """
        import logging, os, resource, signal, sys, time
        logging.basicConfig(level=logging.WARNING, format="LOG %(message)s", stream=sys.stdout)
        from fleetscope.telemetry import TrainingMonitor
        """
    ) + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_full_disk_is_logged_once_and_training_goes_on(tmp_path: Path) -> None:
    """A file-size limit makes every write fail with EFBIG, as a full disk would with ENOSPC."""
    out = _run_rank_in_subprocess(
        """
        d = sys.argv[1]
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
        m = TrainingMonitor(job_id="full", directory=d, interval=0.01)
        deadline = time.monotonic() + 0.5
        n = 0
        while time.monotonic() < deadline:
            with m.step(tokens=1):
                n += 1
        with m.writer._write_lock:  # between two writes: a write in progress has its temporary file
            print("FAILURES", m.writer.failures, "FILES", sorted(os.listdir(d)))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        ok = m.flush()
        print("RECOVERED", ok, sorted(os.listdir(d)), "STEPS", m.snapshot().steps == n)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum(line.startswith("LOG fleetscope telemetry: cannot write") for line in lines) == 1, out.stdout
    failures = next(line for line in lines if line.startswith("FAILURES")).split()
    assert int(failures[1]) >= 5 and failures[3:] == ["[]"]  # no temporary file left behind
    assert "RECOVERED True ['full-rank0.prom'] STEPS True" in out.stdout
    assert "works again" in out.stdout


def _make_unwritable(d: Path) -> str:
    """Make ``d`` refuse new files for this process, whoever runs the tests; returns how."""
    if os.geteuid() != 0:
        os.chmod(d, 0o555)
        return "chmod"
    if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0:
        return "chattr"
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(d)], capture_output=True
        ).returncode
        == 0
    ):
        return "mount"
    raise AssertionError("cannot make a read-only directory here (need non-root, chattr or mount)")


def _undo_unwritable(d: Path, how: str) -> None:
    if how == "chmod":
        os.chmod(d, 0o755)
    elif how == "chattr":
        subprocess.run(["chattr", "-i", str(d)], check=True)
    else:
        subprocess.run(["umount", str(d)], check=True)


def test_read_only_directory_is_logged_once_and_never_raises(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    how = _make_unwritable(ro)
    try:
        out = _run_rank_in_subprocess(
            """
            m = TrainingMonitor(job_id="ro", directory=sys.argv[1] + "/ro", interval=0.01)
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                with m.step(tokens=1), m.phase("forward"):
                    pass
            print("WRITES", m.writer.writes, "FAILURES", m.writer.failures, "STEPS", m.snapshot().steps > 0)
            m.close()
            print("CLOSED")
            """,
            tmp_path,
        )
    finally:
        _undo_unwritable(ro, how)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("LOG fleetscope telemetry: cannot write") == 1, out.stdout
    assert "WRITES 0 FAILURES" in out.stdout and "STEPS True" in out.stdout and "CLOSED" in out.stdout
    assert os.listdir(ro) == []


def test_training_thread_does_no_io(tmp_path: Path) -> None:
    """Every file-system audit event raised while stepping comes from the writer thread, none from ours."""
    events: list[tuple[int, str]] = []
    watching = threading.Event()

    def hook(event: str, args: tuple) -> None:
        if watching.is_set() and event.split(".")[0] in ("open", "os", "shutil", "socket"):
            events.append((threading.get_ident(), event))

    sys.addaudithook(hook)  # cannot be removed; it only records while ``watching`` is set
    m = TrainingMonitor(job_id="noio", directory=tmp_path, interval=0.005)
    wait_for(lambda: m.writer.writes > 0, timeout=5)
    watching.set()
    try:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            with m.step(tokens=8) as s:
                for phase in ("data", "forward", "backward", "optimizer"):
                    with m.phase(phase):
                        pass
                s.loss = 1.0
    finally:
        watching.clear()
        m.close()
    me = threading.get_ident()
    assert [e for tid, e in events if tid == me] == []
    assert any(e == "open" for tid, e in events if tid != me)  # the hook does see the writer's I/O


@pytest.mark.torch
def test_cuda_sync_without_a_gpu_warns_once_and_times_on_the_cpu(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    assert not torch.cuda.is_available()  # the CPU build: the option must degrade, not fail
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False, cuda_sync=True)
    with m.step(tokens=2), m.phase("forward"):
        pass
    assert m.snapshot().steps == 1
    assert sum("cuda_sync requested but no CUDA device" in r.message for r in caplog.records) == 1
