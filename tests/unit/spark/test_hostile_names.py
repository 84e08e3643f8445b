"""Any name a source database accepts round-trips through the jobs, or is refused clearly.

Source schema and table names reach SQL (identifiers, properties, comments), Spark's file reader (paths),
the raw zone's listing (prefixes) and the state tables (ledger, tombstones, quarantine). One run of the
real job entry points carries many hostile names at once (full load, CDC, reload, maintenance): each
table must end up equal to its source, and every place that holds its name must hold it exactly.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from lake_contracts.dms_files import change_seq, load_file_name
from lakehouse.base.names import (
    parse_tables_argument,
    properties_sql,
    quote,
    sql_string,
    table_folder,
    table_name,
    tables_argument,
)
from lakehouse.base.schema import SchemaFile
from lakehouse.io.iceberg import LOAD_FLOOR, SOURCE_TABLE, table_properties
from lakehouse.io.storage import list_objects, split_s3
from lakehouse.jobs.cdc import main as cdc_main
from lakehouse.jobs.full_load import main as full_load_main
from lakehouse.jobs.maintenance import main as maintenance_main

from tests.support import manifest, rows_of
from tools.dms_csv import write_dms_csv

pytestmark = pytest.mark.spark

COLUMNS = ["id", "v"]
TABLE_BODY = {
    "primary_key": ["id"],
    "columns": [{"name": "id", "type": "int"}, {"name": "v", "type": "varchar(20)"}],
}
# The three names, then characters that mean something to SQL, to a glob, to a URL or a shell.
INJECTED_FLOOR = ("sales", "x','dms.load.floor-seq'='99999999999999999999999999999999999")
HOSTILE = [
    ("sales", "y') LOCATION '\\u002Ftmp\\u002Fvictim' --"),
    ("sales", "tab\\"),
    ("sales", " lead, trail "),
    ("sales", "100% *?{a,b}[x]"),
    ("sales", 'back`tick "dq" ;--'),
    ("sales", "Üñí ç😀#frag?q=1"),
    ("sales", "select"),
    ("sales", "2024_01"),  # shaped like a DMS date folder (DatePartitionSequence YYYYMM, '_')
    ("sales", "L" * 120 + "ü"),
    ("o'hara\\db", "a:b"),
    # Dots (a table name holding one says its parts in the schema file), quotes before '=' (partition-like
    # folders), SQL text with a glob, a backslash and quotes, '%' and unicode, a long name with a dot.
    ("my.db", "t.x"),
    ("o'x=y", "it's=1"),
    ("sales", "select * from t where 'a'='a' \\"),
    ("sales", "50%25 表 ünï.cødé"),
    ("sales", "long name." + "n" * 180),
]
# A name holding more than one '.' that its schema-file entry does not split: DMS's folder is elsewhere.
UNSPLIT = ("sales", "c.d")
PLAIN = ("sales", "plain")
EMPTY = ("sales", "empty")  # DMS writes no folder for an empty source table
BASE = datetime(2026, 11, 22, 10, 0, 0)


def _qualified(pair: tuple[str, str]) -> str:
    return f"{pair[0]}.{pair[1]}"


def _entry(pair: tuple[str, str]) -> dict:
    """The schema file's entry of a table: its parts said when its name holds a '.' (as schema_gen does)."""
    return {"schema": pair[0], "table": pair[1]} | TABLE_BODY if "." in pair[1] else TABLE_BODY


def _write_all(
    root: Path, pair: tuple[str, str], files: dict[str, list[tuple]], moment: datetime
) -> list[str]:
    return [_write(root, pair, name, rows, moment) for name, rows in files.items()]


def _write(root: Path, pair: tuple[str, str], name: str, rows: list[tuple], moment: datetime) -> str:
    """A DMS CSV file under `<root>/<schema>/<table>/` (names as DMS writes them: unescaped)."""
    folder = root / pair[0] / pair[1]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    records = [(op, change_seq(seq) if seq else "", moment, values) for op, seq, values in rows]
    path.write_text(write_dms_csv(COLUMNS, records), encoding="utf-8")
    return str(path)


def _cdc_name(moment: datetime) -> str:
    return moment.strftime("%Y%m%d-%H%M%S") + f"{moment.microsecond // 1000:03d}.csv"


def _run(main, arguments: list[str], report: Path) -> tuple[int, dict]:
    code = main([*arguments, "--report_uri", str(report)])
    return code, json.loads(report.read_text())


