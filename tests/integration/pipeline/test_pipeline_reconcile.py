"""Reconcile and raw zone audit on the deployed stack: the loop itself runs the raw zone audit and the source <-> lake reconcile
(every 30 s here), so a lost file event and the changes DMS never writes are found and repaired with no
one running anything by hand.

One stack, the embedded PostgreSQL source (also on TCP: the reconcile job reads it over JDBC, with the
credentials from a Secrets Manager secret as on AWS), the local DMS, RepairMode=reload."""

import json
import socket
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote_plus

import pytest

from localaws import replication, sam_app
from localaws.pipeline_run import LocalPipeline
from tests.integration.pipeline.test_pipeline_end_to_end import assert_clean_equals_source, wait_for

pytestmark = pytest.mark.integration

TRUNCATED = "time_dim"  # rebuilt by TRUNCATE + INSERT of 9 rows in 10: DMS drops the TRUNCATE
EMPTIED = "customer"  # TRUNCATEd and left empty: DMS's reload of it would write no LOAD file
RENUMBERED = "customer_address"  # one row's primary key moved
LOST = "item"  # a change whose file event never reaches the queue


@dataclass(frozen=True)
class WithoutKeyBeforeImages(replication.ReplicationSettings):
    """A task without the pk-only before-image columns (`BI_<key>`): an UPDATE that moves a primary key
    reaches the lake as an upsert of the new key only, the old key stays. AWS DMS does worse from a
    PostgreSQL source (it ignores such an update: the old key stays and the new one never comes); the local
    DMS writes the move, so this is how the test loses it. Either way only a comparison with the source
    can see it."""

    def table_mappings(self) -> dict[str, Any]:
        mappings = super().table_mappings()
        rules = [r for r in mappings["rules"] if r.get("rule-action") != "add-before-image-columns"]
        return {"rules": rules}


def free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def reports(pipeline: LocalPipeline, prefix: str) -> list[dict[str, Any]]:
    """The run reports `manifests/reports/<prefix>-<time the loop started the run>.json`, oldest first."""
    s3 = pipeline.aws("s3")
    listed = s3.list_objects_v2(Bucket=pipeline.app.artifacts_bucket, Prefix=f"manifests/reports/{prefix}-")
    found = []
    for item in sorted(listed.get("Contents", []), key=lambda o: o["Key"]):
        body = s3.get_object(Bucket=pipeline.app.artifacts_bucket, Key=item["Key"])["Body"].read()
        report = json.loads(body)
        if "tables" in report or "recovered_keys" in report:  # not reconcile-rotation.json
            found.append(report | {"_key": item["Key"]})
    return found


def raw_cdc_files(pipeline: LocalPipeline, table: str) -> set[str]:
    listed = pipeline.aws("s3").list_objects_v2(
        Bucket=pipeline.app.raw_bucket, Prefix=f"dms/{pipeline.source_schema}/{table}/"
    )
    return {o["Key"] for o in listed.get("Contents", []) if "LOAD" not in o["Key"].rsplit("/", 1)[-1]}


def by_table(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["table"].split(".", 1)[1]: t for t in report["tables"]}


def metric_maximum(pipeline: LocalPipeline, name: str, service: str) -> float:
    cloudwatch = pipeline.aws("cloudwatch")
    now = time.time()
    points = cloudwatch.get_metric_statistics(
        Namespace="DmsIcebergLake",
        MetricName=name,
        Dimensions=[{"Name": "service", "Value": service}],
        StartTime=now - 3600,
        EndTime=now + 60,
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    return max((p["Maximum"] for p in points), default=-1.0)


def lake_keys(pipeline: LocalPipeline, table: str, key: str) -> list[int]:
    frame = pipeline.spark().table(f"local_glue.{pipeline.app.clean_database}.public_{table}")
    return [row[0] for row in frame.select(key).orderBy(key).collect()]


def source_keys(pipeline: LocalPipeline, table: str, key: str) -> list[int]:
    return [row[0] for row in pipeline.source_rows(f"SELECT {key} FROM {table} ORDER BY {key}")]


@dataclass
class ProbeQueue:
    """A queue of the test's own that a rule can target: the raw keys of the S3 events it received."""

    pipeline: LocalPipeline
    url: str
    arn: str
    keys: set[str] = field(default_factory=set)

    def keys_seen(self) -> set[str]:
        received = self.pipeline.aws("sqs").receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0
        )
        for message in received.get("Messages", []):
            self.keys.add(unquote_plus(json.loads(message["Body"])["detail"]["object"]["key"]))
        return self.keys


