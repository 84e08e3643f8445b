"""The CDC job measures freshness and the consistent point after its run: the run
report's `freshness`, the `lake_freshness` table, `consistent_points`, the commits' summaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from lake_contracts.dms_files import parse_dms_key
from lakehouse.audit.consistent import SOURCE_TS_MAX, SOURCE_TS_MIN, last_point
from lakehouse.audit.freshness import freshness_table
from lakehouse.io.iceberg import current_snapshot_id, snapshot_properties
from lakehouse.jobs.cdc import main as cdc_main
from lakehouse.jobs.full_load import main as full_load_main

from tests.support import BASE_TIME, DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

SCHEMA = schema_of(
    {
        "sales.item": (["sku"], [("sku", "varchar(10)"), ("price", "decimal(7,2)")]),
        "sales.region": (["code"], [("code", "char(2)"), ("name", "varchar(20)")]),
    }
)
SETTLE = 0.5  # seconds: the test's DMS writes a file the moment its changes commit


def moment_of(change: int) -> datetime:
    """When the test's DMS committed the n-th CDC file's changes (DmsWriter: BASE_TIME + n seconds)."""
    return BASE_TIME + timedelta(seconds=change)


def test_a_late_file_holds_the_point_back_and_never_lowers_the_newest_time(spark, lake_config, tmp_path):
    """Given both tables loaded, and three CDC files: region (1 s), item (2 s), region (3 s),
    When the first run applies the 3 s and 2 s files (the 1 s file delivered late, still in the raw zone),
    Then the region table is applied through only the late file's time less the settle time, the point is
    there with both tables at their loads; and when the second run applies the late file, the region's
    newest time stays the 3 s change's, and the point moves to the listing less the settle time with both
    tables' current snapshots."""
    dms = DmsWriter(tmp_path / "raw" / "dms")
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    dms.load("sales.region", ["code", "name"], [("NY", "New York")])
    dms.load("sales.item", ["sku", "price"], [("A1", "1.00")])
    late, item_at, region_at = 1, 2, 3  # the files' changes, by their commit second
    late_file = dms.cdc("sales.region", ["code", "name"], [("I", ("TX", "Texas"))])
    item_file = dms.cdc("sales.item", ["sku", "price"], [("U", ("A1", "2.00"))])
    region_file = dms.cdc("sales.region", ["code", "name"], [("U", ("TX", "Tejas"))])
    common = [
        *("--catalog_type", "hadoop", "--warehouse", lake_config.warehouse),
        *("--clean_database", lake_config.clean_database, "--schema_file", str(schema_file)),
    ]
    assert full_load_main([*common, "--raw_path", str(dms.root)]) == 0
    tables = {t: lake_config.clean_table(f"sales_{t}") for t in ("item", "region")}
    loads = {t: current_snapshot_id(spark, table) for t, table in tables.items()}

    def run(run_id: str, *files: str) -> dict:
        batch = tmp_path / f"{run_id}.json"
        batch.write_text(json.dumps(manifest(*files, run_id=run_id).to_dict()))
        report_file = tmp_path / f"{run_id}-report.json"
        arguments = ["--manifest", str(batch), "--report_uri", str(report_file)]
        before = datetime.now(UTC).replace(tzinfo=None)
        settle = ["--consistency_settle_seconds", str(SETTLE)]
        assert cdc_main([*common, *arguments, *settle, "--consistent_points", "true"]) == 0
        report = json.loads(report_file.read_text())
        assert report["freshness"]["error"] is None
        listed = datetime.fromisoformat(report["freshness"]["measured_at"])
        assert before <= listed <= datetime.now(UTC).replace(tzinfo=None)
        return report

    # When the first run applies the region's 3 s file and the item's 2 s file
    first = run("run-1", region_file, item_file)

    settle = timedelta(seconds=SETTLE)
    late_named = parse_dms_key(late_file).written_at
    point = last_point(spark, lake_config)
    assert point is not None
    assert point.at == late_named - settle - timedelta(microseconds=1)
    assert point.snapshots == {"sales_item": loads["item"], "sales_region": loads["region"]}
    assert first["freshness"]["consistent_point"] == point.to_dict()
    by_table = {r["source_table"]: r for r in first["freshness"]["tables"]}
    assert by_table["sales.region"]["applied_through_ts"] == point.at.isoformat()
    assert by_table["sales.region"]["newest_source_commit_ts"] == moment_of(region_at).isoformat()
    assert by_table["sales.item"]["newest_source_commit_ts"] == moment_of(item_at).isoformat()
    # And each commit carries the newest and the oldest source time it holds / applied
    summary = next(snapshot_properties(spark, tables["region"]))
    assert (summary[SOURCE_TS_MAX], summary[SOURCE_TS_MIN], summary["dms.run-id"]) == (
        moment_of(region_at).isoformat(),
        moment_of(region_at).isoformat(),
        "run-1",
    )

    # When the second run applies the late file
    second = run("run-2", late_file)

    point = last_point(spark, lake_config)
    listed = datetime.fromisoformat(second["freshness"]["measured_at"])
    assert point is not None and point.at == listed - settle - timedelta(microseconds=1)
    assert point.snapshots == {f"sales_{t}": current_snapshot_id(spark, table) for t, table in tables.items()}
    newest = next(snapshot_properties(spark, tables["region"]))
    assert (newest[SOURCE_TS_MAX], newest[SOURCE_TS_MIN]) == (
        moment_of(region_at).isoformat(),  # the late, older change does not lower it
        moment_of(late).isoformat(),
    )
    assert rows_of(
        spark,
        freshness_table(lake_config),
        ["source_table", "newest_source_commit_ts", "last_batch_id", "applied_through_ts", "run_id"],
    ) == [
        ("sales.item", moment_of(item_at), "run-1", point.at, "run-2"),
        ("sales.region", moment_of(region_at), "run-2", point.at, "run-2"),
    ]
    assert BASE_TIME < moment_of(late) < moment_of(item_at) < moment_of(region_at)