def test_hostile_names_round_trip_through_full_load_cdc_reload_and_maintenance(spark, lake_config, tmp_path):
    """Given a schema file whose tables carry hostile names (SQL quotes and comments, backslashes, glob and
    URL characters, dots, quotes before '=', '%', spaces, unicode, a keyword, long names, hostile schemas),
    names the lake can't hold (`/`, a control character, two names that fold to one clean table), a table
    whose DMS folder differs in case, a dotted name whose entry does not split it, and an empty table,
    When the full load (three LOAD files a table), a CDC batch (three files a table: I/U/D and a bad
    record), a reload of the hostile tables (two LOAD files each, a JSON --tables list) and a maintenance
    pass run through the job entry points,
    Then each read finds exactly its files and records, every hostile table equals its source, its
    property, comment, ledger, tombstone and quarantine rows hold its exact name, the unholdable,
    misplaced and unsplit tables fail alone with a message naming them, and the empty table is loaded
    empty."""
    raw = tmp_path / "raw"
    good = [INJECTED_FLOOR, *HOSTILE, PLAIN]
    tables = {_qualified(p): _entry(p) for p in [*good, EMPTY]} | {_qualified(UNSPLIT): TABLE_BODY}
    refused = {
        "sales.bad/slash": TABLE_BODY,
        "sales.tab\tchar": TABLE_BODY,
        "sales.Order Details": TABLE_BODY,
        "sales.order_details": TABLE_BODY,
    }
    tables |= refused | {"Sales2.Orders": TABLE_BODY, "lower.case": TABLE_BODY}
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps({"dialect": "mysql", "tables": tables}, ensure_ascii=False), "utf-8")
    common = ["--warehouse", lake_config.warehouse, "--clean_database", lake_config.clean_database]
    common += ["--schema_file", str(schema_file)]
    clean = {p: lake_config.clean_table(table_name(*p)) for p in good}

    # CDC reaches one table before its (empty) full load: it creates the table (the injected floor).
    early = _write(
        raw,
        INJECTED_FLOOR,
        _cdc_name(BASE),
        [("I", 1, (i, c)) for i, c in ((1, "a"), (2, "b"), (3, "c"))],
        BASE,
    )
    first = tmp_path / "m1.json"
    first.write_text(json.dumps(manifest(early, run_id="cdc-1").to_dict()))
    code, report = _run(cdc_main, [*common, "--manifest", str(first)], tmp_path / "r1.json")
    assert code == 0, report

    # Several LOAD files a table (the hex counter's 9 then A): a read of one file must be that file only.
    load_time = BASE + timedelta(minutes=1)
    loads = {
        load_file_name(1): [("I", None, (1, "a"))],
        load_file_name(9): [("I", None, (2, "b"))],
        load_file_name(10): [("I", None, (3, "c"))],
    }
    for pair in [*HOSTILE, PLAIN, UNSPLIT]:
        _write_all(raw, pair, loads, load_time)
    _write(raw, ("sales2", "orders"), load_file_name(1), [("I", None, (1, "a"))], load_time)
    _write(raw, ("LOWER", "Case"), load_file_name(1), [("I", None, (1, "a"))], load_time)
    _write(raw, ("sales", "bad"), load_file_name(1), [("I", None, (1, "a"))], load_time)

    code, report = _run(full_load_main, [*common, "--raw_path", str(raw)], tmp_path / "r2.json")

    errors = {t["table"]: t["error"] for t in report["tables"]}
    assert code == 1  # the refused and misplaced tables fail; every other table is loaded
    assert {t for t, e in errors.items() if e} == {*refused, "Sales2.Orders", "lower.case", "sales.c.d"}
    assert f"{raw}/sales/c.d/ holds files" in errors["sales.c.d"] and '"schema"' in errors["sales.c.d"]
    read = {t["table"]: (t["files"], t["records"]) for t in report["tables"]}
    assert all(read[_qualified(p)] == (3, 3) for p in [*HOSTILE, PLAIN]), read
    assert "'/' can't be part of a DMS folder name" in errors["sales.bad/slash"]
    assert "control characters" in errors["sales.tab\tchar"]
    assert "'sales.Order Details' and 'sales.order_details' would both be" in errors["sales.Order Details"]
    assert f"{raw}/sales2/orders/ exists" in errors["Sales2.Orders"]
    assert f"{raw}/LOWER/Case/ exists" in errors["lower.case"]
    assert not spark.catalog.tableExists(lake_config.clean_table("sales2_orders"))
    empty = lake_config.clean_table(table_name(*EMPTY))
    assert errors[_qualified(EMPTY)] is None and rows_of(spark, empty) == []
    assert table_properties(spark, empty)[SOURCE_TABLE] == _qualified(EMPTY)

    cdc_time = BASE + timedelta(minutes=2)
    cdc_times = [cdc_time + timedelta(seconds=n) for n in range(3)]
    changes = [
        [("U", 10, (1, "A"))],
        [("D", 11, (2, None)), ("I", 12, (4, "d"))],
        [("X", 13, (9, "bad"))],
    ]
    batch = [
        _write(raw, pair, _cdc_name(moment), part, moment)
        for pair in good
        for moment, part in zip(cdc_times, changes, strict=True)
    ]
    second = tmp_path / "m2.json"
    second.write_text(json.dumps(manifest(*batch, run_id="cdc-2").to_dict()))
    code, report = _run(cdc_main, [*common, "--manifest", str(second)], tmp_path / "r3.json")
    assert code == 0, report
    assert sorted(t["table"] for t in report["tables"]) == sorted(_qualified(p) for p in good)
    assert all(t["inserted_or_updated"] == 2 and t["deleted"] == 1 for t in report["tables"]), report
    assert all((t["files"], t["records"]) == (3, 4) for t in report["tables"]), report

    # DMS reloads the hostile tables: it empties their folders, then writes the LOAD files of the reload.
    reload_time = BASE + timedelta(minutes=3)
    for pair in HOSTILE:
        for old in (raw / pair[0] / pair[1]).iterdir():
            old.unlink()
        reloads = {
            load_file_name(1): [("I", 20, (1, "A")), ("I", 20, (3, "c"))],
            load_file_name(2): [("I", 20, (4, "d")), ("I", 20, (5, "e"))],
        }
        _write_all(raw, pair, reloads, reload_time)
    arguments = ["--raw_path", str(raw), "--reload", "true", "--run_id", "reload"]
    names = tables_argument([_qualified(p) for p in HOSTILE])
    code, report = _run(full_load_main, [*common, *arguments, "--tables", names], tmp_path / "r4.json")
    assert code == 0, report
    assert sorted(t["table"] for t in report["tables"]) == sorted(_qualified(p) for p in HOSTILE)
    assert all((t["files"], t["records"]) == (2, 4) for t in report["tables"]), report

    # A table someone else made in the clean namespace, under a name the jobs would never give one.
    odd = f"{lake_config.catalog_name}.{lake_config.clean_database}.`hand made-table`"
    spark.sql(f"CREATE TABLE {odd} (id int) USING iceberg")
    spark.sql(f"INSERT INTO {odd} VALUES (1)")
    code, report = _run(maintenance_main, common[:4], tmp_path / "r5.json")
    assert code == 0, report
    assert {t["table"] for t in report["tables"]} >= {odd, *clean.values()}

    for pair, table in clean.items():
        expected = (
            [(1, "A"), (3, "c"), (4, "d"), (5, "e")] if pair in HOSTILE else [(1, "A"), (3, "c"), (4, "d")]
        )
        assert rows_of(spark, table) == expected, pair
        properties = table_properties(spark, table)
        assert properties[SOURCE_TABLE] == _qualified(pair)
        assert properties["comment"] == f"DMS replica of {_qualified(pair)}"
        assert LOAD_FLOOR not in properties or int(properties[LOAD_FLOOR]) < 10**20
        assert not properties.get("location", "").startswith("/tmp/victim")
    ledger = spark.table(lake_config.ledger).select("source_table", "file_name").collect()
    assert sorted((r[0], r[1]) for r in ledger) == sorted(
        [(_qualified(INJECTED_FLOOR), _cdc_name(BASE))]
        + [(_qualified(p), _cdc_name(moment)) for p in good for moment in cdc_times]
    )
    tombstones = spark.table(lake_config.tombstones).select("source_table", "key").collect()
    assert sorted((r[0], r[1]) for r in tombstones) == sorted((_qualified(p), '{"id":2}') for p in good)
    quarantined = spark.table(lake_config.quarantine).select("source_table", "reason").collect()
    assert sorted((r[0], r[1]) for r in quarantined) == sorted((_qualified(p), "invalid Op X") for p in good)


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("x','k'='v", "'x\\',\\'k\\'=\\'v'"),
        ("\\u002Ftmp", "'\\\\u002Ftmp'"),
        ("tab\\", "'tab\\\\'"),
    ],
)
def test_sql_strings_hold_exactly_their_text(spark, text, literal):
    """Given text with quotes, backslashes and escape sequences, When written as a Spark SQL literal and as
    a property, Then Spark reads back exactly the text (no escape decoded, no clause smuggled)."""
    assert sql_string(text) == literal
    assert spark.sql(f"SELECT {sql_string(text)} AS v").first()["v"] == text
    assert properties_sql({text: text}) == f"{literal}={literal}"
    assert spark.sql(f"SELECT 1 AS {quote(text)}").columns == [text]


