"""Raw zone <-> ledger: no CDC file sits in the raw zone unapplied without someone knowing.

EventBridge delivery is not guaranteed, and queue and dead-letter retention end: a CDC file whose event
never reached the FIFO queue (or expired in it) would otherwise stay in the raw zone, applied never. The
audit lists the raw prefix and sorts every CDC file into exactly one of:

- `applied`: the ledger (`<clean_db>_records.dms_applied_files`) names it for its table (whole files the CDC run
  quarantined as unreadable are in the ledger too: processed, not lost);
- `quarantined`: the quarantine table holds it as a whole file (not in the ledger, already alarmed);
- `superseded`: written before its table's last (re)load had been written by DMS (`dms.load.ended-at`):
  the reload's rows hold its changes; the CDC job skips such a file when it is missing (apply_run.py);
- `pending`: named by a pending manifest (`<manifests>/pending/`): the next CDC run applies it;
- `moved_aside`: named by a manifest moved to `<manifests>/failed/` (alarmed when it was moved: counted,
  never re-enqueued, `tools.requeue_batch` re-sends it);
- `young`: it landed less than the grace period ago (its event may still be on its way or in the queue);
- `beyond_retention`: none of these, and named before the re-send horizon (now less
  `TombstoneRetentionDays`, lake_contracts.resend_horizon: judged by the time in its name, when DMS wrote
  it): never re-sent, because a delete after its changes may have lost its tombstone and the row would come
  back. Counted (`FilesBeyondTombstoneRetention`, alarmed) and logged with what to do: reload its table (DMS
  ReloadTables) or let the reconcile repair it;
- `lost`: none of these. It is re-enqueued on the FIFO queue as the very message the EventBridge rule
  would have delivered, counted (`FilesRecovered`) and alarmed. Exactly once makes that safe: a file that
  was applied after all, or is still queued too, is skipped by the CDC run; the horizon keeps it from
  outliving the tombstones that guard it.

A file of a table the schema file does not know is judged the same way: re-enqueued, its CDC run stops that
table with what to do (SchemaOutOfDateError), as when its event had arrived. LOAD files are not CDC: a full
load reads them by listing. Keys that are no DMS file are not the pipeline's.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lake_contracts.dms_files import KnownTable, known_tables
from lake_contracts.resend_horizon import MIN_TOMBSTONE_RETENTION_DAYS, resend_horizon
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.audit.raw_files import STATUSES, RawFile, classify, list_raw_files
from lakehouse.audit.resend_event import recovery_message, recovery_round
from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.frames import literal_frame
from lakehouse.io.iceberg import LOAD_ENDED, LOAD_STARTED, table_exists, table_properties
from lakehouse.io.storage import is_missing, list_objects, read_json

log = logging.getLogger(__name__)

METRICS_NAMESPACE = "DmsIcebergLake"
METRICS_SERVICE = "raw-audit"
SAMPLE_SIZE = 20


# ------------------------------------------------------------------------------------------------ I/O


@dataclass
class RawAuditReport:
    listed: int = 0  # CDC files in the raw zone
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    recovered_keys: list[str] = field(default_factory=list)  # a sample of the re-enqueued URIs
    moved_aside_keys: list[str] = field(default_factory=list)  # a sample
    beyond_retention_keys: list[str] = field(default_factory=list)  # a sample of the lost files not re-sent
    resend_horizon: str | None = None  # files named before it are not re-sent (UTC)
    recovery_round: int = 0
    seconds: float = 0.0

    @property
    def applied(self) -> int:
        return self.counts["applied"]

    @property
    def pending(self) -> int:
        return self.counts["pending"]

    @property
    def moved_aside(self) -> int:
        return self.counts["moved_aside"]

    @property
    def recovered(self) -> int:
        return self.counts["lost"]

    @property
    def beyond_retention(self) -> int:
        return self.counts["beyond_retention"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            **{name: self.counts[name] for name in STATUSES if name != "lost"},
            "recovered": self.recovered,
            "recovered_keys": self.recovered_keys,
            "moved_aside_keys": self.moved_aside_keys,
            "beyond_retention_keys": self.beyond_retention_keys,
            "resend_horizon": self.resend_horizon,
            "recovery_round": self.recovery_round,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class LakeView:
    """What the lake knows about the raw zone's files, read once."""

    applied: set[tuple[str, str]]
    quarantined: set[str]
    loaded_at: dict[str, datetime]


def manifest_files(prefix_uri: str, endpoint_url: str | None = None) -> set[str]:
    """The file URIs every manifest below `prefix_uri` names (a corrupt one names none: it is alarmed)."""
    uris: set[str] = set()
    for info in list_objects(prefix_uri, endpoint_url):
        if not info.uri.endswith(".json"):
            continue
        try:
            document = read_json(info.uri, endpoint_url)
            uris |= {str(f["uri"]) for f in document.get("files", [])}
        except Exception as error:  # unreadable or not a manifest: the drain moves it aside, alarmed
            if is_missing(error):
                continue  # acknowledged or moved between the listing and the read
            log.warning("%s: not a readable manifest (%s: %s)", info.uri, type(error).__name__, error)
    return uris


