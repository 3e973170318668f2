"""The optional CloudWatch (AWS/FSx) source, against botocore's Stubber: no network, fake credentials."""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys

import pytest
from botocore.stub import Stubber
from prometheus_client import CollectorRegistry, generate_latest

from fleetscope import contract
from fleetscope.exporters.base import Collector
from fleetscope.exporters.fsx_cloudwatch import DEFAULT_METRICS, CloudWatchFetchError, FsxCloudWatchCollector
from fleetscope.exporters.lustre import LustreCollector
from fleetscope.exporters.registry import NodeCollector, build_collectors
from tests.exporters.lustre.helpers import FIXTURES, NODE, context
from tests.support.collected import samples
from tests.support.prom import promtool

FS1, FS2 = "fs-0123456789abcdef0", "fs-0fedcba9876543210"
NOW = 1764500000.0  # wall clock of the tests: 2025-11-30T10:53:20Z
END = dt.datetime(2025, 11, 30, 10, 53, tzinfo=dt.UTC)  # start of the current (incomplete) minute
START = END - dt.timedelta(minutes=10)
SUCCESS = contract.COLLECTOR_SUCCESS


@pytest.fixture(autouse=True)
def fake_aws(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Credentials and config that exist only in this process; nothing is read from the developer."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(ids: str = f"{FS1},{FS2}", **options: object) -> tuple[FsxCloudWatchCollector, Stubber, Clock]:
    import boto3

    client = boto3.session.Session().client("cloudwatch", region_name="us-east-2")
    stubber = Stubber(client)
    stubber.activate()
    clock = Clock()
    opts = {"fsx_cloudwatch_file_system_ids": ids, **options}
    ctx = context(FIXTURES / "p5", **opts)
    collector = FsxCloudWatchCollector(ctx, client=client, clock=clock, wall_clock=lambda: NOW)
    return collector, stubber, clock


def expected_params(ids: list[str], metrics: dict[str, str] = DEFAULT_METRICS) -> dict:
    queries = []
    for fs in ids:
        for metric, stat in metrics.items():
            queries.append(
                {
                    "Id": f"q{len(queries)}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": "AWS/FSx",
                            "MetricName": metric,
                            "Dimensions": [{"Name": "FileSystemId", "Value": fs}],
                        },
                        "Period": 60,
                        "Stat": stat,
                    },
                    "ReturnData": True,
                }
            )
    return {"MetricDataQueries": queries, "StartTime": START, "EndTime": END, "ScanBy": "TimestampDescending"}


def result(qid: str, points: list[tuple[int, float]], status: str = "Complete") -> dict:
    """``points`` = (minutes before END, value)."""
    return {
        "Id": qid,
        "Label": qid,
        "Timestamps": [END - dt.timedelta(minutes=m) for m, _ in points],
        "Values": [v for _, v in points],
        "StatusCode": status,
    }


#: Query ids of FS1 (q0..q6) in DEFAULT_METRICS order; FS2 is q7..q13.
Q = {metric: f"q{i}" for i, metric in enumerate(DEFAULT_METRICS)}


def fs1_answer(read_bytes: float = 6.0e10) -> dict:
    return {
        "MetricDataResults": [
            # older point listed first: the newest must win whatever the order
            result(Q["DataReadBytes"], [(3, 1.0), (2, read_bytes)]),
            result(Q["DataWriteBytes"], [(2, 1.5e9)]),
            result(Q["DataReadOperations"], [(2, 61440.0)]),
            result(Q["DataWriteOperations"], []),  # zero in that minute: CloudWatch sends nothing
            result(Q["MetadataOperations"], [(2, 3300.0)]),
            result(Q["FreeDataStorageCapacity"], [(2, 2.7e12)]),
            result(Q["ClientConnections"], [(2, 64.0)]),
            *(result(f"q{7 + i}", []) for i in range(7)),  # FS2: no datapoints at all
        ]
    }


def fsx(found: dict, metric: str, fs: str = FS1) -> float | None:
    return found.get((contract.fsx_metric_name(metric), (("FileSystemId", fs), ("Hostname", NODE))))


