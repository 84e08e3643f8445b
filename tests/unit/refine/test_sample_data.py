"""The TPC-DS-like source generator and its workload: deterministic, realistic, faithfully captured."""

from __future__ import annotations

import csv
import io
import shutil
import sqlite3
from pathlib import Path

import pytest
from lakehouse.base.schema import SchemaFile
from lakehouse.base.types import spark_type

from tools import sample_data as S

SCALE = 0.05


@pytest.fixture(scope="module")
def source_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "source.db"
    S.create_source_database(path, scale=SCALE, seed=11)
    return path


def _dump(path: Path) -> dict[str, list[tuple]]:
    return {table: S.read_rows(path, table)[1] for table in S.TABLES}


def test_same_seed_gives_same_data_and_another_seed_differs(source_db: Path, tmp_path: Path) -> None:
    """Given the database made with seed 11
    When it is generated again with seed 11, and once with seed 12
    Then the first copy has the very same rows and the second does not."""
    again, other = tmp_path / "again.db", tmp_path / "other.db"
    counts = S.create_source_database(again, scale=SCALE, seed=11)
    S.create_source_database(other, scale=SCALE, seed=12)

    assert _dump(again) == _dump(source_db)
    assert _dump(other)["web_sales"] != _dump(source_db)["web_sales"]
    assert counts == {table: len(rows) for table, rows in _dump(source_db).items()}


def test_scale_one_is_about_twenty_thousand_sales(tmp_path: Path) -> None:
    """Given scale 1 (the demo's default)
    Then there are about 20,000 web_sales rows and the dimensions are sized like TPC-DS's ratios."""
    counts = S.create_source_database(tmp_path / "s1.db", scale=1, seed=42)

    assert 18_000 <= counts["web_sales"] <= 22_000
    assert counts["customer"] == 2000 and counts["item"] == 600
    assert counts["date_dim"] == S.DATE_DIM_DAYS and counts["time_dim"] == 1440


def test_reflected_schema_has_real_types_and_keys(source_db: Path) -> None:
    """Given the generated database
    When its catalog is reflected into the schema file
    Then prices are decimal(7,2), dates are dates, names are strings, and web_sales has the TPC-DS
    composite key."""
    schema = SchemaFile.from_dict(S.schema_document(source_db))
    sales = schema.find("main", "web_sales")
    types = {c.name: spark_type(c.source_type, schema.dialect).simpleString() for c in sales.columns}
    customer = schema.find("main", "customer")

    assert sales.primary_key == ("ws_item_sk", "ws_order_number")
    assert (
        types["ws_sales_price"] == "decimal(7,2)" and types["ws_quantity"] == "bigint"
    )  # SQLite integers are 8 bytes
    assert spark_type(customer.column("c_birth_date").source_type, "sqlite").simpleString() == "date"
    assert (
        spark_type(customer.column("c_last_update").source_type, "sqlite").simpleString() == "timestamp_ntz"
    )
    assert spark_type(customer.column("c_last_name").source_type, "sqlite").simpleString() == "string"
    assert sorted(t.rsplit(".", 1)[1] for t in schema.tables) == sorted(S.TABLES)


def test_values_are_realistic(source_db: Path) -> None:
    """Given the generated database
    Then prices obey TPC-DS arithmetic, nullable columns hold some nulls, and names hold unicode,
    commas and quotes."""
    with sqlite3.connect(source_db) as db:
        bad_arithmetic = db.execute(
            "SELECT count(*) FROM web_sales WHERE abs(ws_ext_sales_price - ws_sales_price * ws_quantity) > 0.001"
            " OR abs(ws_net_profit - (ws_net_paid - ws_ext_wholesale_cost)) > 0.001"
        ).fetchone()[0]
        null_suites = db.execute("SELECT avg(ca_suite_number IS NULL) FROM customer_address").fetchone()[0]
        null_emails = db.execute("SELECT count(*) FROM customer WHERE c_email_address IS NULL").fetchone()[0]
        names = [r[0] or "" for r in db.execute("SELECT c_last_name FROM customer")]
        names += [r[0] or "" for r in db.execute("SELECT c_first_name FROM customer")]

    assert bad_arithmetic == 0
    assert 0.3 < null_suites < 0.7
    assert null_emails > 0
    assert any(not n.isascii() for n in names)
    assert any("," in n for n in names) and any("'" in n or '"' in n for n in names)


