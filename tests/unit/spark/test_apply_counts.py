"""What one CDC apply spends, counted (never timed): Spark jobs, metadata loads, commits and files read.

A fixed small batch (a keyed table with inserts, updates and deletes, a second keyed table with an update and a
delete, a table without a primary key whose update goes to quarantine) is applied through the real apply on the
shared session, with the CDC job's session settings, and what it spent is compared with the constants below. A
change that adds a Spark job or a metadata reload to every table's apply, or a commit to the shared tables per
table (two tables delete: still one tombstone commit), changes a figure here: the reviewer sees the constant
change with it.

How each is counted:
- Spark jobs: the status tracker's job ids, new since the apply began; a table's jobs are those of its job
  group (the apply names one group per table), the run's own are those without a group.
- Metadata loads: the apply's calls that reach the catalog for a table's metadata (lakehouse.io.iceberg's
  `iceberg_table`, a load and a refresh: on Glue a GetTable call and a metadata.json read when the table
  changed), its existence checks (`Catalog.tableExists`) and its invalidations of Spark's cached table
  (`Catalog.refreshTable`: Spark's next use loads it again), counted by table name.
- Commits: the snapshots each table gained (the clean tables, the ledger, the tombstones, the quarantine).
- Files read: Spark SQL's scan metrics of the apply's queries (files of the raw batch, data and delete files
  of the Iceberg tables).
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.apply.ledger import StateTables
from lakehouse.apply.run import ApplyOptions
from lakehouse.io import iceberg
from lakehouse.io.session import APPLY_TUNING

from tests.support import DmsWriter, manifest, schema_of, snapshot_count

pytestmark = pytest.mark.spark

ORDERS, ITEMS, EVENTS = "shop.orders", "shop.items", "shop.events"
COLUMNS = {ORDERS: ["id", "status"], ITEMS: ["sku", "price"], EVENTS: ["at", "what"]}
SCHEMA = schema_of(
    {
        ORDERS: (["id"], [("id", "int"), ("status", "varchar(20)")]),
        ITEMS: (["sku"], [("sku", "varchar(10)"), ("price", "int")]),
        EVENTS: ([], [("at", "int"), ("what", "varchar(20)")]),
    }
)

# ------------------------------------------------------------------ what one apply of the batch may spend
# Per table applied (its own job group; loads and commits of its clean table).
JOBS_PER_TABLE = {ORDERS: 7, ITEMS: 6, EVENTS: 7}
LOADS_PER_TABLE = {ORDERS: 2, ITEMS: 2, EVENTS: 2}
COMMITS_PER_TABLE = {ORDERS: 1, ITEMS: 1, EVENTS: 1}
# Per run, whatever the number of tables: the jobs outside any table's group, the shared tables' loads and
# commits.
JOBS_PER_RUN = 16
LOADS_PER_RUN = 3
SHARED_COMMITS_PER_RUN = {"ledger": 1, "tombstones": 1, "quarantine": 1}
FILES_READ = 35


@dataclass
class Spent:
    jobs: Counter = field(default_factory=Counter)  # by source table ("" for the run's own)
    loads: Counter = field(default_factory=Counter)  # by Iceberg table name
    commits: dict[str, int] = field(default_factory=dict)
    files_read: int = 0


def _job_ids(spark, group: str | None) -> set[int]:
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def _executions(spark) -> Any:
    return spark._jsparkSession.sharedState().statusStore()


def _last_execution(spark) -> int:
    executions = _executions(spark).executionsList()
    return max((executions.apply(i).executionId() for i in range(executions.size())), default=-1)


FILE_METRICS = ("number of files read", "number of result data files", "number of result delete files")


def _files_read(spark, after: int) -> int:
    store = _executions(spark)
    executions = store.executionsList()
    total = 0
    for i in range(executions.size()):
        execution = executions.apply(i)
        if execution.executionId() <= after:
            continue
        values = store.executionMetrics(execution.executionId())
        metrics = execution.metrics()
        for j in range(metrics.size()):
            metric = metrics.apply(j)
            if metric.name() in FILE_METRICS and values.contains(metric.accumulatorId()):
                total += int(str(values.apply(metric.accumulatorId())).replace(",", "") or 0)
    return total


def spend(spark, monkeypatch, config, groups: dict[str, str], tables: dict[str, str], apply) -> Spent:
    """What `apply()` spent: `groups` names each source table's job group, `tables` each counted table."""
    spent = Spent()
    original = iceberg.iceberg_table

    def counted_load(session, table):
        spent.loads[table] += 1
        return original(session, table)

    for module in list(sys.modules.values()):
        if (module.__name__ or "").startswith("lakehouse") and getattr(
            module, "iceberg_table", None
        ) is original:
            monkeypatch.setattr(module, "iceberg_table", counted_load)
    catalog = type(spark.catalog)
    for name in ("tableExists", "refreshTable"):
        method = getattr(catalog, name)

        def counted(self, table, *rest, _method=method):
            spent.loads[table] += 1
            return _method(self, table, *rest)

        monkeypatch.setattr(catalog, name, counted)
    before = {name: snapshot_count(spark, table) for name, table in tables.items()}
    jobs_before = _job_ids(spark, None)
    execution = _last_execution(spark)
    tests_settings = {key: spark.conf.get(key) for key in APPLY_TUNING}
    try:
        for key, value in APPLY_TUNING.items():  # the CDC job's session settings (its joins never broadcast)
            spark.conf.set(key, value)
        apply()
    finally:
        for key, value in tests_settings.items():
            spark.conf.set(key, value)
    spent.jobs[""] = len(_job_ids(spark, None) - jobs_before)
    for source, group in groups.items():
        spent.jobs[source] = len(_job_ids(spark, group))
    spent.files_read = _files_read(spark, execution)
    monkeypatch.undo()
    spent.commits = {name: snapshot_count(spark, table) - before[name] for name, table in tables.items()}
    return spent


