"""One consistent moment across tables and freshness per table, end to end on
Spark: a generated source, its full load, a workload whose DMS files are delivered shuffled in batches, one
source transaction's two files split across batches in the wrong order. After every batch the CDC run's
measurement records a consistent point and the refine job reads the clean tables there.

The oracle is the source's own change list: at a point T, each clean table's rows (key → the commit time
of the change it holds) are exactly the source's after every change committed at or before T and none
after; the refined zone is the enrichment of those snapshots; the split transaction is all or nothing."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from lake_contracts.dms_files import cdc_file_name
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.audit.consistent import SOURCE_TS_MAX, last_point
from lakehouse.audit.freshness import describe, freshness_table, measure
from lakehouse.base.names import COMMIT_TS_COLUMN
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import snapshot_properties
from lakehouse.refine.consumed import read_as_of
from lakehouse.refine.refresh import RefineOptions, refine

from tests.support import manifest, rows_of
from tests.unit.refine.conftest import SALES_ENRICHED, SALES_KEY, SOURCE_KEYS, enrich_sales
from tools import sample_data as S

pytestmark = pytest.mark.spark

SETTLE_SECONDS = 120  # longer than the workload: no DMS file of it spans more
LOAD_TIME = S.CLOCK_START


def key_of(table: str, columns: list[str], values: tuple) -> tuple:
    return tuple(values[columns.index(k)] for k in S.PRIMARY_KEYS[table])


def source_at(
    initial: dict[str, set[tuple]],
    changes: list[S.RowChange],
    columns: dict[str, list[str]],
    moment: datetime,
) -> dict[str, dict[tuple, datetime]]:
    """The oracle: per table, key → the commit time of the change the source row holds at `moment` (the load
    time for a row no change touched since the full load)."""
    state = {table: dict.fromkeys(keys, LOAD_TIME) for table, keys in initial.items()}
    for change in changes:
        if change.commit_time > moment:
            break
        key = key_of(change.table, columns[change.table], change.values)
        if change.op == "D":
            state[change.table].pop(key, None)
        else:
            state[change.table][key] = change.commit_time
    return state


def splits(changes: list[S.RowChange], columns: dict[str, list[str]], moment: datetime) -> bool:
    """Whether the transaction committed at `moment` writes two tables or more, inserts or updates only, and
    no later change touches its rows (so its commit time stays visible in the rows it wrote)."""
    mine = [c for c in changes if c.commit_time == moment]
    if len({c.table for c in mine}) < 2 or any(c.op == "D" for c in mine):
        return False
    keys = {(c.table, key_of(c.table, columns[c.table], c.values)) for c in mine}
    later = {
        (c.table, key_of(c.table, columns[c.table], c.values)) for c in changes if c.commit_time > moment
    }
    return not keys & later


def clean_at(spark, table: str, snapshot: int, key: tuple[str, ...]) -> dict[tuple, datetime]:
    rows = read_as_of(spark, table, snapshot).select(*key, COMMIT_TS_COLUMN).collect()
    return {tuple(r[k] for k in key): r[COMMIT_TS_COLUMN] for r in rows}


def sorted_rows(frame) -> list[tuple]:
    return [tuple(r) for r in frame.orderBy(*SALES_KEY).collect()]


def test_a_transaction_split_across_batches_is_never_half_in_the_refined_zone(
    spark, lake_config, tmp_path: Path
) -> None:
    # Given a source database, fully loaded into a new clean zone
    config = replace(lake_config, refined_database=f"{lake_config.refined_database}_consistent")
    db, raw = tmp_path / "source.db", tmp_path / "raw"
    S.create_source_database(db, scale=0.02, seed=31)
    schema = SchemaFile.from_dict(S.schema_document(db))
    columns = {t: S.read_rows(db, t)[0] for t in S.TABLES}
    initial = {t: {key_of(t, columns[t], r) for r in S.read_rows(db, t)[1]} for t in S.TABLES}
    S.write_full_load_files(db, raw, load_time=LOAD_TIME)
    assert full_load(spark, config, schema, str(raw)).ok

    # And a workload, its DMS files cut small (4 changes each), one transaction X writing two tables
    # (starting well after the load: a change within the settle time of it would leave no exact moment yet)
    changes = S.run_workload(db, 80, seed=5, start=LOAD_TIME + timedelta(minutes=10)).changes
    files = S.write_cdc_files(db, changes, raw, changes_per_file=4)
    x_time = next(t for t in sorted({c.commit_time for c in changes}) if splits(changes, columns, t))
    x_tables = sorted({c.table for c in changes if c.commit_time == x_time})

    def file_of(table: str) -> str:
        """The file holding X's change of `table` (files are named by their last change's commit time)."""
        names = sorted(f for f in files if f"/{table}/" in f)
        return next(f for f in names if Path(f).name >= cdc_file_name(x_time))

    x_files = [file_of(t) for t in x_tables]
    # Delivered shuffled in four batches; X's last-named file in the first, its others in the last batch
    rest = [f for f in files if f not in x_files]
    random.Random(7).shuffle(rest)
    batches = [rest[i::4] for i in range(4)]
    *earlier, last_named = sorted(x_files, key=lambda f: Path(f).name)
    batches[0].append(last_named)
    batches[3].extend(earlier)
    now = changes[-1].commit_time + timedelta(minutes=5)  # DMS wrote every file before the first batch ran
    names = {t: config.clean_table(f"main_{t}") for t in SOURCE_KEYS}

    # When nothing measured a point yet, Then the refine job reading at a consistent point waits
    waiting = refine(spark, config, RefineOptions(read_at="consistent"), run_id="refine-0")
    assert (waiting.status, waiting.tables) == ("waiting", [])

    seen_half_in_current = False
    for number, batch in enumerate(batches, start=1):
        # When a batch is applied, measured and refined at the newest consistent point
        assert apply_cdc(spark, config, schema, manifest(*batch, run_id=f"batch-{number}")).ok
        measured = measure(spark, config, schema, str(raw), f"batch-{number}", SETTLE_SECONDS, now=now)
        point = last_point(spark, config)
        assert point is not None and measured.consistent_point is not None
        assert measured.consistent_point["at"] == point.at.isoformat() and measured.error is None
        report = refine(spark, config, RefineOptions(read_at="consistent"), run_id=f"refine-{number}")

        # Then every clean table at the point holds exactly the source's changes up to it, none after
        oracle = source_at(initial, changes, columns, point.at)
        snapshots = {t: point.snapshots[f"main_{t}"] for t in SOURCE_KEYS}
        for table, key in SOURCE_KEYS.items():
            assert clean_at(spark, names[table], snapshots[table], key) == oracle[table], (number, table)
        # And X is whole or absent there
        holds_x = {
            t: x_time in clean_at(spark, names[t], snapshots[t], SOURCE_KEYS[t]).values() for t in x_tables
        }
        assert set(holds_x.values()) == {point.at >= x_time}, (number, holds_x)
        # And the refined zone is the enrichment of exactly those snapshots, and says so
        assert report.status == "done" and report.consistent_point == point.at.isoformat()
        expected = enrich_sales(*[read_as_of(spark, names[t], snapshots[t]) for t in SOURCE_KEYS])
        refined = spark.table(config.table(config.refined_database, SALES_ENRICHED))
        assert sorted_rows(refined) == sorted_rows(expected), number
        # (while the current snapshots, read as a plain reader would, show half of X after the first batch)
        current = {t: clean_at(spark, names[t], _current(spark, names[t]), SOURCE_KEYS[t]) for t in x_tables}
        seen_half_in_current |= len({x_time in c.values() for c in current.values()}) == 2

    assert seen_half_in_current, "the scenario never split X: the test would prove nothing"
    # Then after the last batch the point covers every change: the refined zone is the whole source
    assert point.at >= changes[-1].commit_time
    final = source_at(initial, changes, columns, now)
    for table, key in SOURCE_KEYS.items():
        assert clean_at(spark, names[table], _current(spark, names[table]), key) == final[table], table

    # And the freshness table says, per table, its newest source change, its last batch, and that it has
    # applied every change committed up to the listing less the settle time
    last_batch = {t: "full-load" for t in S.TABLES}
    for number, batch in enumerate(batches, start=1):
        for f in batch:
            last_batch[Path(f).parent.name] = f"batch-{number}"
    newest = {t: max([LOAD_TIME] + [c.commit_time for c in changes if c.table == t]) for t in S.TABLES}
    through = now - timedelta(seconds=SETTLE_SECONDS, microseconds=1)
    assert rows_of(
        spark,
        freshness_table(config),
        ["source_table", "newest_source_commit_ts", "applied_through_ts", "last_batch_id", "run_id"],
    ) == sorted((f"main.{t}", newest[t], through, last_batch[t], "batch-4") for t in S.TABLES)
    # And the demo's lines say the same: six tables, the point, and the point the refined zone was built from
    lines = describe(spark, config, config.table(config.refined_database, SALES_ENRICHED))
    assert [line.split(":")[0] for line in lines[:6]] == sorted(f"main.{t}" for t in S.TABLES)
    assert lines[6].startswith(f"consistent point: {point.at} (")
    assert lines[7:] == [f"refined zone built from the consistent point {point.at.isoformat()}"]
    # And each clean table's current snapshot carries that newest time in its summary
    for t in S.TABLES:
        summary = next(snapshot_properties(spark, config.clean_table(f"main_{t}")))
        assert datetime.fromisoformat(summary[SOURCE_TS_MAX]) == newest[t], t


def _current(spark, table: str) -> int:
    from lakehouse.io.iceberg import current_snapshot_id

    snapshot = current_snapshot_id(spark, table)
    assert snapshot is not None
    return snapshot