def probe_queue(pipeline: LocalPipeline) -> ProbeQueue:
    sqs = pipeline.aws("sqs")
    url = sqs.create_queue(QueueName=f"probe-{pipeline.settings.name}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return ProbeQueue(pipeline, url, arn)


def test_the_loop_recovers_a_lost_file_event_and_finds_and_repairs_what_dms_never_wrote(
    make_pipeline, pipeline_endpoint
) -> None:
    """Given the stack deployed with ReconcileEveryMinutes=0.5, DmsSettleSeconds=30, RawAuditEveryMinutes=0.5
    (grace 1 minute), RepairMode=reload, LoopWaitSeconds=5 and the source's secret, and the pipeline
    caught up with its source,
    When a change's file event never reaches the queue (the EventBridge rule had no target when the file
    landed), the source's time_dim is rebuilt by TRUNCATE + INSERT without a tenth of its rows, customer is
    TRUNCATEd (left empty), and a customer_address row's key is moved,
    Then, with nothing run by hand: the loop's raw audit re-enqueues the lost file (FilesRecovered) and it is
    applied; the loop's reconcile reports exactly the dropped time_dim keys, every customer key and the old
    customer_address key as extra (DivergedRows published, sample keys in dms_divergence; item, whose file
    was lost, is never reported: its difference was in flight), asks DMS to reload time_dim and
    customer_address and empties customer itself (the source's statistics count no row either), the loop
    applies the reloads, a later reconcile finds every table equal, and every clean table equals its source."""
    port = free_port()
    secrets = sam_app.client("secretsmanager", pipeline_endpoint)
    secret = {"username": "postgres", "host": "127.0.0.1", "port": port, "dbname": "postgres"}
    secret_arn = secrets.create_secret(
        Name=f"source-{uuid.uuid4().hex[:8]}", SecretString=json.dumps(secret)
    )["ARN"]
    pipeline = make_pipeline(
        parameters={
            # a fraction of a minute, as a user checking a small source tightly sets it: the test waits for a
            # sighting, its confirmation and a run after the reload, three periods (whole minutes: 74 s apart)
            "ReconcileEveryMinutes": "0.5",
            # S: a difference counts once a run S after the one that saw it still sees it, and only over lake rows
            # committed S before that sighting. The local DMS writes a file every second (AWS: CdcMaxBatchInterval,
            # 60 s); 30 s, the demo's, leaves it a margin on a loaded machine and lets the next reconcile (a
            # period, 30 s, plus the pass that finds it due) confirm what one saw
            "DmsSettleSeconds": "30",
            "RawAuditEveryMinutes": "0.5",
            # the grace stays a minute: a smaller one would re-send files whose events merely wait in the queue
            "RawAuditGraceMinutes": "1",
            "RepairMode": "reload",
            "ReconcileSourceSecretArn": secret_arn,
            # an idle pass every 5 s (the other tests' 3 s) finds each check due within a sixth of its period;
            # 15 s left each of the test's three sightings up to 15 s late for no CPU saved (measured alone:
            # 225 s with 15, 179 s with 5, 119.7 and 122.5 CPU-s)
            "LoopWaitSeconds": "5",
        }
    )
    assert pipeline.postgres is not None
    pipeline.source_db = pipeline.postgres.start(tcp_port=port).source  # JDBC needs TCP; same data
    base = pipeline.settings.replication
    pipeline.settings.replication = WithoutKeyBeforeImages(
        **{f.name: getattr(base, f.name) for f in fields(base)}
    )
    pipeline.start_replication()
    pipeline.start_execution()
    pipeline.wait_until_applied(timeout=1200)  # a loaded machine: the full load alone took 7 minutes once

    # 1. a file event lost: the rule that turns S3's events into queue messages has no target for a moment (only
    # a probe queue of the test's, which tells when the file's event has passed the rule)
    events = pipeline.aws("events")
    rule = pipeline.app.resources["CdcFileCreatedRule"].split("|")[-1]
    targets = events.list_targets_by_rule(Rule=rule)["Targets"]
    probe = probe_queue(pipeline)
    events.put_targets(Rule=rule, Targets=[{"Id": "probe", "Arn": probe.arn}])
    events.remove_targets(Rule=rule, Ids=[t["Id"] for t in targets])
    before = raw_cdc_files(pipeline, LOST)
    assert (
        pipeline.execute_sql(f"UPDATE {LOST} SET i_current_price = i_current_price + 1 WHERE i_item_sk <= 3")
        == 3
    )
    landed = wait_for(lambda: raw_cdc_files(pipeline, LOST) - before, 120, 0.5)
    assert landed, "the local DMS wrote no CDC file for the update"
    assert wait_for(lambda: landed <= probe.keys_seen(), 120, 0.5), (landed, probe.keys)
    events.put_targets(Rule=rule, Targets=targets)
    events.remove_targets(Rule=rule, Ids=["probe"])

    # 2. what DMS never writes, in one transaction: a TRUNCATE (the rows inserted again arrive, the dropped
    # ones stay in the lake) and a primary-key move (the lake gets the new key, keeps the old one)
    # every tenth key by position (the keys are seconds of the day at whole minutes: `k % 10` would drop all)
    dropped = lake_keys(pipeline, TRUNCATED, "t_time_sk")[::10]
    customers = lake_keys(pipeline, EMPTIED, "c_customer_sk")
    old_key = pipeline.source_rows(f"SELECT min(ca_address_sk) FROM {RENUMBERED}")[0][0]
    with pipeline.source_db.connect() as db:
        db.begin()
        db.execute(
            f"CREATE TEMP TABLE kept ON COMMIT DROP AS SELECT * FROM {TRUNCATED} WHERE NOT t_time_sk = ANY(?)",
            (dropped,),
        )
        db.execute(f"TRUNCATE {TRUNCATED}")
        db.execute(f"INSERT INTO {TRUNCATED} SELECT * FROM kept")
        db.execute(f"TRUNCATE {EMPTIED}")
        moved = db.execute(
            f"UPDATE {RENUMBERED} SET ca_address_sk = ? WHERE ca_address_sk = ?",
            (old_key + 1_000_000, old_key),
        ).rowcount
        db.commit()
    assert dropped and customers and moved == 1

    # the loop's raw audit re-sends the lost file, the next CDC run applies it
    recovered = wait_for(
        lambda: [
            r
            for r in reports(pipeline, "raw-audit")
            if set(r["recovered_keys"]) & {f"s3://{pipeline.app.raw_bucket}/{k}" for k in landed}
        ],
        900,
    )
    assert recovered, reports(pipeline, "raw-audit")
    assert metric_maximum(pipeline, "FilesRecovered", "raw-audit") >= len(landed)

    # the loop's reconcile finds each divergence and repairs it by reloading its table. One run may confirm both,
    # or one table before the other (each is confirmed by the first run at least DmsSettleSeconds after one that saw
    # it): each table is judged by the first run that found it diverged.
    def diverged_tables(report: dict[str, Any]) -> set[str]:
        return {name for name, t in by_table(report).items() if t["missing"] or t["extra"] or t["differing"]}

    def first_finding() -> dict[str, dict[str, Any]] | None:
        firsts: dict[str, dict[str, Any]] = {}
        for report in reports(pipeline, "reconcile"):
            for name in diverged_tables(report) & {TRUNCATED, RENUMBERED, EMPTIED}:
                firsts.setdefault(name, report)
        return firsts if set(firsts) == {TRUNCATED, RENUMBERED, EMPTIED} else None

    found = wait_for(first_finding, 1200)  # three pytest workers on 2 cores: runs are slow
    assert found, reports(pipeline, "reconcile")
    truncated, renumbered = by_table(found[TRUNCATED])[TRUNCATED], by_table(found[RENUMBERED])[RENUMBERED]
    assert (truncated["missing"], truncated["extra"], truncated["differing"]) == (0, len(dropped), 0)
    assert truncated["samples"]["extra"] == [{"t_time_sk": k} for k in dropped[:100]]
    assert (renumbered["missing"], renumbered["extra"], renumbered["differing"]) == (0, 1, 0)
    assert renumbered["samples"] == {"extra": [{"ca_address_sk": old_key}]}
    assert truncated["repaired"] and renumbered["repaired"]
    emptied = by_table(found[EMPTIED])[EMPTIED]
    assert (emptied["missing"], emptied["extra"], emptied["differing"]) == (0, len(customers), 0)
    assert (emptied["source_empty"], emptied["emptied"], emptied["repaired"]) == (True, True, True)
    assert not truncated["emptied"] and not renumbered["emptied"]
    first = max(found.values(), key=lambda r: r["_key"])
    assert all(not t["error"] for r in found.values() for t in r["tables"]), found
    # the alarm's metric: one run's diverged rows (both tables' when one run found both)
    both_at_once = found[TRUNCATED] is found[RENUMBERED]
    assert metric_maximum(pipeline, "DivergedRows", "reconcile") >= len(dropped) + (1 if both_at_once else 0)

    # the repair: a later reconcile finds every table equal, and the lake equals the source
    def equal_after(report: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            r
            for r in reports(pipeline, "reconcile")
            if r["_key"] > report["_key"]
            and not r["totals"]["diverged_tables"]
            and not r["totals"]["in_flight"]
            and len(r["tables"]) == len(replication.SOURCE_TABLES)
        ]

    # never a false divergence: no run reported another table (item's lost change was in flight until applied)
    assert all(diverged_tables(r) <= {TRUNCATED, RENUMBERED, EMPTIED} for r in reports(pipeline, "reconcile"))
    assert wait_for(lambda: equal_after(first), 1200), reports(pipeline, "reconcile")
    # never a false divergence: no run reported another table (item's lost change was in flight until applied)
    assert all(diverged_tables(r) <= {TRUNCATED, RENUMBERED, EMPTIED} for r in reports(pipeline, "reconcile"))
    pipeline.wait_until_applied(timeout=600)
    assert_clean_equals_source(pipeline)
    for table, key in ((TRUNCATED, "t_time_sk"), (RENUMBERED, "ca_address_sk")):
        assert lake_keys(pipeline, table, key) == source_keys(pipeline, table, key), table
    assert (
        lake_keys(pipeline, EMPTIED, "c_customer_sk") == source_keys(pipeline, EMPTIED, "c_customer_sk") == []
    )

    divergence = pipeline.spark().table(pipeline.lake_config().divergence)
    finding_run = {f"public.{name}": report["run_id"] for name, report in found.items()}
    rows = [
        (r["source_table"], r["kind"], json.loads(r["key"]))
        for r in divergence.orderBy("source_table", "key").collect()
        if finding_run.get(r["source_table"]) == r["run_id"]
    ]
    assert sorted(rows, key=lambda r: (r[0], list(r[2].values()))) == [
        *[(f"public.{EMPTIED}", "extra", {"c_customer_sk": k}) for k in customers[:100]],
        (f"public.{RENUMBERED}", "extra", {"ca_address_sk": old_key}),
        *[(f"public.{TRUNCATED}", "extra", {"t_time_sk": k}) for k in dropped[:100]],
    ]
