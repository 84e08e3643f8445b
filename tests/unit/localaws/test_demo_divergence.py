"""The demo's divergence act (localaws/divergence.py): what it does to the source, how it reads the lake, and
the lines it prints from a reconcile report (built by lakehouse.reconcile.run itself, so a change of the report's
shape shows here)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date

import psycopg
import pytest

from localaws import divergence
from tools import sample_data
from tools.source_db import SourceDatabase


@pytest.fixture
def source(postgres_socket_dir: str) -> Iterator[SourceDatabase]:
    """The demo's sample source (small) in a database of its own on the session's PostgreSQL server."""
    name = f"divergence_{uuid.uuid4().hex[:8]}"
    admin = f"postgresql://postgres@/postgres?host={postgres_socket_dir}"
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    database = SourceDatabase.postgresql(f"postgresql://postgres@/{name}?host={postgres_socket_dir}")
    sample_data.create_source_database(database, scale=0.02, seed=7)
    yield database
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f"DROP DATABASE {name} WITH (FORCE)")


def rows(database: SourceDatabase, table: str, key: str) -> list[tuple]:
    with database.connect() as db:
        return [tuple(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()]


def test_the_act_rebuilds_date_dim_without_its_first_year_and_moves_one_customer_key(
    source: SourceDatabase,
) -> None:
    """Given the demo's source, When the act runs, Then date_dim holds exactly its rows from 2024-01-01 on (the
    whole table, by key, values unchanged), every customer is unchanged but the one with the smallest key,
    which holds the same values under the next free key (the largest + 1), and the result says so."""
    dates_before = rows(source, "date_dim", "d_date_sk")
    customers_before = rows(source, "customer", "c_customer_sk")
    done = divergence.diverge_source(source)
    kept = [r for r in dates_before if r[2] >= date(2024, 1, 1)]
    assert rows(source, "date_dim", "d_date_sk") == kept
    first = customers_before[0]
    assert rows(source, "customer", "c_customer_sk") == [
        *customers_before[1:],
        (customers_before[-1][0] + 1, *first[1:]),
    ]
    assert done == divergence.SourceDivergence(
        "date_dim", len(dates_before), len(kept), "customer", first[0], customers_before[-1][0] + 1
    )
    assert done.rows_dropped == len(dates_before) - len(kept) == 365  # 2023: nothing before it is kept


def test_the_act_refuses_an_sqlite_source(tmp_path) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        divergence.diverge_source(SourceDatabase.sqlite(tmp_path / "source.db"))


DONE = divergence.SourceDivergence("date_dim", 1826, 1461, "customer", 1, 1_000_001)


def test_lake_view_counts_the_rebuilt_tables_rows_and_the_moved_key(spark) -> None:
    """Given a lake date_dim with three rows (one dated before the cut) and a customer table holding the old
    key and not the new one, Then the view counts 3 rows, 1 early, old key 1, new key 0."""
    spark.createDataFrame(
        [(1, date(2023, 12, 31)), (2, date(2024, 1, 1)), (3, date(2025, 6, 1))], "d_date_sk int, d_date date"
    ).createOrReplaceTempView("div_dates")
    spark.createDataFrame([(1, "a"), (2, "b")], "c_customer_sk int, c_name string").createOrReplaceTempView(
        "div_customers"
    )
    assert divergence.lake_view(spark, "div_dates", "div_customers", DONE) == divergence.LakeView(3, 1, 1, 0)


def test_before_the_repair_a_kept_truncated_year_is_divergence_and_a_moved_key_is_not() -> None:
    """Given the lake holding 365 rows more than the rebuilt source table, and the moved key as the source has
    it, Then the first is DIVERGED and the second replicated; and the reverse: counts equal, and a lake that
    kept the old key (the key update lost) is DIVERGED."""
    lines = divergence.describe_before_repair(DONE, divergence.LakeView(1826, 365, 0, 1), (0, 1), "public")
    assert lines == [
        "public.date_dim: source 1461 rows, lake 1826 -> DIVERGED: the TRUNCATE was not replicated, the lake"
        " keeps 365 rows the source no longer has (365 dated before 2024-01-01)",
        "public.customer: key 1 -> 1000001: rows under the old / new key: source 0 / 1, lake 0 / 1"
        " -> replicated (DMS writes a key update to S3 with the old key as before-image; the CDC job moves"
        " the row)",
    ]
    lost = divergence.describe_before_repair(DONE, divergence.LakeView(1461, 0, 1, 0), (0, 1), "public")
    assert lost[0].endswith("-> equal in count (the TRUNCATE's loss is not visible)")
    assert lost[1].endswith("source 0 / 1, lake 1 / 0 -> DIVERGED")
    deleted_since = divergence.describe_before_repair(
        DONE, divergence.LakeView(1461, 0, 0, 0), (0, 0), "public"
    )
    assert deleted_since[1].endswith(
        "source 0 / 0, lake 0 / 0 -> replicated (DMS writes a key update to S3 with"
        " the old key as before-image; the CDC job moves the row)"
    )


def test_source_key_rows_counts_the_renumbered_table_under_both_keys(source: SourceDatabase) -> None:
    done = divergence.diverge_source(source)
    assert divergence.source_key_rows(source, done) == (0, 1)
    with source.connect() as db:
        db.execute("DELETE FROM customer WHERE c_customer_sk = ?", (done.new_key,))
    assert divergence.source_key_rows(source, done) == (0, 0)


def test_the_report_summary_names_what_was_found_and_repaired_per_table() -> None:
    """Given a reconcile report as lakehouse.reconcile.run writes it: date_dim diverged (365 extra) and repaired,
    customer equal with 2 rows in flight, item failed, Then one line each and the run's totals."""
    from lakehouse.reconcile.report import ReconcileReport, TableResult

    report = ReconcileReport("demo-reconcile-1", repairs=1, seconds=12.4)
    report.tables = [
        TableResult(
            "public.date_dim",
            extra=365,
            recheck="confirmed",
            samples={"extra": [{"d_date_sk": 2459946}]},
            repaired=True,
            source_rows_hashed=1461,
            source_bytes=900,
        ),
        TableResult("public.customer", in_flight=2, source_rows_hashed=12),
        TableResult("public.item", error="Py4JJavaError: boom"),
    ]
    lines = divergence.summarize_report(report.to_dict(), {"public.date_dim": 100})
    assert lines == [
        "public.date_dim  DIVERGED: 0 missing, 365 extra, 0 differing (recheck: confirmed; e.g. extra"
        ' {"d_date_sk": 2459946}; 100 sample keys in dms_divergence) -> repair: DMS reload requested',
        "public.customer  equal (12 source rows hashed, 2 in flight)",
        "public.item      FAILED: Py4JJavaError: boom",
        "run demo-reconcile-1: 3 tables in 12s, 1473 source rows hashed, 900 bytes from the source,"
        " 1 table(s) repaired",
    ]
    report.tables[0].repaired = False
    assert divergence.summarize_report(report.to_dict())[0].endswith(
        "0 sample keys in dms_divergence) -> NOT repaired"
    )


