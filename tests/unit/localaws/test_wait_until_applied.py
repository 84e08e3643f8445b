"""`LocalPipeline.wait_until_applied` waits for every table of the schema file, not only for the clean tables
that exist so far: the full load creates them one by one, and a wait that returned between two of them let a
test check a clean zone that was still loading."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from localaws import pipeline_run, replication
from localaws.pipeline_run import AppHandles, LocalPipeline, RunSettings
from localaws.progress import CleanTableState, ProgressSnapshot, RawZone

BUCKET = "artifacts"
SCHEMA = {
    "dialect": "mysql",
    "tables": {
        name: {"primary_key": ["id"], "columns": [{"name": "id", "type": "int"}]}
        for name in ("shop.customer", "shop.item", "shop.web_sales")
    },
}


def snapshot(*loaded: str, creating: str | None = None, pending: tuple[str, ...] = ()) -> ProgressSnapshot:
    clean = {name: CleanTableState(name, 1, 10, True) for name in loaded}
    if creating:
        clean[creating] = CleanTableState(creating, 1, 5, False)
    return ProgressSnapshot(0.0, "running", 100, 0, RawZone(), clean, list(pending), "RUNNING", 1)


class Monitor:
    def __init__(self, snapshots: list[ProgressSnapshot]) -> None:
        self.snapshots = snapshots
        self.calls = 0

    def snapshot(self) -> ProgressSnapshot:
        self.calls += 1
        return self.snapshots[min(self.calls, len(self.snapshots)) - 1]


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalPipeline]:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=replication.SCHEMA_FILE_KEY, Body=json.dumps(SCHEMA).encode())
        run = LocalPipeline("http://127.0.0.1:1", RunSettings(name="w", workdir=tmp_path, source="sqlite"))
        run._clients["s3"] = s3
        run.app = AppHandles("lake-w", "raw", BUCKET, "arn:sm", "w_clean", "w-cdc", "w-full-load")
        monkeypatch.setattr(pipeline_run.time, "sleep", lambda seconds: None)
        yield run


def test_it_waits_until_every_table_of_the_schema_file_is_loaded(
    pipeline: LocalPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a full load that has created and loaded two of the schema file's three tables (nothing pending,
    DMS running), then the third,
    Then the wait returns only with the third loaded."""
    monitor = Monitor(
        [
            snapshot("shop_customer", "shop_item"),
            snapshot("shop_customer", "shop_item", creating="shop_web_sales"),
            snapshot("shop_customer", "shop_item", "shop_web_sales"),
        ]
    )
    monkeypatch.setattr(pipeline, "monitor", lambda ignore_files=frozenset(): monitor)

    done = pipeline.wait_until_applied(timeout=60)

    assert sorted(done.clean) == ["shop_customer", "shop_item", "shop_web_sales"]
    assert monitor.calls == 3


def test_a_table_of_the_schema_file_never_created_times_out_saying_so(
    pipeline: LocalPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monitor = Monitor([snapshot("shop_customer", "shop_item")])
    monkeypatch.setattr(pipeline, "monitor", lambda ignore_files=frozenset(): monitor)
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(pipeline_run.time, "monotonic", lambda: float(next(clock)))

    with pytest.raises(TimeoutError, match="not caught up after 60s"):
        pipeline.wait_until_applied(timeout=60)
    assert monitor.calls > 1
    assert pipeline.schema_tables() == {"shop_customer", "shop_item", "shop_web_sales"}


def test_a_table_the_jobs_derive_in_the_clean_database_does_not_hold_the_wait(
    pipeline: LocalPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the schema file's three tables loaded and a table the CDC runs derive beside them (lake_freshness:
    no full load ever marks it),
    Then the wait returns at once."""
    monitor = Monitor([snapshot("shop_customer", "shop_item", "shop_web_sales", creating="lake_freshness")])
    monkeypatch.setattr(pipeline, "monitor", lambda ignore_files=frozenset(): monitor)

    done = pipeline.wait_until_applied(timeout=60)

    assert "lake_freshness" in done.clean and monitor.calls == 1
