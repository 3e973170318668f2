"""The training collector against real rank files, real writer processes, and hostile files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.labels import MAX_LABEL_CHARS
from fleetscope.telemetry import TrainingMonitor
from tests.exporters.training.conftest import RankProcess, make_collector, samples, values
from tests.support import exposition
from tests.support.exporter import ExporterProcess
from tests.support.prom import promtool, wait_for

STEPS = contract.TRAINING_STEPS.name


def write_rank(
    directory: Path, job_id: str, rank: int, steps: int = 3, tokens: int = 100, layout: object = None
) -> Path:
    """A valid rank file whose writer (this test process) is alive."""
    m = TrainingMonitor(
        job_id=job_id,
        rank=rank,
        local_rank=rank,
        directory=directory,
        start=False,
        remove_on_close=False,
        env={},
        layout=layout,
    )
    for _ in range(steps):
        with m.step(tokens=tokens), m.phase("forward"):
            pass
    m.close()  # writes the file one last time and keeps it
    return Path(m.writer.path)


def test_serves_rank_files_with_the_exporters_node_label(tmp_path: Path) -> None:
    write_rank(tmp_path, "4711", 0, steps=3)
    path = write_rank(tmp_path, "4711", 1, steps=5)
    # A file may not choose its node: a Hostname label in it is replaced by the exporter's.
    text = path.read_text().replace('gpu="1"}', 'gpu="1",Hostname="spoofed"}')
    path.write_text(text)
    c = make_collector(tmp_path, node="node-a")
    got = samples(c)
    assert values(c, STEPS) == {("4711", "0"): 3.0, ("4711", "1"): 5.0}
    hosts = {dict(labels)["Hostname"] for (_, labels) in got}
    assert hosts == {"node-a"}
    phase = [dict(lbl) for (n, lbl) in got if n == contract.TRAINING_PHASE_SECONDS]
    assert {p["phase"] for p in phase} == {"forward", "eval", "checkpoint"}  # pause phases from the start
    keys = next(lbl for (n, lbl) in got if n == STEPS)
    assert sorted(k for k, _ in keys) == sorted(contract.TRAINING_LABELS)
    assert c.error_counts() == {}


def test_layout_labels_are_served_and_empty_when_a_file_has_none(tmp_path: Path) -> None:
    write_rank(
        tmp_path, "j", 0, layout={"pipeline_stage": 1, "data_parallel_rank": 0, "tensor_parallel_rank": 3}
    )
    write_rank(tmp_path, "j", 1)  # no layout known, as from a writer that predates the labels
    c = make_collector(tmp_path)
    info = {
        dict(lbl)["rank"]: {k: dict(lbl)[k] for k in contract.LAYOUT_LABELS}
        for (n, lbl) in samples(c)
        if n == contract.TRAINING_INFO
    }
    assert info == {
        "0": {
            "pipeline_stage": "1",
            "data_parallel_rank": "0",
            "tensor_parallel_rank": "3",
            "context_parallel_rank": "",
            "expert_parallel_rank": "",
        },
        "1": dict.fromkeys(contract.LAYOUT_LABELS, ""),
    }
    assert c.error_counts() == {}


def test_killed_rank_is_dropped_while_live_rank_stays(tmp_path: Path, rank_processes: list) -> None:
    r0 = RankProcess(tmp_path, "job-k", 0)
    r1 = RankProcess(tmp_path, "job-k", 1)
    rank_processes += [r0, r1]
    c = make_collector(tmp_path)
    assert set(values(c, STEPS)) == {("job-k", "0"), ("job-k", "1")}
    r1.kill()
    assert (tmp_path / "job-k-rank1.prom").exists()  # SIGKILL leaves the file behind
    assert set(values(c, STEPS)) == {("job-k", "0")}
    assert c.error_counts() == {}  # a dead rank is normal, not an error


def test_restart_with_the_same_job_id_replaces_the_old_series(tmp_path: Path, rank_processes: list) -> None:
    old = RankProcess(tmp_path, "job-r", 0, rate=500)
    rank_processes.append(old)
    c = make_collector(tmp_path)
    wait_for(lambda: values(c, STEPS).get(("job-r", "0"), 0) >= 50, timeout=20, what="old rank to step")
    old_steps = values(c, STEPS)[("job-r", "0")]
    old.kill()
    assert values(c, STEPS) == {}
    new = RankProcess(tmp_path, "job-r", 0, rate=2)
    rank_processes.append(new)
    got = values(c, STEPS)
    assert list(got) == [("job-r", "0")]  # one series, the new writer's
    assert 1 <= got[("job-r", "0")] < old_steps  # the counter restarted from zero
    header = (tmp_path / "job-r-rank0.prom").read_text().splitlines()[0]
    assert f"pid={new.proc.pid} " in header


def _rewrite_header(path: Path, **fields: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    head = dict(t.split("=", 1) for t in lines[0].split()[3:])
    head.update(fields)
    lines[0] = "# fleetscope-training v1 " + " ".join(f"{k}={v}" for k, v in head.items()) + "\n"
    path.write_text("".join(lines))


def test_reused_pid_and_other_boot_are_dead_writers(tmp_path: Path) -> None:
    write_rank(tmp_path, "j", 0)
    reused = write_rank(tmp_path, "j", 1)
    rebooted = write_rank(tmp_path, "j", 2)
    _rewrite_header(reused, starttime="1")  # our pid, but a process started at another time
    _rewrite_header(rebooted, boot_id="00000000-0000-0000-0000-000000000000")
    assert set(values(make_collector(tmp_path), STEPS)) == {("j", "0")}


def test_writer_in_another_pid_namespace_is_judged_by_ttl_alone(tmp_path: Path) -> None:
    """A training container's pids mean nothing in the exporter's namespace: no pid check there."""
    containerised = write_rank(tmp_path, "j", 0)
    _rewrite_header(containerised, pid="1", starttime="1", pidns="4026599999")
    assert set(values(make_collector(tmp_path), STEPS)) == {("j", "0")}
    old = time.time() - 300
    os.utime(containerised, (old, old))
    assert values(make_collector(tmp_path), STEPS) == {}


def test_procfs_that_does_not_show_the_exporter_disables_the_pid_check(tmp_path: Path) -> None:
    """An exporter in a pod without hostPID reading the host's /proc: pids there are not ours."""
    d = tmp_path / "training"
    d.mkdir()
    dead = write_rank(d, "j", 0)
    _rewrite_header(dead, pid="999999999")
    fake_proc = tmp_path / "proc"
    fake_proc.mkdir()
    assert values(make_collector(d, procfs=fake_proc), STEPS) == {("j", "0"): 3.0}
    assert values(make_collector(d), STEPS) == {}  # our own /proc: the pid is checked, and is gone


