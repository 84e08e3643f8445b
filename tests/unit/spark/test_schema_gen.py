"""The schema file comes from the source catalog (SQLAlchemy reflection), never from the CSV."""

import json
import sqlite3

from lakehouse.base.schema import SchemaFile
from pyspark.sql import types as T

from tools.schema_gen import main, reflect_schema


def test_schema_file_is_generated_from_the_source_catalog(tmp_path):
    """Given a SQLite source with typed columns, a composite primary key and a keyless table,
    When the schema file is generated,
    Then it names each table schema.table with its source types and primary key, and maps to Iceberg types."""
    db = tmp_path / "source.db"
    with sqlite3.connect(db) as con:
        con.execute(
            "CREATE TABLE web_sales (ws_item_sk INTEGER NOT NULL, ws_order_number INTEGER NOT NULL, "
            "ws_sales_price DECIMAL(7,2), ws_sold_at TIMESTAMP, PRIMARY KEY (ws_item_sk, ws_order_number))"
        )
        con.execute("CREATE TABLE audit_log (message VARCHAR(200), logged_on DATE)")

    document = reflect_schema(f"sqlite:///{db}", ["main"])
    out = tmp_path / "schema.json"
    assert main(["--url", f"sqlite:///{db}", "--schema", "main", "--out", str(out)]) == 0

    assert json.loads(out.read_text()) == document
    assert document["dialect"] == "sqlite"
    assert document["tables"]["main.web_sales"]["primary_key"] == ["ws_item_sk", "ws_order_number"]
    assert document["tables"]["main.audit_log"]["primary_key"] == []
    schema = SchemaFile.from_dict(document)
    assert schema.find("main", "web_sales").spark_schema() == T.StructType(
        [
            T.StructField("ws_item_sk", T.LongType()),
            T.StructField("ws_order_number", T.LongType()),
            T.StructField("ws_sales_price", T.DecimalType(7, 2)),
            T.StructField("ws_sold_at", T.TimestampNTZType()),
        ]
    )


def test_a_postgresql_catalog_gives_a_schema_file_every_type_of_which_maps(postgres_socket_dir):
    """Given PostgreSQL columns a DBA really declares (an enum, timestamp(3) with and without time zone,
    numeric without precision, tsvector, bit(8), an array),
    When the schema file is generated from the live catalog,
    Then every column maps to an Iceberg type (none stops the table as unsupported): the enum as text,
    numeric as decimal(38,6) (DMS writes it as NUMERIC(28,6)), timestamptz as a UTC timestamp."""
    import psycopg

    with psycopg.connect(host=postgres_socket_dir, dbname="postgres", user="postgres", autocommit=True) as db:
        db.execute("DROP SCHEMA IF EXISTS shop CASCADE")
        db.execute("CREATE SCHEMA shop")
        db.execute("CREATE TYPE shop.mood AS ENUM ('ok', 'sad')")
        db.execute(
            "CREATE TABLE shop.visit (id bigint PRIMARY KEY, mood shop.mood, at timestamp(3), seen timestamptz(6),"
            " amount numeric, words tsvector, flags bit(8), tags text[], price numeric(9,2))"
        )
    url = f"postgresql+psycopg://postgres@/postgres?host={postgres_socket_dir}"
    document = reflect_schema(url, ["shop"])
    types = {c["name"]: c["type"] for c in document["tables"]["shop.visit"]["columns"]}
    assert types["mood"] == "enum" and types["at"].startswith("timestamp(3)")
    schema = SchemaFile.from_dict(document).find("shop", "visit").spark_schema()
    assert {f.name: f.dataType for f in schema.fields} == {
        "id": T.LongType(),
        "mood": T.StringType(),
        "at": T.TimestampNTZType(),
        "seen": T.TimestampType(),
        "amount": T.DecimalType(38, 6),
        "words": T.StringType(),
        "flags": T.StringType(),
        "tags": T.StringType(),
        "price": T.DecimalType(9, 2),
    }