def test_the_tables_argument_keeps_names_exactly_and_the_comma_form_still_works():
    """Given names with commas, quotes and spaces at their ends, When passed as --tables (a JSON array, as
    the reloads function writes it), Then each comes back exactly; a plain comma list still parses."""
    names = ["sales.a,b", " x. y ", 's.it\'s "q"']
    assert parse_tables_argument(tables_argument(names)) == names
    assert parse_tables_argument("sales.a, sales.b") == ["sales.a", "sales.b"]
    assert parse_tables_argument("") == []
    with pytest.raises(ValueError, match="JSON array"):
        parse_tables_argument('["unterminated')


def test_a_folder_is_listed_literally_and_never_its_longer_siblings(tmp_path):
    """Given folders `orders`, `orders2` and `[o]rders` (a glob matching `orders`), When one table's folder
    is listed, Then only its own files are; an S3 URI's key keeps `?`, `#` and `%`."""
    for folder in ("orders", "orders2", "[o]rders"):
        (tmp_path / "s" / folder).mkdir(parents=True)
        (tmp_path / "s" / folder / "LOAD00000001.csv").write_text(folder)
    for folder in ("orders", "[o]rders"):
        listed = list_objects(table_folder(str(tmp_path), "s", folder))
        assert [Path(i.uri).read_text() for i in listed] == [folder]
    assert split_s3("s3://raw/dms/s/a?b#c%20d/LOAD00000001.csv") == (
        "raw",
        "dms/s/a?b#c%20d/LOAD00000001.csv",
    )


