"""Helpers of the local pipeline run: progress from Iceberg metadata and the raw zone, DMS settings."""

import json
from datetime import UTC, datetime
from pathlib import Path

from localaws import progress, replication, sam_app


def write_table(folder: Path, summaries: list[dict[str, str]], properties: dict | None = None) -> None:
    metadata = folder / "metadata"
    metadata.mkdir(parents=True)
    snapshots = [{"snapshot-id": i, "summary": s} for i, s in enumerate(summaries, start=1)]
    document = {"current-snapshot-id": len(snapshots), "snapshots": snapshots, "properties": properties or {}}
    (metadata / "v3.metadata.json").write_text(json.dumps(document))
    (metadata / "version-hint.text").write_text("3")


def test_clean_table_state_from_iceberg_metadata(tmp_path: Path) -> None:
    write_table(
        tmp_path / "db" / "main_item",
        [
            {"dms.full-load.files": "1", "total-records": "10", "total-position-deletes": "0"},
            {"dms.applied-files": '["20261122-100000000.csv"]'},
            {
                "dms.applied-files": '["20261122-100005000.csv", "20261122-100001000.csv"]',
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
    assert item.applied_files == {
        "20261122-100000000.csv",
        "20261122-100005000.csv",
        "20261122-100001000.csv",
    }
    assert item.newest_applied_file == "20261122-100005000.csv"


def test_a_table_loaded_by_a_replace_commit_is_loaded(tmp_path: Path) -> None:
    write_table(tmp_path / "db" / "main_item", [{"total-records": "1"}], {"dms.full-load.done": "2"})
    assert progress.read_clean_zone(tmp_path, "db")["main_item"].full_load_done


def test_a_table_is_pending_while_any_of_its_raw_files_is_unapplied_even_an_older_one() -> None:
    """Given item with its newest file applied but an older (late) one not, and customer all applied,
    Then item is pending; and not once the late file is ignored."""
    raw = progress.RawZone(cdc_file_names={"main_item": {"1.csv", "3.csv"}, "main_customer": {"2.csv"}})
    clean = {
        "main_item": progress.CleanTableState("main_item", 2, 1, True, frozenset({"3.csv"})),
        "main_customer": progress.CleanTableState("main_customer", 2, 1, True, frozenset({"2.csv"})),
    }
    assert progress.pending_tables(raw, clean) == ["main_item"]
    assert progress.pending_tables(raw, clean, frozenset({"1.csv"})) == []


def test_cdc_file_time_is_utc_from_the_name() -> None:
    assert progress.cdc_file_time("20261122-101001123.csv") == datetime(2026, 11, 22, 10, 10, 1, 123000, UTC)
    assert progress.cdc_file_time("LOAD00000001.csv") is None


def test_replication_settings_follow_the_dms_file_contract() -> None:
    settings = replication.ReplicationSettings(bucket="raw")
    s3 = settings.s3_settings()
    assert s3["AddColumnName"] and s3["IncludeOpForFullLoad"]
    # the local task writes nulls as the template's default marks them (a token, not "NULL", a surname)
    assert s3["CsvNullValue"] == sam_app.template_parameter_defaults()["CsvNullValue"] == "~DMS~NULL~"
    rules = settings.table_mappings()["rules"]
    selected = {r["object-locator"]["table-name"] for r in rules if r["rule-type"] == "selection"}
    assert selected == set(replication.SOURCE_TABLES)
    assert any(r.get("expression") == "$AR_H_CHANGE_SEQ" for r in rules)
    assert replication.task_arn("LAKEX") == "arn:aws:dms:us-east-1:000000000000:task:LAKEX"


def test_lakehouse_zip_has_the_package_at_its_root() -> None:
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(sam_app.lakehouse_zip())).namelist()
    assert "lakehouse/__init__.py" in names and "lakehouse/jobs/cdc.py" in names
