"""`make demo-spark` says what each CDC run did (tools/demo_spark.py)."""

from lake_contracts.run_report import RunReport, TableReport

from tools.demo_spark import batch_line


def test_a_batch_line_sums_the_tables_and_names_the_newest_change_applied() -> None:
    """Given a CDC run over two tables, one with changes and one without,
    Then the demo's line sums their upserts, deletes and quarantined records and gives the newest commit time."""
    run = RunReport(
        "batch-2",
        "cdc",
        tables=[
            TableReport(
                "main.item", inserted_or_updated=3, deleted=1, newest_commit_ts="2026-11-27T07:01:02"
            ),
            TableReport("main.store", quarantined_records=2),
        ],
        seconds=1.25,
    )
    assert batch_line(2, 4, 6, run) == (
        "batch 2: 4 files, 6 row changes → 3 upserts, 1 deletes, 2 quarantined, in 1.2s, "
        "newest change committed 2026-11-27 07:01:02"
    )
