"""Helpers of the local pipeline run: progress from Iceberg metadata and the raw zone, DMS settings."""

import json
from datetime import UTC, datetime
from pathlib import Path

from localaws import progress, replication, sam_app


def write_table(folder: Path, summaries: list[dict[str, str]]) -> None:
    metadata = folder / "metadata"
    metadata.mkdir(parents=True)
    snapshots = [{"snapshot-id": i, "summary": s} for i, s in enumerate(summaries, start=1)]
    document = {"current-snapshot-id": len(snapshots), "snapshots": snapshots}
    (metadata / "v3.metadata.json").write_text(json.dumps(document))
    (metadata / "version-hint.text").write_text("3")


def test_clean_table_state_from_iceberg_metadata(tmp_path: Path) -> None:
    write_table(
        tmp_path / "db" / "main_item",
        [
            {"dms.full-load.files": "1", "total-records": "10", "total-position-deletes": "0"},
            {"dms.watermark.cdc-file": "20261122-100000000.csv", "dms.watermark.change-seq": "7"},
            {
                "dms.watermark.cdc-file": "20261122-100005000.csv",
                "dms.watermark.change-seq": "12",
                "total-records": "14",
                "total-position-deletes": "3",
            },
        ],
    )
    (tmp_path / "db" / "not_committed_yet").mkdir()
    states = progress.read_clean_zone(tmp_path, "db")
    assert list(states) == ["main_item"]
    item = states["main_item"]
    assert (item.full_load_done, item.live_rows, item.snapshots) == (True, 11, 3)
    assert (item.watermark_file, item.watermark_seq) == ("20261122-100005000.csv", 12)


def test_pending_tables_compare_newest_raw_file_with_the_watermark() -> None:
    raw = progress.RawZone(newest_cdc_file={"main_item": "20261122-100005000.csv", "main_customer": "2.csv"})
    clean = {
        "main_item": progress.CleanTableState("main_item", 2, 1, True, "20261122-100005000.csv", 5),
        "main_customer": progress.CleanTableState("main_customer", 2, 1, True, "1.csv", 5),
    }
    assert progress.pending_tables(raw, clean) == ["main_customer"]
    assert progress.pending_tables(raw, clean, frozenset({"2.csv"})) == []


def test_cdc_file_time_is_utc_from_the_name() -> None:
    assert progress.cdc_file_time("20261122-101001123.csv") == datetime(2026, 11, 22, 10, 10, 1, 123000, UTC)
    assert progress.cdc_file_time("LOAD00000001.csv") is None


def test_replication_settings_follow_the_dms_file_contract() -> None:
    settings = replication.ReplicationSettings(bucket="raw")
    s3 = settings.s3_settings()
    assert s3["AddColumnName"] and s3["IncludeOpForFullLoad"] and s3["CsvNullValue"] == "NULL"
    rules = settings.table_mappings()["rules"]
    selected = {r["object-locator"]["table-name"] for r in rules if r["rule-type"] == "selection"}
    assert selected == set(replication.SOURCE_TABLES)
    assert any(r.get("expression") == "$AR_H_CHANGE_SEQ" for r in rules)
    assert replication.task_arn("LAKEX") == "arn:aws:dms:us-east-1:000000000000:task:LAKEX"


def test_lakehouse_zip_has_the_package_at_its_root() -> None:
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(sam_app.lakehouse_zip())).namelist()
    assert "lakehouse/__init__.py" in names and "lakehouse/jobs.py" in names