def read_lake_view(
    spark: SparkSession, config: LakeConfig, files: Sequence[RawFile], schema: SchemaFile | None = None
) -> LakeView:
    """Which of `files` the ledger names, which the quarantine holds as whole files, and when each table
    (of the schema file) was last (re)loaded."""
    ledger = config.ledger
    applied: set[tuple[str, str]] = set()
    if files and table_exists(spark, ledger):
        wanted = literal_frame(
            spark,
            [{"table_key": f.table_key, "file_name": f.name} for f in files],
            "table_key string, file_name string",
        ).distinct()
        # CDC file names are their times: the range of the names asked about skips (by its column bounds)
        # every ledger data file of other times, so a recent listing reads the recent part of the ledger.
        names = [f.name for f in files]
        recorded = (
            spark.table(ledger)
            .where(F.col("file_name").between(min(names), max(names)))
            .select(F.lower("source_table").alias("table_key"), "file_name")
        )
        applied = {
            (row["table_key"], row["file_name"])
            for row in recorded.join(wanted, ["table_key", "file_name"], "left_semi").distinct().collect()
        }
    quarantined: set[str] = set()
    if files and table_exists(spark, config.quarantine):
        uris = literal_frame(spark, [{"source_uri": f.uri} for f in files], "source_uri string")
        quarantined = {
            row["source_uri"]
            for row in spark.table(config.quarantine)
            .where(F.col("record_number").isNull())
            .select("source_uri")
            .join(uris, ["source_uri"], "left_semi")
            .distinct()
            .collect()
        }
    loaded_at: dict[str, datetime] = {}
    tables = {f.table_key for f in files}
    for spec in schema.tables.values() if schema else []:
        if spec.qualified_name.lower() not in tables:
            continue
        table = config.clean_table(spec.iceberg_name)
        if not table_exists(spark, table):
            continue
        properties = table_properties(spark, table)
        value = properties.get(LOAD_ENDED) or properties.get(LOAD_STARTED)
        if value:
            moment = datetime.fromisoformat(value)
            loaded_at[spec.qualified_name.lower()] = (
                moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
            )
    return LakeView(applied, quarantined, loaded_at)


def _schema(config: LakeConfig) -> SchemaFile | None:
    if not config.schema_file:
        return None
    return SchemaFile.from_dict(read_json(config.schema_file, config.s3_endpoint_url))


def known_of(schema: SchemaFile | None) -> KnownTable | None:
    """How every reader of a DMS key tells a table named like a date folder from a date folder: by the
    schema file's tables (`dms_files.known_tables`), as the CDC run reads the keys it applies."""
    return known_tables(schema.tables) if schema is not None else None


def _client(service: str, config: LakeConfig) -> Any:
    import boto3

    if config.s3_endpoint_url:
        return boto3.client(service, endpoint_url=config.s3_endpoint_url)
    return boto3.client(service)