def test_one_call_for_all_metrics_and_values_come_out_right() -> None:
    collector, stubber, _ = make()
    stubber.add_response("get_metric_data", fs1_answer(), expected_params([FS1, FS2]))
    found = samples(collector.collect())
    stubber.assert_no_pending_responses()
    assert fsx(found, "DataReadBytes") == 6.0e10
    assert fsx(found, "DataWriteBytes") == 1.5e9
    assert fsx(found, "DataReadOperations") == 61440
    assert fsx(found, "DataWriteOperations") == 0  # absent Sum of a reporting file system = 0
    assert fsx(found, "MetadataOperations") == 3300
    assert fsx(found, "FreeDataStorageCapacity") == 2.7e12
    assert fsx(found, "ClientConnections") == 64
    assert not any(dict(labels)["FileSystemId"] == FS2 for _, labels in found)  # no data: not invented
    names = {name for name, _ in found}
    assert "fsx_data_read_bytes" in names and "fsx_free_data_storage_capacity" in names
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector([collector]))  # type: ignore[arg-type]
    text = generate_latest(registry)  # served from the cache: no second call
    assert b'fsx_data_read_bytes{FileSystemId="fs-0123456789abcdef0",Hostname="ip-172-31-7-12"} 6e+10' in text
    lint = promtool("check", "metrics", input=text)
    problems = (lint.stdout + lint.stderr).decode().splitlines()
    # the only complaint allowed: the contract's CloudWatch-style `FileSystemId` label is not snake_case
    assert lint.returncode in (0, 3), problems  # 3 = lint findings only, not a parse error
    assert all("label names should be written in 'snake_case'" in p for p in problems), problems


def test_fetches_at_most_once_per_cache_interval() -> None:
    collector, stubber, clock = make(FS1, fsx_cloudwatch_cache_seconds=120.0)
    first = fs1_answer()
    first["MetricDataResults"] = first["MetricDataResults"][:7]
    stubber.add_response("get_metric_data", first, expected_params([FS1]))
    assert fsx(samples(collector.collect()), "DataReadBytes") == 6.0e10
    clock.t += 119  # within the cache: served from memory (the Stubber would fail on a second call)
    assert fsx(samples(collector.collect()), "DataReadBytes") == 6.0e10
    stubber.assert_no_pending_responses()
    second = fs1_answer(read_bytes=7.0e10)
    second["MetricDataResults"] = second["MetricDataResults"][:7]
    stubber.add_response("get_metric_data", second, expected_params([FS1]))
    clock.t += 1
    assert fsx(samples(collector.collect()), "DataReadBytes") == 7.0e10
    stubber.assert_no_pending_responses()
    help_text = next(f for f in collector.collect() if f.name == "fsx_data_read_bytes").documentation
    assert "cached" in help_text and "120 s" in help_text and "Sum" in help_text


def test_client_error_is_success_0_others_unaffected_then_recovers(caplog: pytest.LogCaptureFixture) -> None:
    collector, stubber, clock = make(FS1)
    lustre = LustreCollector(context(FIXTURES / "p5"))
    node = NodeCollector([lustre, collector])
    answer = fs1_answer()
    answer["MetricDataResults"] = answer["MetricDataResults"][:7]
    stubber.add_response("get_metric_data", answer, expected_params([FS1]))
    good = samples(node.collect())
    assert good[(SUCCESS, (("collector", "fsx_cloudwatch"),))] == 1
    assert fsx(good, "DataReadBytes") == 6.0e10

    clock.t += 60
    stubber.add_client_error(
        "get_metric_data",
        service_error_code="Throttling",
        service_message="Rate exceeded",
        http_status_code=400,
    )
    with caplog.at_level(logging.ERROR, logger="fleetscope.exporters.fsx_cloudwatch"):
        bad = samples(node.collect())
    assert bad[(SUCCESS, (("collector", "fsx_cloudwatch"),))] == 0
    assert bad[(SUCCESS, (("collector", "lustre"),))] == 1
    assert any(name == contract.LUSTRE_CLIENT_READ_BYTES for name, _ in bad)  # lustre still served
    assert not any(name.startswith("fsx_") for name, _ in bad)  # stale values are not passed off as live
    assert "Throttling: Rate exceeded" in caplog.text and "serving no fsx_* series" in caplog.text

    clock.t += 30  # still within the interval: no new call, still failing
    assert samples(node.collect())[(SUCCESS, (("collector", "fsx_cloudwatch"),))] == 0
    stubber.assert_no_pending_responses()

    clock.t += 30
    stubber.add_response("get_metric_data", answer, expected_params([FS1]))
    again = samples(node.collect())
    assert again[(SUCCESS, (("collector", "fsx_cloudwatch"),))] == 1
    assert fsx(again, "DataReadBytes") == 6.0e10


