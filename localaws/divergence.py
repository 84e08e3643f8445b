"""The demo's divergence act: the source changes in ways DMS does not replicate, the reconcile job
finds the difference and repairs it through a DMS table reload, and the demo says what it found and repaired.

- `diverge_source`: during CDC, two things a DBA does on a PostgreSQL source. The calendar `date_dim` is
  rebuilt without its first year (`TRUNCATE`, then the kept rows inserted again, in one transaction): DMS does
  not capture TRUNCATE from PostgreSQL, so the lake keeps the dropped year's rows (the inserts arrive; the
  TRUNCATE does not). And one customer is renumbered (a primary-key update): DMS writes that to an S3 target as
  an `U` with the old key in the `BI_` before-image column, which the CDC job applies as a move, so it is not a
  loss; the reconcile run shows that table equal.
- `lake_versus_source`: the lake against the source before the repair (row counts, the moved key), so the
  divergence is seen to be real, not assumed.
- `reconcile_arguments` / `summarize_report`: the reconcile job's run (`spark_jobs/reconcile_job.py` as the
  deployed Glue job, `--repair_mode reload`) and the lines the demo prints from its report.

Pure functions over the source connection, the Spark session and the report dict; `localaws.demo` drives them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from tools.source_db import SourceDatabase

REBUILT_TABLE = "date_dim"
REBUILT_FROM = date(2024, 1, 1)  # the first sales day: no sale refers to an earlier day
RENUMBERED_TABLE = "customer"
RENUMBERED_KEY = "c_customer_sk"


@dataclass(frozen=True)
class SourceDivergence:
    """What `diverge_source` did on the source."""

    rebuilt_table: str
    rows_before: int  # the rebuilt table's rows before the TRUNCATE
    rows_after: int  # its rows after the rebuild
    renumbered_table: str
    old_key: int
    new_key: int

    @property
    def rows_dropped(self) -> int:
        return self.rows_before - self.rows_after


def diverge_source(source: SourceDatabase) -> SourceDivergence:
    """On a PostgreSQL source: rebuild `date_dim` from `REBUILT_FROM` on (TRUNCATE + INSERT, one transaction)
    and give the customer with the smallest key the next free key (the largest + 1: a key far above the others
    would draw the workload's random picks on PostgreSQL, the first key at or above a random value)."""
    if source.dialect != "postgresql":
        raise ValueError("the divergence act needs a PostgreSQL source (SQLite has no TRUNCATE)")
    with source.connect() as db:
        before = db.execute(f"SELECT count(*) FROM {REBUILT_TABLE}").fetchone()[0]
        db.begin()
        try:
            db.execute(  # a utility statement takes no parameters: the date as a literal
                f"CREATE TEMP TABLE rebuilt ON COMMIT DROP AS SELECT * FROM {REBUILT_TABLE}"
                f" WHERE d_date >= DATE '{REBUILT_FROM.isoformat()}'"
            )
            db.execute(f"TRUNCATE {REBUILT_TABLE}")
            db.execute(f"INSERT INTO {REBUILT_TABLE} SELECT * FROM rebuilt")
            db.commit()
        except BaseException:
            db.rollback()
            raise
        after = db.execute(f"SELECT count(*) FROM {REBUILT_TABLE}").fetchone()[0]
        old_key = db.execute(f"SELECT min({RENUMBERED_KEY}) FROM {RENUMBERED_TABLE}").fetchone()[0]
        new_key = db.execute(f"SELECT max({RENUMBERED_KEY}) FROM {RENUMBERED_TABLE}").fetchone()[0] + 1
        changed = db.execute(
            f"UPDATE {RENUMBERED_TABLE} SET {RENUMBERED_KEY} = ? WHERE {RENUMBERED_KEY} = ?",
            (new_key, old_key),
        ).rowcount
        if changed != 1:
            raise RuntimeError(f"renumbering {RENUMBERED_TABLE} {old_key}: {changed} rows changed")
    return SourceDivergence(REBUILT_TABLE, before, after, RENUMBERED_TABLE, old_key, new_key)


@dataclass(frozen=True)
class LakeView:
    """The lake's side of what `diverge_source` did, read from the clean tables."""

    rebuilt_rows: int  # the rebuilt table's rows in the lake
    rebuilt_rows_before_cut: int  # of which dated before REBUILT_FROM (the source has none)
    old_key_rows: int  # lake rows of the renumbered table under the old key
    new_key_rows: int  # and under the new key


def lake_view(spark: Any, rebuilt: str, renumbered: str, divergence: SourceDivergence) -> LakeView:
    """Counts on the clean tables `rebuilt` and `renumbered` (Spark table names)."""
    from pyspark.sql import functions as F

    dates = spark.table(rebuilt)
    counts = dates.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("d_date") < F.lit(REBUILT_FROM), 1).otherwise(0)).alias("early"),
    ).first()
    keys = (
        spark.table(renumbered)
        .where(F.col(RENUMBERED_KEY).isin(divergence.old_key, divergence.new_key))
        .groupBy(RENUMBERED_KEY)
        .count()
        .collect()
    )
    by_key = {row[RENUMBERED_KEY]: row["count"] for row in keys}
    return LakeView(
        int(counts["rows"]),
        int(counts["early"] or 0),
        by_key.get(divergence.old_key, 0),
        by_key.get(divergence.new_key, 0),
    )


