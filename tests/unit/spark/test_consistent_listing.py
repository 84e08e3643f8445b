"""The consistent points list each table's recent days only (lakehouse.audit.raw_listing): a lake with a long
history lists about one entry a day of it plus the files after each table's bound, under every DMS date-folder
layout, and still finds every file that is not applied. S3 is moto's; the entries S3 returns are counted."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import boto3
import pytest
from lake_contracts.dms_files import cdc_file_name, parse_dms_key
from lakehouse.apply.ledger import LedgerEntry, StateTables
from lakehouse.audit.freshness import TableFreshness, write_freshness
from lakehouse.audit.raw_files import raw_cdc_files
from lakehouse.audit.raw_listing import list_since, unapplied_by_table
from lakehouse.audit.raw_zone import read_lake_view
from lakehouse.io import storage

from tests.offline_aws import offline_aws
from tests.support import last_execution, schema_of

RAW = "raw"
FIRST_DAY = datetime(2026, 9, 1)
DAYS = 60
HOURS = (2, 6, 10, 14, 18)  # five CDC files a day
BOUND = FIRST_DAY + timedelta(days=DAYS - 3, hours=12)  # day 58, noon: 2 files that day, then 2 days of 5
RECENT = 2 + 2 * len(HOURS)
# DatePartitionSequence / DatePartitionDelimiter as DMS writes them, and none at all.
LAYOUTS = {
    "none": "",
    "YYYYMMDD, SLASH (DMS's default)": "%Y/%m/%d/",
    "YYYYMMDDHH, SLASH": "%Y/%m/%d/%H/",
    "YYYYMM, SLASH": "%Y/%m/",
    "YYYYMMDD, DASH": "%Y-%m-%d/",
    "YYYYMMDD, UNDERSCORE": "%Y_%m_%d/",
    "YYYYMMDD, NONE": "%Y%m%d/",
    "DDMMYYYY, SLASH": "%d/%m/%Y/",
    "MMYYYYDD, NONE": "%m%Y%d/",
}
# Entries S3 returns (keys and common prefixes) for one table: one a day of history, the LOAD file, the files
# after the bound. An hourly layout: one an hour of history (here one a file); a dash layout: its year, its
# two months (September left out by its digits) and October's 30 days.
LISTED = {
    "none": DAYS + 1 + RECENT,
    "YYYYMMDD, SLASH (DMS's default)": DAYS + 1 + RECENT,
    "YYYYMMDDHH, SLASH": DAYS * len(HOURS) + 1 + RECENT,
    "YYYYMM, SLASH": DAYS + 1 + RECENT,
    "YYYYMMDD, DASH": 1 + 1 + 2 + 30 + RECENT,
    "YYYYMMDD, UNDERSCORE": DAYS + 1 + RECENT,
    "YYYYMMDD, NONE": DAYS + 1 + RECENT,
    "DDMMYYYY, SLASH": DAYS + 1 + RECENT,
    "MMYYYYDD, NONE": DAYS + 1 + RECENT,
}


@pytest.fixture
def s3(monkeypatch):
    with offline_aws(monkeypatch):
        client = boto3.client("s3")
        client.create_bucket(Bucket=RAW)
        monkeypatch.setattr(storage, "_s3_client", lambda endpoint_url: client)
        yield client


def count_listed(s3) -> list[int]:
    """A running count of the entries (objects and common prefixes) S3 answers to ListObjectsV2."""
    listed = [0]

    def count(parsed, **_):
        listed[0] += len(parsed.get("Contents", [])) + len(parsed.get("CommonPrefixes", []))

    s3.meta.events.register("after-call.s3.ListObjectsV2", count)
    return listed


def write_history(s3, folder: str, layout: str) -> list[str]:
    """A table's LOAD file and DAYS days of CDC files below its date folders; the CDC files' URIs."""
    s3.put_object(Bucket=RAW, Key=f"{folder}LOAD00000001.csv", Body=b"x")
    uris = []
    for day in range(DAYS):
        for hour in HOURS:
            moment = FIRST_DAY + timedelta(days=day, hours=hour)
            key = f"{folder}{moment.strftime(layout)}{cdc_file_name(moment)}"
            s3.put_object(Bucket=RAW, Key=key, Body=b"x")
            uris.append(f"s3://{RAW}/{key}")
    return uris


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_long_history_lists_one_entry_a_day_and_the_recent_files(s3, layout) -> None:
    """Given a table folder with 60 days of CDC files (300) under a DMS date-folder layout,
    When it is listed from a bound on day 58 at noon,
    Then every CDC file named after the bound is found (12), and S3 answered about one entry a day of history
    plus those files, not the 301 objects of the folder."""
    folder = "dms/sales/customer/"
    uris = write_history(s3, folder, LAYOUTS[layout])
    listed = count_listed(s3)

    found = list_since(f"s3://{RAW}/{folder}", BOUND)

    recent = sorted(u for u in uris if parse_dms_key(u).written_at > BOUND)
    assert len(recent) == RECENT
    named = [o.uri for o in found if o.uri in uris and parse_dms_key(o.uri).written_at > BOUND]
    assert sorted(named) == recent
    assert listed[0] == LISTED[layout]


SCHEMA = schema_of({name: (["id"], [("id", "int")]) for name in ("sales.customer", "sales.orders")})


@pytest.mark.spark
def test_each_table_is_listed_from_its_own_bound_and_its_unapplied_files_found(
    spark, lake_config, s3, tmp_path
):
    """Given two tables with 60 days of CDC files: `sales.customer` without date folders, whose freshness row
    says every change up to day 58 noon is applied, and `sales.orders` in DMS's default date folders, with no
    freshness row; every file in the ledger but customer's last one and one of orders' from day 59,
    When the consistent points ask which files are not applied (the last point less the settle time: day 57
    noon),
    Then each table's unapplied file is found, and S3 answered one entry a day of each table's history plus
    the files after each table's own bound (customer from day 58 noon, orders from day 57 noon), not 602."""
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    config = replace(lake_config, schema_file=str(schema_file), s3_endpoint_url="http://moto.invalid")
    customer = write_history(s3, "dms/sales/customer/", LAYOUTS["none"])
    orders = write_history(s3, "dms/sales/orders/", LAYOUTS["YYYYMMDD, SLASH (DMS's default)"])
    waiting_customer, waiting_orders = customer[-1], orders[-8]
    state = StateTables(spark, config)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {config.catalog_name}.{config.clean_database}")
    state.ensure()
    applied = [(u, "sales.customer") for u in customer] + [(u, "sales.orders") for u in orders]
    state.record(
        [
            LedgerEntry(table, uri.rsplit("/", 1)[1], uri, "run-1", 1)
            for uri, table in applied
            if uri not in (waiting_customer, waiting_orders)
        ]
    )
    customer_row = TableFreshness("sales.customer", "sales_customer", None, None, BOUND, None, None, None)
    write_freshness(spark, config, [customer_row], BOUND, "run-1")
    listed = count_listed(s3)

    waiting = unapplied_by_table(
        spark, config, SCHEMA, f"s3://{RAW}/dms", datetime(2026, 11, 1), BOUND - timedelta(days=1)
    )

    assert waiting == {
        "sales.customer": [parse_dms_key(waiting_customer).written_at],
        "sales.orders": [parse_dms_key(waiting_orders).written_at],
    }
    assert listed[0] == (DAYS + 1 + RECENT) + (DAYS + 1 + RECENT + len(HOURS))