def test_pagination_and_a_failed_query() -> None:
    collector, stubber, _ = make(FS1)
    page1 = {"MetricDataResults": [result(Q["DataReadBytes"], [(2, 5.0)])], "NextToken": "more"}
    page2 = {
        "MetricDataResults": [
            result(Q["DataWriteBytes"], [(2, 7.0)]),
            result(Q["FreeDataStorageCapacity"], [], status="InternalError"),
        ]
    }
    stubber.add_response("get_metric_data", page1, expected_params([FS1]))
    stubber.add_response("get_metric_data", page2, {**expected_params([FS1]), "NextToken": "more"})
    found = samples(collector.collect())
    stubber.assert_no_pending_responses()
    assert fsx(found, "DataReadBytes") == 5 and fsx(found, "DataWriteBytes") == 7
    assert fsx(found, "FreeDataStorageCapacity") is None
    assert collector.error_counts() == {"cloudwatch_query": 1}


def test_more_than_500_queries_are_split_into_calls() -> None:
    ids = [f"fs-{i:017x}" for i in range(72)]  # 72 x 7 metrics = 504 queries
    collector, stubber, _ = make(",".join(ids))
    full = expected_params(ids)["MetricDataQueries"]
    for chunk in (full[:500], full[500:]):
        params = {**expected_params(ids), "MetricDataQueries": chunk}
        stubber.add_response(
            "get_metric_data", {"MetricDataResults": [result(chunk[0]["Id"], [(2, 1.0)])]}, params
        )
    found = samples(collector.collect())
    stubber.assert_no_pending_responses()
    assert fsx(found, "DataReadBytes", ids[0]) == 1.0
    assert fsx(found, "DataWriteOperations", ids[71]) == 1.0  # q500, answered by the second call


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "no file systems"),
        ({"fsx_cloudwatch_file_system_ids": "fs-123,vol-1"}, "not FSx file system ids: fs-123, vol-1"),
        ({"fsx_cloudwatch_file_system_ids": FS1, "fsx_cloudwatch_period": 90}, "multiple of 60"),
        (
            {"fsx_cloudwatch_file_system_ids": FS1, "fsx_cloudwatch_metrics": "DataReadBytes:P99"},
            "Name:Statistic",
        ),
    ],
)
def test_bad_configuration_fails_this_collector_only(options: dict, message: str) -> None:
    ctx = context(FIXTURES / "p5", **options)
    with pytest.raises(ValueError, match=message):
        FsxCloudWatchCollector(ctx)
    collectors = build_collectors(["lustre", "fsx_cloudwatch"], ctx)
    found = samples(NodeCollector(collectors).collect())
    assert found[(SUCCESS, (("collector", "fsx_cloudwatch"),))] == 0
    assert found[(SUCCESS, (("collector", "lustre"),))] == 1


def test_real_client_is_built_for_the_region_flag() -> None:
    ctx = context(FIXTURES / "p5", fsx_cloudwatch_file_system_ids=FS1, fsx_cloudwatch_region="eu-west-1")
    collector = FsxCloudWatchCollector(ctx)
    assert collector._client.meta.region_name == "eu-west-1"
    assert collector.cache_seconds == 60 and collector.period == 60
    assert isinstance(collector, Collector)


def test_a_fetch_error_reads_clearly() -> None:
    collector, stubber, _ = make(FS1)
    stubber.add_client_error(
        "get_metric_data", service_error_code="AccessDenied", service_message="not allowed"
    )
    with pytest.raises(CloudWatchFetchError, match="GetMetricData failed: AccessDenied: not allowed"):
        list(collector.collect())


def test_node_agent_modules_do_not_import_boto3() -> None:
    code = (
        "import sys; import fleetscope.exporters.fsx_cloudwatch, fleetscope.exporters.lustre, "
        "fleetscope.exporters.registry; "
        "bad = [m for m in ('boto3', 'botocore') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