def test_file_older_than_ttl_is_dropped(tmp_path: Path) -> None:
    write_rank(tmp_path, "j", 0)
    stale = write_rank(tmp_path, "j", 1)
    old = time.time() - 300
    os.utime(stale, (old, old))
    assert set(values(make_collector(tmp_path, ttl=120), STEPS)) == {("j", "0")}
    assert set(values(make_collector(tmp_path, ttl=600), STEPS)) == {("j", "0"), ("j", "1")}


CORRUPTIONS = {
    "garbage": lambda t: "\x00\x01garbage {{{ not prometheus\n",
    "truncated": lambda t: t[: len(t) // 2],
    "no_header": lambda t: t.split("\n", 1)[1],
    "not_utf8": lambda t: t.replace("forward", "forw\udcffard"),
    "foreign_name": lambda t: t + 'node_cpu_seconds_total{job_id="j",rank="9",local_rank="9",gpu="9"} 1\n',
    "missing_label": lambda t: t.replace(',gpu="9"}', "}", 1),
    "extra_label": lambda t: t.replace('gpu="9"}', 'gpu="9",team="x"}', 1),
    "two_ranks": lambda t: t.replace('rank="9",local', 'rank="8",local', 1),
    "negative_counter": lambda t: t.replace("training_steps_total{", "training_steps_total{", 1).replace(
        '"} 3.0', '"} -3.0', 1
    ),
    "timestamp": lambda t: t.replace('"} 3.0\n', '"} 3.0 1700000000000\n', 1),
    "no_info": lambda t: "".join(line for line in t.splitlines(True) if "training_info" not in line),
    "bad_layout": lambda t: t.replace(
        'flops_convention="custom"', 'flops_convention="custom",pipeline_stage="-1"'
    ),
    "unknown_layout_key": lambda t: t.replace(
        'flops_convention="custom"', 'flops_convention="custom",pp="1"'
    ),
    "no_final_newline": lambda t: t.rstrip("\n"),
    # a writer that is not atomic, cut in the middle of a number: "... 987" of "... 98765"
    "cut_number": lambda t: "".join(
        sorted(t.splitlines(True), key=lambda line: line.startswith("training_steps_total"))
    ).rstrip("\n")[:-1],
    "unknown_result": lambda t: t.replace('result="failure"', 'result="maybe"'),
    # ranks that str.isdigit() accepts but no analyzer can use (issue 26, item 8)
    "superscript_rank": lambda t: t.replace('rank="9",local', 'rank="²",local'),
    "arabic_indic_rank": lambda t: t.replace('rank="9",local', 'rank="٣",local'),
    "huge_rank": lambda t: t.replace('rank="9",local', f'rank="{"9" * 400}",local'),
    "superscript_local_rank": lambda t: t.replace('local_rank="9"', 'local_rank="²"'),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupted_file_is_rejected_and_counted_without_affecting_others(tmp_path: Path, kind: str) -> None:
    write_rank(tmp_path, "j", 0)
    bad = write_rank(tmp_path, "j", 9)
    bad.write_bytes(CORRUPTIONS[kind](bad.read_text()).encode("utf-8", "surrogateescape"))
    c = make_collector(tmp_path)
    assert set(values(c, STEPS)) == {("j", "0")}
    assert c.error_counts() == {"malformed": 1}


def test_a_huge_label_value_is_cut_and_counted(tmp_path: Path) -> None:
    path = write_rank(tmp_path, "j", 0)
    path.write_text(path.read_text().replace('job_id="j"', f'job_id="{"j" * 10_000}"'))
    c = make_collector(tmp_path)
    jobs = {job for job, _ in values(c, STEPS)}
    assert jobs == {"j" * MAX_LABEL_CHARS}
    assert c.error_counts()["label_too_long"] > 0


def test_ten_megabyte_file_is_rejected_unread(tmp_path: Path) -> None:
    write_rank(tmp_path, "j", 0)
    big = tmp_path / "j-rank1.prom"
    big.write_bytes(b"# fleetscope-training v1 pid=1\n" + b"x" * (10 * 1024 * 1024))
    c = make_collector(tmp_path)
    start = time.perf_counter()
    assert set(values(c, STEPS)) == {("j", "0")}
    assert time.perf_counter() - start < 0.5
    assert c.error_counts() == {"oversize": 1}


def test_symlink_fifo_hardlink_and_world_writable_files_are_refused(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    d.mkdir()
    outside = write_rank(tmp_path, "j", 1)  # a valid file elsewhere
    write_rank(d, "j", 0)
    (d / "j-rank1.prom").symlink_to(outside)
    os.mkfifo(d / "j-rank2.prom")  # would block a reader without O_NONBLOCK
    linked = write_rank(d, "j", 3)
    os.link(linked, tmp_path / "second-name")
    ww = write_rank(d, "j", 4)
    os.chmod(ww, 0o666)
    c = make_collector(d)
    assert set(values(c, STEPS)) == {("j", "0")}
    assert c.error_counts() == {"symlink": 1, "not_regular": 1, "hardlink": 1, "insecure_file": 1}


def test_owner_uids_restrict_who_may_write(tmp_path: Path) -> None:
    path = write_rank(tmp_path, "j", 0)
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)  # root's own files are always accepted; make it someone else's
    owner = os.stat(path).st_uid
    assert values(make_collector(tmp_path, owner_uids=str(owner)), STEPS) == {("j", "0"): 3.0}
    c = make_collector(tmp_path, owner_uids="54321")
    assert values(c, STEPS) == {}
    assert c.error_counts() == {"owner": 1}


def test_world_writable_directory_needs_the_sticky_bit(tmp_path: Path) -> None:
    write_rank(tmp_path, "j", 0)
    os.chmod(tmp_path, 0o777)
    c = make_collector(tmp_path)
    assert values(c, STEPS) == {}
    assert c.error_counts() == {"insecure_directory": 1}
    os.chmod(tmp_path, 0o1777)
    assert set(values(c, STEPS)) == {("j", "0")}
    os.chmod(tmp_path, 0o755)


def test_nonexistent_directory_serves_nothing_without_error(tmp_path: Path) -> None:
    c = make_collector(tmp_path / "does-not-exist")
    assert samples(c) == {}
    assert c.error_counts() == {}


def test_second_live_file_for_the_same_rank_keeps_the_newer(tmp_path: Path) -> None:
    first = write_rank(tmp_path, "j", 0, steps=3)
    os.rename(first, tmp_path / "copy.prom")
    old = time.time() - 10
    os.utime(tmp_path / "copy.prom", (old, old))
    write_rank(tmp_path, "j", 0, steps=7)
    c = make_collector(tmp_path)
    assert values(c, STEPS) == {("j", "0"): 7.0}
    assert c.error_counts() == {"duplicate": 1}


@pytest.mark.server
def test_exporter_serves_ranks_and_counts_rejections_over_http(tmp_path: Path) -> None:
    write_rank(tmp_path, "4711", 0)
    write_rank(tmp_path, "4711", 1, layout={"pipeline_stage": 2, "expert_parallel_rank": 5})
    (tmp_path / "broken-rank7.prom").write_text("# fleetscope-training v1 pid=1\nnot a metric line at all\n")
    with ExporterProcess(
        "--collector.disable-defaults",
        "--collector.training",
        f"--collector.training.directory={tmp_path}",
        "--node.name=node-http",
        log_dir=tmp_path,
    ) as exporter:
        body = exporter.metrics()
    found = exposition.series(body)
    rank0 = (("Hostname", "node-http"), ("gpu", "0"), ("job_id", "4711"), ("local_rank", "0"), ("rank", "0"))
    assert found[(STEPS, rank0)] == 3
    ranks = {dict(labels)["rank"] for name, labels in found if name == STEPS}
    assert "1" in ranks and "7" not in ranks
    info = {dict(labels)["rank"]: dict(labels) for name, labels in found if name == contract.TRAINING_INFO}
    assert info["1"]["pipeline_stage"] == "2" and info["1"]["expert_parallel_rank"] == "5"
    assert info["1"]["tensor_parallel_rank"] == "" and info["0"]["pipeline_stage"] == ""
    assert exposition.value(body, contract.COLLECTOR_ERRORS, collector="training", reason="malformed") == 1
    assert exposition.value(body, contract.COLLECTOR_SUCCESS, collector="training") == 1
    training_only = "".join(
        line + "\n" for line in body.splitlines() if "training_" in line and "fleetscope_" not in line
    )
    lint = promtool("check", "metrics", input=training_only.encode())
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()


def test_checkpoint_and_restart_series_are_served(tmp_path: Path) -> None:
    m = TrainingMonitor(
        job_id="ck", rank=0, directory=tmp_path, start=False, remove_on_close=False, env={}, restart_attempt=2
    )
    m.checkpoint_loaded(step=100, seconds=3.0)
    with m.step(tokens=1):
        pass
    with m.checkpoint(nbytes=4096):
        pass
    m.close()
    c = make_collector(tmp_path)
    got = samples(c)
    saves = {dict(lbl)["result"]: v for (n, lbl), v in got.items() if n == contract.TRAINING_CHECKPOINT_SAVES}
    assert saves == {"success": 1.0, "failure": 0.0}
    assert values(c, contract.TRAINING_CHECKPOINT_SAVE_BYTES) == {("ck", "0"): 4096.0}
    assert values(c, contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP) == {("ck", "0"): 101.0}
    assert values(c, contract.TRAINING_RESUMED_FROM_STEP) == {("ck", "0"): 100.0}
    assert values(c, contract.TRAINING_RESTART_ATTEMPT) == {("ck", "0"): 2.0}
    assert values(c, contract.TRAINING_CHECKPOINT_LOAD_SECONDS) == {("ck", "0"): 3.0}
    assert set(values(c, contract.TRAINING_STARTUP_SECONDS)) == {("ck", "0")}
    assert c.error_counts() == {}