def test_without_consistent_points_a_cdc_run_measures_freshness_without_listing_the_raw_zone(
    spark, lake_config, tmp_path, monkeypatch
):
    """Given a table loaded and a CDC file applied by the CDC job with `--consistent_points false`, Then the
    run report and lake_freshness carry the table's newest source change and last batch, with no
    applied-through time and no consistent point, and the raw zone was never listed."""
    import lakehouse.audit.raw_listing

    def never(*_args, **_kwargs):
        raise AssertionError("the raw zone was listed")

    dms = DmsWriter(tmp_path / "raw" / "dms")
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    dms.load("sales.item", ["sku", "price"], [("A1", "1.00")])
    dms.load("sales.region", ["code", "name"], [("NY", "New York")])
    changed = dms.cdc("sales.item", ["sku", "price"], [("U", ("A1", "2.00"))])
    common = [
        *("--catalog_type", "hadoop", "--warehouse", lake_config.warehouse),
        *("--clean_database", lake_config.clean_database, "--schema_file", str(schema_file)),
    ]
    assert full_load_main([*common, "--raw_path", str(dms.root)]) == 0
    monkeypatch.setattr(lakehouse.audit.raw_listing, "list_since", never)
    batch = tmp_path / "run-1.json"
    batch.write_text(json.dumps(manifest(changed, run_id="run-1").to_dict()))
    report_file = tmp_path / "run-1-report.json"

    without = ["--consistent_points", "false"]
    assert cdc_main([*common, "--manifest", str(batch), "--report_uri", str(report_file), *without]) == 0

    freshness = json.loads(report_file.read_text())["freshness"]
    assert (freshness["error"], freshness["raw_path"], freshness["consistent_point"]) == (None, None, None)
    item, region = rows_of(
        spark,
        freshness_table(lake_config),
        ["source_table", "newest_source_commit_ts", "last_batch_id", "applied_through_ts"],
    )
    assert item == ("sales.item", moment_of(1), "run-1", None)
    assert (region[0], region[2], region[3]) == ("sales.region", "full-load", None)
    assert last_point(spark, lake_config) is None