def test_one_apply_spends_the_jobs_loads_and_commits_written_above(spark, lake_config, tmp_path, monkeypatch):
    """Given three loaded tables (two keyed, one without a key) and a first batch applied (the shared tables
    exist),
    When a batch of inserts, updates and deletes of the keyed tables and an insert and an update of the
    keyless one (quarantined) is applied,
    Then it spends exactly the jobs, metadata loads, commits and file reads written at the top of this file."""
    dms = DmsWriter(tmp_path / "raw" / "dms")
    dms.load(ORDERS, COLUMNS[ORDERS], [(1, "new"), (2, "new"), (3, "new")])
    dms.load(ITEMS, COLUMNS[ITEMS], [("a", 10), ("b", 20)])
    dms.load(EVENTS, COLUMNS[EVENTS], [(1, "start")])
    assert full_load(spark, lake_config, SCHEMA, str(dms.root)).ok
    first = [
        dms.cdc(ORDERS, COLUMNS[ORDERS], [("D", (3, None))]),
        dms.cdc(EVENTS, COLUMNS[EVENTS], [("U", (1, "moved"))]),
    ]
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(*first, run_id="first")).ok
    batch = [
        dms.cdc(ORDERS, COLUMNS[ORDERS], [("U", (1, "paid")), ("I", (4, "new")), ("D", (2, None))]),
        dms.cdc(ORDERS, COLUMNS[ORDERS], [("U", (4, "paid"))]),
        dms.cdc(ITEMS, COLUMNS[ITEMS], [("U", ("a", 11)), ("D", ("b", None))]),
        dms.cdc(EVENTS, COLUMNS[EVENTS], [("I", (2, "stop")), ("U", (2, "late"))]),
    ]
    run_id = "counted"
    clean = {source: lake_config.clean_table(source.replace(".", "_")) for source in COLUMNS}
    state = StateTables(spark, lake_config)
    shared = {"ledger": state.ledger, "tombstones": state.tombstones, "quarantine": lake_config.quarantine}
    reports = []

    spent = spend(
        spark,
        monkeypatch,
        lake_config,
        {source: f"cdc {run_id} {source}" for source in COLUMNS},
        clean | shared,
        lambda: reports.append(
            apply_cdc(spark, lake_config, SCHEMA, manifest(*batch, run_id=run_id), ApplyOptions())
        ),
    )

    assert reports[0].ok, reports[0].failed
    assert {s: spent.jobs[s] for s in COLUMNS} == JOBS_PER_TABLE, spent
    assert spent.jobs[""] == JOBS_PER_RUN
    assert {s: spent.loads[clean[s]] for s in COLUMNS} == LOADS_PER_TABLE
    assert sum(spent.loads[t] for t in shared.values()) == LOADS_PER_RUN
    assert {s: spent.commits[s] for s in COLUMNS} == COMMITS_PER_TABLE
    assert {name: spent.commits[name] for name in shared} == SHARED_COMMITS_PER_RUN
    assert spent.files_read == FILES_READ