def test_workload_changes_replayed_on_the_start_state_give_the_end_state(
    source_db: Path, tmp_path: Path
) -> None:
    """Given a copy of the database
    When a workload of 150 operations runs on it
    Then it did every kind of operation, and the captured row changes, replayed in order on the rows
    as they were before, give exactly the rows as they are after (the capture is faithful)."""
    db = tmp_path / "work.db"
    shutil.copy(source_db, db)
    before = _dump(db)

    result = S.run_workload(db, changes=150, seed=5)

    replayed = {table: {_key(table, r): r for r in rows} for table, rows in before.items()}
    for change in result.changes:
        key = _key(change.table, change.values)
        if change.op == "D":
            del replayed[change.table][key]
        else:
            replayed[change.table][key] = change.values
    after = _dump(db)
    assert {t: sorted(rows.values()) for t, rows in replayed.items()} == {
        t: sorted(r) for t, r in after.items()
    }
    assert set(result.operations) == set(S.DEFAULT_MIX)
    assert {op for _, op in result.rows} == {"I", "U", "D"}
    assert sum(result.operations.values()) == 150


def _key(table: str, row: tuple) -> tuple:
    index = {"web_sales": (0, 1)}.get(table, (0,))
    return tuple(row[i] for i in index)


def test_dms_files_are_dms_shaped_csv(source_db: Path, tmp_path: Path) -> None:
    """Given the database and a workload's changes
    When they are written as DMS full-load and CDC files
    Then LOAD files count in hex, every CSV parses with the header's field count (quotes, commas and
    newlines quoted), and CDC rows carry Op and increasing change sequences."""
    db = tmp_path / "work.db"
    shutil.copy(source_db, db)
    loads = S.write_full_load_files(db, tmp_path / "raw", rows_per_file=60)
    changes = S.run_workload(db, changes=40, seed=3).changes
    cdc = S.write_cdc_files(db, changes, tmp_path / "raw", first_change_seq=1000)

    sales_loads = sorted(Path(p).name for p in loads if "/web_sales/" in p)
    assert sales_loads[:2] == ["LOAD00000001.csv", "LOAD00000002.csv"]
    assert "LOAD0000000A.csv" in sales_loads
    records = []
    for path in loads + cdc:
        rows = list(csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8"), newline="")))
        assert {len(r) for r in rows} == {len(rows[0])}, path
        records += [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    cdc_records = [r for r in records if r["AR_H_CHANGE_SEQ"]]
    assert len(cdc_records) == len(changes)
    assert {r["Op"] for r in cdc_records} <= {"I", "U", "D"}
    assert sorted(int(r["AR_H_CHANGE_SEQ"]) for r in cdc_records) == list(range(1000, 1000 + len(changes)))
    assert any("\n" in v for r in records for v in r.values())


def test_workload_waits_for_another_writer_holding_the_write_lock(source_db: Path, tmp_path: Path) -> None:
    """Given another connection that holds the write lock (a statement of a test, a mid-stream schema
    change) and commits a second later
    When a workload runs meanwhile
    Then the workload waits and completes every operation (a deferred transaction would read first,
    then find the writer waiting on its read lock, and sqlite fails that at once: "database is locked")."""
    import threading

    db = tmp_path / "work.db"
    shutil.copy(source_db, db)
    writer = sqlite3.connect(db, isolation_level=None, timeout=30, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE customer SET c_last_update = c_last_update")
    committed = threading.Timer(1.0, lambda: writer.execute("COMMIT"))
    committed.start()
    try:
        result = S.run_workload(db, changes=20, seed=7)
    finally:
        committed.join()
        writer.close()

    assert sum(result.operations.values()) == 20
