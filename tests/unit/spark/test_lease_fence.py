"""Every commit of a job run is fenced by the pipeline lease it was started under (lakehouse.io.fence): a run
whose execution lost the lease writes nothing, and every commit of a fenced run names its holder and epoch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load
from lakehouse.io import fence
from lakehouse.io.fence import LEASE_EPOCH, LEASE_HOLDER, LeaseFence, LeaseLostError, fenced
from lakehouse.io.iceberg import snapshot_properties
from lakehouse.jobs.cdc import main as cdc_main

from tests.support import DmsWriter, manifest, rows_of, schema_of

pytestmark = pytest.mark.spark

ORDERS = "shop.orders"
COLUMNS = ["id", "note", "amount"]
SCHEMA = schema_of({ORDERS: (["id"], [("id", "int"), ("note", "varchar(40)"), ("amount", "decimal(10,2)")])})
OLD = "arn:aws:states:eu-west-1:123456789012:execution:dev-pipeline:first"
NEW = "arn:aws:states:eu-west-1:123456789012:execution:dev-pipeline:second"


@pytest.fixture
def dms(tmp_path) -> DmsWriter:
    return DmsWriter(tmp_path / "raw" / "dms")


@pytest.fixture
def lease(tmp_path) -> Path:
    path = tmp_path / "locks" / "pipeline-lease.json"
    path.parent.mkdir()
    hold(path, OLD, 1)
    return path


@pytest.fixture(autouse=True)
def unfenced_after():
    yield
    fence.install(None)


def hold(path: Path, holder: str, epoch: int) -> None:
    path.write_text(json.dumps({"holder": holder, "epoch": epoch, "acquired_at": "2026-11-26T02:00:00Z"}))


def whole_state(spark, config) -> dict[str, list[tuple]]:
    """The replica, the ledger and the tombstones, every column, ordered; and the replica's commit count."""
    replica = config.clean_table("shop_orders")
    ledger = config.ledger
    tombstones = config.tombstones
    return {
        "rows": rows_of(spark, replica, [c for c in spark.table(replica).columns]),
        "ledger": rows_of(spark, ledger, ["source_table", "file_name", "run_id", "snapshot_id"]),
        "tombstones": rows_of(spark, tombstones, ["source_table", "key", "change_seq", "run_id"]),
        "snapshots": [
            spark.sql(f"SELECT count(*) AS n FROM {t}.snapshots").first()["n"] for t in (replica, ledger)
        ],
    }


def loaded_with_history(spark, config, dms) -> None:
    """A loaded table with a CDC batch applied (a delete: a tombstone; the ledger names the file)."""
    dms.load(ORDERS, COLUMNS, [(1, "a", 1), (2, "b", 2), (3, "c", 3)], snapshot_seq=10)
    assert full_load(spark, config, SCHEMA, str(dms.root)).ok
    first = dms.cdc(ORDERS, COLUMNS, [("D", (2, None, None)), ("U", (3, "c20", 20))], seqs=[20, 21])
    report = apply_cdc(spark, config, SCHEMA, manifest(first, run_id="b1"))
    assert report.ok, report.failed


def test_a_cdc_run_whose_lease_moved_on_before_its_commit_writes_nothing(spark, lake_config, dms, lease):
    """Given a table, its ledger and tombstones, and a CDC run started under the lease of execution 1
    (epoch 1; the run's start check passes), When execution 2 takes the lease over (epoch 2) before the run
    commits, Then the run raises LeaseLostError naming the new holder, and the table, the ledger and the
    tombstones are exactly as before (no data commit, no tombstone of its deletes, no ledger row)."""
    loaded_with_history(spark, lake_config, dms)
    before = whole_state(spark, lake_config)
    batch = dms.cdc(
        ORDERS,
        COLUMNS,
        [("D", (1, None, None)), ("U", (3, "c30", 30)), ("I", (4, "d", 4))],
        seqs=[30, 31, 32],
    )
    started = LeaseFence(str(lease), OLD, 1)
    started.check()  # the job entry's check at the start: the lease is still execution 1's
    fence.install(started)
    hold(lease, NEW, 2)

    with pytest.raises(LeaseLostError) as lost:
        apply_cdc(spark, lake_config, SCHEMA, manifest(batch, run_id="b2"))

    assert NEW in str(lost.value) and "epoch 2" in str(lost.value)
    assert whole_state(spark, lake_config) == before