def source_key_rows(source: SourceDatabase, divergence: SourceDivergence) -> tuple[int, int]:
    """The source's rows of the renumbered table under the old key and under the new one, now (the workload
    may have changed the row since)."""
    query = f"SELECT count(*) FROM {RENUMBERED_TABLE} WHERE {RENUMBERED_KEY} = ?"
    with source.connect() as db:
        old = db.execute(query, (divergence.old_key,)).fetchone()[0]
        new = db.execute(query, (divergence.new_key,)).fetchone()[0]
    return int(old), int(new)


def describe_before_repair(
    divergence: SourceDivergence, lake: LakeView, source_keys: tuple[int, int], schema: str
) -> list[str]:
    """What the lake holds against the source once it applied every CDC file DMS wrote after the changes;
    `source_keys`: `source_key_rows` at the same moment."""
    dropped = lake.rebuilt_rows - divergence.rows_after
    lines = [
        f"{schema}.{divergence.rebuilt_table}: source {divergence.rows_after} rows, lake {lake.rebuilt_rows}"
        + (
            f" -> DIVERGED: the TRUNCATE was not replicated, the lake keeps {dropped} rows the source no longer"
            f" has ({lake.rebuilt_rows_before_cut} dated before {REBUILT_FROM})"
            if dropped
            else " -> equal in count (the TRUNCATE's loss is not visible)"
        ),
    ]
    same = (lake.old_key_rows, lake.new_key_rows) == source_keys
    lines.append(
        f"{schema}.{divergence.renumbered_table}: key {divergence.old_key} -> {divergence.new_key}: rows under"
        f" the old / new key: source {source_keys[0]} / {source_keys[1]}, lake {lake.old_key_rows} /"
        f" {lake.new_key_rows}"
        + (
            " -> replicated (DMS writes a key update to S3 with the old key as before-image; the CDC job moves"
            " the row)"
            if same
            else " -> DIVERGED"
        )
    )
    return lines


def reconcile_arguments(
    *,
    run_id: str,
    jdbc_url: str,
    user: str,
    raw_path: str,
    schema_file: str,
    report_uri: str,
    task_arn: str,
    repair: bool,
    recheck_wait_seconds: float = 120.0,
    settle_seconds: float = 30.0,
) -> dict[str, str]:
    """The Glue run's arguments over the job's defaults: the embedded PostgreSQL over JDBC, the recheck
    against the raw zone (the local DMS writes a change within seconds of its commit, hence S = 30 s, not the
    300 s the template assumes of AWS DMS), and (`repair`) `--repair_mode reload` on the demo's DMS task. A diverged table does
    not fail the run (`--fail_on_divergence false`): the demo reads the report instead."""
    arguments = {
        "--run_id": run_id,
        "--source_engine": "postgresql",
        "--source_jdbc_url": jdbc_url,
        "--source_user": user,
        "--source_secret_id": "",
        "--schema_file": schema_file,
        "--max_source_rows": "0",  # every table in this run, whatever the deployed row budget
        "--raw_path": raw_path,
        "--settle_seconds": f"{settle_seconds:g}",
        "--recheck_wait_seconds": f"{recheck_wait_seconds:g}",
        "--repair_mode": "reload" if repair else "alarm",
        "--fail_on_divergence": "false",
        "--report_uri": report_uri,
    }
    if repair:
        arguments["--dms_task_arn"] = task_arn
    return arguments


def summarize_report(
    report: Mapping[str, Any], divergence_rows: Mapping[str, int] | None = None
) -> list[str]:
    """One line per table of a reconcile report (what was found, and whether it was repaired), then the
    totals; `divergence_rows`: the run's `dms_divergence` rows per table."""
    lines = []
    tables: Sequence[Mapping[str, Any]] = report.get("tables", [])
    width = max((len(t["table"]) for t in tables), default=0)
    for table in tables:
        name = table["table"].ljust(width)
        if table.get("error"):
            lines.append(f"{name}  FAILED: {table['error'][:200]}")
            continue
        found = {kind: int(table.get(kind, 0)) for kind in ("missing", "extra", "differing")}
        in_flight = int(table.get("in_flight", 0))
        if not any(found.values()):
            lines.append(
                f"{name}  equal ({table.get('source_rows_hashed', 0)} source rows hashed"
                + (f", {in_flight} in flight" if in_flight else "")
                + ")"
            )
            continue
        samples = table.get("samples", {})
        example = next((f"{kind} {json.dumps(samples[kind][0])}" for kind in found if samples.get(kind)), "")
        recorded = (divergence_rows or {}).get(table["table"], 0)
        lines.append(
            f"{name}  DIVERGED: {found['missing']} missing, {found['extra']} extra, {found['differing']} differing"
            + (f", {in_flight} in flight" if in_flight else "")
            + f" (recheck: {table.get('recheck', '?')}; e.g. {example}; {recorded} sample keys in dms_divergence)"
            + (" -> repair: DMS reload requested" if table.get("repaired") else " -> NOT repaired")
        )
    totals = report.get("totals", {})
    lines.append(
        f"run {report.get('run_id')}: {len(tables)} tables in {report.get('seconds', 0):.0f}s, "
        f"{totals.get('source_rows_hashed', 0)} source rows hashed, {totals.get('source_bytes', 0)} bytes from "
        f"the source, {report.get('repairs', 0)} table(s) repaired"
        + (f", error: {report['error']}" if report.get("error") else "")
    )
    return lines