def audit_raw_zone(
    spark: SparkSession,
    config: LakeConfig,
    raw_path: str,
    manifest_prefix_uri: str,
    queue_url: str,
    grace: timedelta,
    sqs_client: Any = None,
    now: datetime | None = None,
    *,
    cloudwatch_client: Any = None,
    metrics_namespace: str | None = METRICS_NAMESPACE,
    tombstone_retention_days: float = MIN_TOMBSTONE_RETENTION_DAYS,
) -> RawAuditReport:
    """List the raw zone, re-enqueue every lost CDC file named at or after the re-send horizon (module
    docstring: `tombstone_retention_days` is the deployment's TombstoneRetentionDays) and publish
    `FilesRecovered` and `FilesBeyondTombstoneRetention` (namespace `metrics_namespace`, dimension
    service=raw-audit; None: not published). A file that can't be re-sent fails the audit (the job fails:
    alarmed) after the others were sent."""
    import time

    begun = time.monotonic()
    moment = now or datetime.now(UTC)
    schema = _schema(config)
    files = list_raw_files(raw_path, config.s3_endpoint_url, known_of(schema))
    prefix = manifest_prefix_uri.rstrip("/")
    pending = manifest_files(f"{prefix}/pending/", config.s3_endpoint_url)
    failed = manifest_files(f"{prefix}/failed/", config.s3_endpoint_url)
    view = read_lake_view(spark, config, files, schema)
    verdicts = classify(
        files,
        view.applied,
        pending,
        failed,
        view.quarantined,
        view.loaded_at,
        moment,
        grace,
        tombstone_retention_days,
    )
    horizon = resend_horizon(moment, tombstone_retention_days)
    report = RawAuditReport(listed=len(files), recovery_round=recovery_round(moment, grace))
    report.resend_horizon = horizon.isoformat()
    report.counts |= Counter(status for _, status in verdicts)
    lost = [file for file, status in verdicts if status == "lost"]
    too_old = [file for file, status in verdicts if status == "beyond_retention"]
    report.moved_aside_keys = [f.uri for f, status in verdicts if status == "moved_aside"][:SAMPLE_SIZE]
    report.recovered_keys = [f.uri for f in lost[:SAMPLE_SIZE]]
    report.beyond_retention_keys = [f.uri for f in too_old[:SAMPLE_SIZE]]
    if too_old:
        log.error(
            "%d CDC file(s) of the raw zone are in no ledger, manifest or queue and were written before %s "
            "(TombstoneRetentionDays %s ago): NOT re-sent, a delete after their changes may have lost its "
            "tombstone and the row would come back. Reload their tables (DMS ReloadTables) or let the "
            "reconcile repair them, e.g. %s",
            len(too_old),
            horizon,
            tombstone_retention_days,
            too_old[0].uri,
        )
    if lost:
        log.error(
            "%d CDC file(s) of the raw zone older than %s are in no ledger, manifest or queue: re-enqueued "
            "(round %d), e.g. %s",
            len(lost),
            grace,
            report.recovery_round,
            lost[0].uri,
        )
    if report.moved_aside:
        log.warning(
            "%d CDC file(s) are only in moved-aside manifests (alarmed when moved): python -m "
            "tools.requeue_batch re-sends them, e.g. %s",
            report.moved_aside,
            report.moved_aside_keys[0],
        )
    errors = _re_enqueue(lost, queue_url, report.recovery_round, sqs_client, config)
    if metrics_namespace:
        publish_metrics(report, cloudwatch_client or _client("cloudwatch", config), metrics_namespace)
    report.seconds = round(time.monotonic() - begun, 3)
    if errors:
        raise RuntimeError(
            f"{len(errors)} of {len(lost)} lost CDC file(s) could not be re-enqueued, e.g. {errors[0]}"
        )
    return report


def _re_enqueue(
    lost: Sequence[RawFile], queue_url: str, recovery: int, sqs_client: Any, config: LakeConfig
) -> list[str]:
    if not lost:
        return []
    sqs = sqs_client or _client("sqs", config)
    region = getattr(getattr(sqs, "meta", None), "region_name", None) or "us-east-1"
    errors = []
    for file in lost:  # one at a time, in the order DMS wrote them: FIFO keeps it
        try:
            sqs.send_message(**recovery_message(file, queue_url, recovery, region))
        except Exception as error:
            log.exception("re-enqueueing %s failed", file.uri)
            errors.append(f"{file.uri}: {type(error).__name__}: {error}")
    return errors


def publish_metrics(report: RawAuditReport, cloudwatch: Any, namespace: str = METRICS_NAMESPACE) -> None:
    """`FilesRecovered` and `FilesBeyondTombstoneRetention` (both alarmed) and the audit's other counts, dimension service=raw-audit. Published on
    every audit, zero included, so the dashboard shows the audit runs."""
    dimensions = [{"Name": "service", "Value": METRICS_SERVICE}]
    figures = {
        "FilesRecovered": report.recovered,
        "FilesPendingInFailedManifests": report.moved_aside,
        "FilesBeyondTombstoneRetention": report.beyond_retention,
        "RawFilesListed": report.listed,
    }
    cloudwatch.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {"MetricName": name, "Dimensions": dimensions, "Value": float(value), "Unit": "Count"}
            for name, value in figures.items()
        ],
    )


def applied_everything_before(
    spark: SparkSession, config: LakeConfig, raw_path: str, moment: datetime
) -> bool:
    """True when every CDC file DMS wrote before `moment` (by the time in its name, UTC) is applied,
    quarantined as a whole file, or superseded by a reload of its table. A pending or moved-aside file, a
    file of a table the schema file lacks, or a file nothing knows makes it False. Keys are read with the
    schema file's tables (`known_of`), as the CDC run wrote them into the ledger."""
    cutoff = moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
    schema = _schema(config)
    listed = list_raw_files(raw_path, config.s3_endpoint_url, known_of(schema))
    files = [f for f in listed if f.written_at < cutoff]
    if not files:
        return True
    view = read_lake_view(spark, config, files, schema)
    verdicts = classify(files, view.applied, (), (), view.quarantined, view.loaded_at, cutoff, timedelta(0))
    waiting = [f for f, status in verdicts if status not in ("applied", "quarantined", "superseded")]
    if waiting:
        log.info(
            "%d CDC file(s) written before %s are not applied yet, e.g. %s",
            len(waiting),
            moment,
            waiting[0].uri,
        )
    return not waiting
