"""The steps of a table's apply return their figures; one place composes the table's report from them
(`run_report.table_report`) and `ApplyRun.run_tables` reports every table, a failed one with the figures of the
steps it completed. Pure: no Spark session (`ApplyRun.run_tables` needs none)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lake_contracts.run_report import (
    ApplyFigures,
    BatchFigures,
    CommitFigures,
    FileFigures,
    LayoutFigures,
    ReadFigures,
    TableReport,
    table_report,
)
from lakehouse.apply.run import ApplyOptions, ApplyRun, Record
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile, TableSpec
from lakehouse.io.fence import LeaseLostError

KEYED_CDC_STEPS = [
    FileFigures(files=4),
    LayoutFigures(("partitioned by days(sold_at)",)),
    FileFigures(skipped_already_applied=1),
    ReadFigures(superseded_files=1, quarantined_files=1),
    BatchFigures(records=10, quarantined_records=2, ignored_older=1, newest_commit_ts="2026-11-26T09:00:00"),
    ApplyFigures(inserted_or_updated=5, deleted=1, ignored_older=1, schema_changes=("added note string",)),
    CommitFigures(42),
]


def spec(name: str) -> TableSpec:
    return TableSpec("shop", name, (), (), "postgresql")


def run_of(parallel_tables: int = 2) -> ApplyRun:
    schema = SchemaFile("postgresql", {})
    return ApplyRun(None, LakeConfig(), schema, ApplyOptions(parallel_tables=parallel_tables), "run-1", "cdc")  # type: ignore[arg-type]


def test_a_tables_report_is_composed_from_its_steps_figures():
    """Given the figures of a keyed table's CDC steps (files, layout, read, batch, apply, commit),
    When its report is composed, Then counts add up (older changes from the batch and from tombstones), the
    schema changes follow one another in step order, and the commit time and snapshot are the steps'."""
    report = table_report("shop.orders", KEYED_CDC_STEPS, seconds=1.5)

    assert report == TableReport(
        "shop.orders",
        files=4,
        skipped_already_applied=1,
        superseded_files=1,
        records=10,
        inserted_or_updated=5,
        deleted=1,
        ignored_older=2,
        quarantined_records=2,
        quarantined_files=1,
        schema_changes=["partitioned by days(sold_at)", "added note string"],
        newest_commit_ts="2026-11-26T09:00:00",
        snapshot_id=42,
        seconds=1.5,
    )


def test_a_later_steps_snapshot_replaces_an_earlier_one_and_none_keeps_it():
    """Given two commit steps and a batch without a commit time after one with,
    When composed, Then the last snapshot id and the last known commit time stand."""
    steps = [
        CommitFigures(7),
        BatchFigures(records=1, newest_commit_ts="t1"),
        CommitFigures(8),
        BatchFigures(records=2),
        CommitFigures(None),
    ]
    report = table_report("shop.items", steps)

    assert (report.records, report.snapshot_id, report.newest_commit_ts) == (3, 8, "t1")


def test_each_table_is_reported_in_name_order_a_failed_one_with_the_steps_it_completed():
    """Given two tables, "b" failing after its files and read steps, "a" completing every step,
    When the run applies them in parallel, Then both are reported, by name: "a" with all its figures,
    "b" with its files and read figures and its error; neither report holds the other's figures."""

    def apply(table: TableSpec, payload: int, record: Record) -> None:
        record(FileFigures(files=payload))
        record(ReadFigures(quarantined_files=1))
        if table.name == "b":
            raise ValueError("shop.b: a file does not exist")
        for step in KEYED_CDC_STEPS[4:]:
            record(step)

    reports = run_of().run_tables([(spec("b"), 3), (spec("a"), 2)], apply)

    assert [replace(r, seconds=0.0) for r in reports] == [
        TableReport(
            "shop.a",
            files=2,
            records=10,
            inserted_or_updated=5,
            deleted=1,
            ignored_older=2,
            quarantined_records=2,
            quarantined_files=1,
            schema_changes=["added note string"],
            newest_commit_ts="2026-11-26T09:00:00",
            snapshot_id=42,
        ),
        TableReport(
            "shop.b", files=3, quarantined_files=1, error="ValueError: shop.b: a file does not exist"
        ),
    ]
    assert all(r.seconds >= 0 for r in reports)


def test_a_lost_lease_fails_the_whole_run_instead_of_one_table():
    """Given a table whose apply finds the pipeline lease lost, When the run applies it,
    Then the error is not reported as the table's: it ends the run (nothing more is written)."""

    def apply(table: TableSpec, payload: int, record: Record) -> None:
        raise LeaseLostError("epoch 3 is not the lease's 4")

    with pytest.raises(LeaseLostError):
        run_of(parallel_tables=1).run_tables([(spec("a"), 1)], apply)


def test_the_reader_of_a_stored_report_reads_back_what_the_writer_wrote_and_trusts_no_shape():
    """Given a run report written by the CDC job (RunReport.to_dict, through JSON), When its reader takes it
    (RunSummary.from_document, the acknowledge Lambda's), Then it has the writer's totals, failed tables,
    run-wide counts and newest commit time; and a document of the wrong shape reads as zeros and nothing,
    never as an error."""
    import json

    from lake_contracts.run_report import RUN_REPORT_VERSION, RunReport, RunSummary

    good = table_report("sales.item", KEYED_CDC_STEPS)
    bad = TableReport("sales.bad", ignored_older=2, error="boom")
    written = RunReport("r1", "cdc", [good, bad], run_quarantined_records=9, error=None)
    document = json.loads(json.dumps(written.to_dict(), default=str))
    summary = RunSummary.from_document(document)

    assert document["version"] == RUN_REPORT_VERSION
    assert summary.totals == written.totals()
    assert summary.failed_tables == ("sales.bad",) and summary.error is None
    assert (summary.run_quarantined_records, summary.run_quarantined_files) == (9, 0)
    assert summary.newest_commit_ts == written.newest_commit_ts
    assert summary.ignoring_older == {t.table: t.ignored_older for t in (good, bad) if t.ignored_older}
    hostile = {"tables": "x", "totals": {"deleted": True, "records": float("nan")}, "freshness": [1]}
    assert RunSummary.from_document(hostile) == RunSummary(
        None, (), dict.fromkeys(summary.totals, 0), 0, 0, None, {}, ()
    )
