"""Tombstones name keys with timestamps at full precision, and still honour those of older releases."""

from __future__ import annotations

from datetime import datetime

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.ledger import StateTables
from pyspark.sql import functions as F

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

READINGS = "plant.readings"
COLUMNS = ["sensor", "at", "value"]
SCHEMA = schema_of(
    {READINGS: (["sensor", "at"], [("sensor", "int"), ("at", "datetime(6)"), ("value", "varchar(20)")])}
)
# Two instants in the same millisecond, 333 microseconds apart.
EARLY = datetime(2026, 3, 1, 10, 0, 0, 123456)
LATER = datetime(2026, 3, 1, 10, 0, 0, 123789)


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


def readings(config) -> str:
    return config.clean_table("plant_readings")


def applied(spark, config, path, run_id):
    report = apply_cdc(spark, config, SCHEMA, manifest(path, run_id=run_id))
    assert report.ok, (report.failed, report.error)
    return report.tables[0]


def test_keys_in_the_same_millisecond_keep_their_own_tombstones(spark, lake_config, dms):
    """Given key (1, EARLY) loaded and then deleted at change 200,
    When a late file brings changes older than that delete: an insert of (1, LATER), a key never deleted
    that shares EARLY's millisecond, and an update of (1, EARLY),
    Then (1, LATER) is inserted and only the update of the deleted key is ignored."""
    dms.load(READINGS, COLUMNS, [(1, EARLY, "first"), (2, EARLY, "other")], snapshot_seq=10)
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    applied(spark, lake_config, dms.cdc(READINGS, COLUMNS, [("D", (1, EARLY, None))], seqs=[200]), "b1")

    late = dms.cdc(
        READINGS, COLUMNS, [("I", (1, LATER, "late insert")), ("U", (1, EARLY, "stale"))], seqs=[100, 150]
    )
    report = applied(spark, lake_config, late, "b2")

    assert rows_of(spark, readings(lake_config)) == [(1, LATER, "late insert"), (2, EARLY, "other")]
    assert report.ignored_older == 1
    tombstones = StateTables(spark, lake_config).tombstones
    assert [r["key"] for r in spark.table(tombstones).collect()] == [
        '{"sensor":1,"at":"2026-03-01T10:00:00.123456"}'
    ]


def test_a_reload_adds_a_key_that_only_shares_a_deleted_keys_millisecond(spark, lake_config, dms):
    """Given (1, EARLY) deleted at change 200 after the full load,
    When DMS reloads the table from a snapshot at change 150 that holds (1, EARLY) and (1, LATER),
    Then the reload adds (1, LATER) and leaves (1, EARLY) deleted (its delete is newer than the reload)."""
    dms.load(READINGS, COLUMNS, [(1, EARLY, "first"), (2, EARLY, "other")], snapshot_seq=10)
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    applied(spark, lake_config, dms.cdc(READINGS, COLUMNS, [("D", (1, EARLY, None))], seqs=[200]), "b1")
    dms.load(
        READINGS,
        COLUMNS,
        [(1, EARLY, "reloaded"), (1, LATER, "reloaded"), (2, EARLY, "reloaded")],
        snapshot_seq=150,
    )

    report = full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")

    assert report.ok, report.failed
    assert rows_of(spark, readings(lake_config)) == [(1, LATER, "reloaded"), (2, EARLY, "reloaded")]


def test_tombstones_written_to_the_millisecond_by_older_releases_still_bury_older_changes(
    spark, lake_config, dms
):
    """Given a table whose key (1, EARLY) was deleted at change 200 by an older release, which wrote the
    tombstone's key to the millisecond,
    When a late file updates (1, EARLY) at change 150 and a newer one inserts (1, LATER) at change 300,
    and then the table is reloaded from a snapshot at change 180 that still holds (1, EARLY),
    Then the late update and the reload's row are ignored (the old tombstone is newer) and the newer
    insert is applied."""
    dms.load(READINGS, COLUMNS, [(2, EARLY, "other")], snapshot_seq=10)
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    state = StateTables(spark, lake_config)
    legacy = spark.createDataFrame(
        [('{"sensor":1,"at":"2026-03-01T10:00:00.123"}', 200, EARLY)],
        "key string, change_seq long, commit_ts timestamp",
    ).withColumn("change_seq", F.col("change_seq").cast("decimal(38,0)"))
    state.bury([(READINGS, legacy)], "an older release")

    late = applied(
        spark, lake_config, dms.cdc(READINGS, COLUMNS, [("U", (1, EARLY, "stale"))], seqs=[150]), "b1"
    )
    applied(spark, lake_config, dms.cdc(READINGS, COLUMNS, [("I", (1, LATER, "newer"))], seqs=[300]), "b2")
    assert late.ignored_older == 1
    dms.load(READINGS, COLUMNS, [(1, EARLY, "reloaded"), (2, EARLY, "reloaded")], snapshot_seq=180)
    report = full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")

    assert report.ok, report.failed
    assert rows_of(spark, readings(lake_config)) == [(1, LATER, "newer"), (2, EARLY, "reloaded")]