def test_a_schema_file_loaded_per_table_refuses_only_the_tables_it_cannot_hold():
    """Given a schema file with a good table, a pair of names that fold to one clean table and a name with
    a '/', When loaded per table (as the jobs load it), Then the good table stands and each other is refused
    with a reason naming it; loaded strictly, the first problem is an error."""
    body = TABLE_BODY
    document = {"tables": {"s.ok": body, "s.Order Details": body, "s.order_details": body, "s.a/b": body}}
    schema = SchemaFile.from_dict(document, per_table=True)
    assert list(schema.tables) == ["s.ok"]
    assert sorted(schema.refused) == ["s.Order Details", "s.a/b", "s.order_details"]
    assert "'s.a/b'" in schema.refused["s.a/b"] and "s_order_details" in schema.refused["s.order_details"]
    with pytest.raises(ValueError, match="'/' can't be part"):
        SchemaFile.from_dict(document)


def test_an_s3_folder_is_listed_literally_and_never_its_longer_siblings(monkeypatch):
    """Given S3 keys of tables `orders`, `orders2`, `a?b#c%20d` and `Orders` (another case), When one table's
    folder and the schema folder's table folders are listed, Then each listing holds exactly its own keys
    and the folder names as written (`?`, `#`, `%20` kept)."""
    from lakehouse.io import storage
    from moto import mock_aws

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    storage._s3_client.cache_clear()
    try:
        with mock_aws():
            client = storage._s3_client(None)
            client.create_bucket(Bucket="raw")
            tables = ("orders", "orders2", "a?b#c%20d", "Orders")
            for table in tables:
                client.put_object(Bucket="raw", Key=f"dms/s/{table}/LOAD00000001.csv", Body=table.encode())
            for table in tables:
                listed = list_objects(table_folder("s3://raw/dms", "s", table))
                assert [i.uri for i in listed] == [f"s3://raw/dms/s/{table}/LOAD00000001.csv"]
                assert storage.read_text(listed[0].uri) == table
            assert storage.list_folders("s3://raw/dms/s") == sorted(tables)
            assert storage.list_folders("s3://raw/dms/") == ["s"]
    finally:
        storage._s3_client.cache_clear()


def test_a_table_named_like_a_date_folder_is_the_table_the_schema_file_knows():
    """Given CDC keys below a table folder shaped like a date (`sales/2024_01/`), with and without DMS's
    date folders, When classified knowing the schema file's tables, Then the table is `sales.2024_01`;
    without that knowledge the folder still reads as a date folder (as before)."""
    from lake_contracts.dms_files import parse_dms_key

    def known(schema: str, table: str) -> bool:
        return (schema, table) in {("sales", "2024_01"), ("sales", "orders")}

    for key in (
        "s3://raw/dms/sales/2024_01/20261122-100000.csv",
        "s3://raw/dms/sales/2024_01/2026/11/22/20261122-100000.csv",
    ):
        assert parse_dms_key(key, known=known).qualified_table == "sales.2024_01"
    assert parse_dms_key(
        "s3://raw/dms/sales/orders/2024_01/20261122-100000.csv", known=known
    ).qualified_table == ("sales.orders")
    assert parse_dms_key("s3://raw/dms/sales/2024_01/20261122-100000.csv").qualified_table == "dms.sales"