def ledger_files_read(spark, after: int) -> int:
    """Data files the scans of the executions after `after` read: per execution, the largest of its scan
    metrics (adaptive execution reports one scan in several plans)."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    total = 0
    for i in range(executions.size()):
        execution = executions.apply(i)
        if execution.executionId() <= after:
            continue
        values = store.executionMetrics(execution.executionId())
        metrics = execution.metrics()
        read = [
            int(str(values.apply(m.accumulatorId())).replace(",", "") or 0)
            for m in (metrics.apply(j) for j in range(metrics.size()))
            if m.name() == "number of result data files" and values.contains(m.accumulatorId())
        ]
        total += max(read, default=0)
    return total


@pytest.mark.spark
def test_the_ledger_is_read_for_the_recent_files_only(spark, lake_config):
    """Given a ledger written by 12 runs, one a day (12 data files, each of one day's file names),
    When the consistent points ask it about the files of the last day,
    Then the answer names them, and the scan read one data file of the ledger, not 12."""
    state = StateTables(spark, lake_config)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake_config.catalog_name}.{lake_config.clean_database}")
    state.ensure()
    days = []
    for day in range(12):
        uris = [
            f"s3://{RAW}/dms/sales/customer/{cdc_file_name(FIRST_DAY + timedelta(days=day, hours=h))}"
            for h in HOURS
        ]
        state.record([LedgerEntry("sales.customer", u.rsplit("/", 1)[1], u, f"run-{day}", day) for u in uris])
        days.append(uris)
    files = raw_cdc_files((uri, 1, None) for uri in days[-1])
    execution = last_execution(spark)

    view = read_lake_view(spark, lake_config, files)

    assert sorted(view.applied) == sorted(("sales.customer", f.name) for f in files)
    assert ledger_files_read(spark, execution) == 1