def test_a_reload_whose_lease_moved_on_before_its_commit_writes_nothing(spark, lake_config, dms, lease):
    """Given a loaded table with CDC applied and new LOAD files (DMS reloaded it), and a reload run started
    under execution 1's lease, When the lease's epoch moves on (the same ARN can't come back, but an epoch
    is what changes on every takeover), Then the reload's REPLACE never commits: LeaseLostError, the table,
    ledger and tombstones as before."""
    loaded_with_history(spark, lake_config, dms)
    dms.load(ORDERS, COLUMNS, [(1, "a30", 100), (3, "c30", 300), (4, "d30", 4)], snapshot_seq=30)
    before = whole_state(spark, lake_config)
    fence.install(LeaseFence(str(lease), OLD, 1))
    hold(lease, OLD, 2)

    with pytest.raises(LeaseLostError):
        full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload")

    assert whole_state(spark, lake_config) == before


def test_with_the_lease_held_every_commit_names_the_holder_and_epoch(spark, lake_config, dms, lease):
    """Given a run fenced by execution 1's lease at epoch 7, When it loads, applies a batch with a delete and
    reloads, Then every commit it made (replica, ledger, tombstones) carries the holder and the epoch in its
    snapshot summary; a run without a lease (local use) commits without them."""
    hold(lease, OLD, 7)
    fence.install(LeaseFence(str(lease), OLD, 7))
    loaded_with_history(spark, lake_config, dms)
    dms.load(ORDERS, COLUMNS, [(1, "a30", 100)], snapshot_seq=30)
    assert full_load(spark, lake_config, SCHEMA, str(dms.root), reload=True, run_id="reload").ok

    for name in (lake_config.clean_table("shop_orders"), lake_config.ledger, lake_config.tombstones):
        summaries = list(snapshot_properties(spark, name))
        assert summaries and all(
            (s.get(LEASE_HOLDER), s.get(LEASE_EPOCH)) == (OLD, "7") for s in summaries
        ), (name, summaries)

    fence.install(None)
    later = dms.cdc(ORDERS, COLUMNS, [("U", (1, "local", 1))], seqs=[40])
    assert apply_cdc(spark, lake_config, SCHEMA, manifest(later, run_id="local")).ok
    newest = next(snapshot_properties(spark, lake_config.clean_table("shop_orders")))
    assert LEASE_HOLDER not in newest and LEASE_EPOCH not in newest


def test_the_cdc_job_of_an_execution_that_lost_the_lease_exits_non_zero_without_a_report(
    spark, lake_config, dms, lease, tmp_path
):
    """Given the CDC job started with the lease arguments of execution 1, When the lease is execution 2's,
    Then the job exits non-zero with the LeaseLost message, writes no report and commits nothing."""
    loaded_with_history(spark, lake_config, dms)
    before = whole_state(spark, lake_config)
    batch = dms.cdc(ORDERS, COLUMNS, [("U", (3, "c30", 30))], seqs=[30])
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(manifest(batch, run_id="b2").to_dict()))
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_dict()))
    hold(lease, NEW, 2)
    report = tmp_path / "report.json"
    arguments = [
        *("--warehouse", lake_config.warehouse, "--clean_database", lake_config.clean_database),
        *("--schema_file", str(schema_file), "--manifest", str(manifest_file), "--report_uri", str(report)),
        *("--lease_uri", str(lease), "--lease_holder", OLD, "--lease_epoch", "1"),
    ]

    with pytest.raises(SystemExit) as exited:
        fenced(cdc_main)(arguments)

    assert str(exited.value.code).startswith("LeaseLost:") and NEW in str(exited.value.code)
    assert not report.exists()
    assert whole_state(spark, lake_config) == before


@pytest.mark.parametrize("body", ["", "{not json", '["a list"]'])
def test_a_corrupt_lease_object_stops_the_commit_with_an_error_naming_it(lease, body):
    """Given a run fenced by the lease object, which someone overwrote with what is not a lease document,
    When the run checks before a commit, Then it loses the lease with an error naming the object (never a
    bare JSON error): nothing is committed."""
    lease.write_text(body)

    with pytest.raises(LeaseLostError, match=f"the pipeline lease {lease} is corrupt"):
        LeaseFence(str(lease), OLD, 1).check()