def test_reconcile_arguments_repair_through_the_demos_task_and_never_fail_on_divergence() -> None:
    common = dict(
        run_id="r1",
        jdbc_url="jdbc:postgresql://127.0.0.1:5999/postgres",
        user="postgres",
        raw_path="s3://raw/dms",
        schema_file="s3://art/config/schema.json",
        report_uri="s3://art/manifests/reports/r1.json",
        task_arn="arn:aws:dms:us-east-1:000000000000:task:T",
    )
    repair = divergence.reconcile_arguments(**common, repair=True)
    assert repair == {
        "--run_id": "r1",
        "--source_engine": "postgresql",
        "--source_jdbc_url": "jdbc:postgresql://127.0.0.1:5999/postgres",
        "--source_user": "postgres",
        "--source_secret_id": "",
        "--schema_file": "s3://art/config/schema.json",
        "--max_source_rows": "0",
        "--raw_path": "s3://raw/dms",
        "--settle_seconds": "30",
        "--recheck_wait_seconds": "120",
        "--repair_mode": "reload",
        "--fail_on_divergence": "false",
        "--report_uri": "s3://art/manifests/reports/r1.json",
        "--dms_task_arn": "arn:aws:dms:us-east-1:000000000000:task:T",
    }
    check = divergence.reconcile_arguments(**common, repair=False)
    assert check == {k: v for k, v in repair.items() if k != "--dms_task_arn"} | {"--repair_mode": "alarm"}
    from lakehouse.jobs.reconcile import parser as reconcile_parser

    parsed = reconcile_parser().parse_known_args([a for kv in repair.items() for a in kv])[0]
    assert (parsed.repair_mode, parsed.fail_on_divergence, parsed.max_source_rows) == ("reload", "false", 0)
