"""Raw zone <-> ledger: no CDC file sits in the raw zone unapplied without someone knowing.

EventBridge delivery is not guaranteed, and queue and dead-letter retention end: a CDC file whose event
never reached the FIFO queue (or expired in it) would otherwise stay in the raw zone, applied never. The
audit lists the raw prefix and sorts every CDC file into exactly one of:

- `applied`: the ledger (`<clean_db>.dms_applied_files`) names it for its table (whole files the CDC run
  quarantined as unreadable are in the ledger too: processed, not lost);
- `quarantined`: the quarantine table holds it as a whole file (not in the ledger, already alarmed);
- `superseded`: written before its table's last (re)load had been written by DMS (`dms.load.ended-at`):
  the reload's rows hold its changes; the CDC job skips such a file when it is missing (apply_run.py);
- `pending`: named by a pending manifest (`<manifests>/pending/`): the next CDC run applies it;
- `moved_aside`: named by a manifest moved to `<manifests>/failed/` (alarmed when it was moved: counted,
  never re-enqueued, `tools.requeue_batch` re-sends it);
- `young`: it landed less than the grace period ago (its event may still be on its way or in the queue);
- `lost`: none of these. It is re-enqueued on the FIFO queue as the very message the EventBridge rule
  would have delivered, counted (`FilesRecovered`) and alarmed. Exactly once makes that safe: a file that
  was applied after all, or is still queued too, is skipped by the CDC run.

A file of a table the schema file does not know is judged the same way: re-enqueued, its CDC run stops that
table with what to do (SchemaOutOfDateError), as when its event had arrived. LOAD files are not CDC: a full
load reads them by listing. Keys that are no DMS file are not the pipeline's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlparse

from lake_contracts.dms_files import NotADmsFileError, parse_dms_key
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.base.config import LakeConfig
from lakehouse.base.schema import SchemaFile
from lakehouse.io.frames import literal_frame
from lakehouse.io.iceberg import LOAD_ENDED, LOAD_STARTED, table_exists, table_properties
from lakehouse.io.storage import is_missing, list_objects, read_json, split_s3

log = logging.getLogger(__name__)

Status = Literal["applied", "quarantined", "superseded", "pending", "moved_aside", "young", "lost"]
STATUSES: tuple[Status, ...] = (
    "applied",
    "quarantined",
    "superseded",
    "pending",
    "moved_aside",
    "young",
    "lost",
)
# The EventBridge rule's SqsParameters (template.yaml, CdcFileCreatedRule): one group, arrival order.
MESSAGE_GROUP_ID = "dms-cdc-files"
METRICS_NAMESPACE = "DmsIcebergLake"
METRICS_SERVICE = "raw-audit"
SAMPLE_SIZE = 20


@dataclass(frozen=True)
class RawFile:
    """A CDC file of the raw zone, as its key and its listing tell it."""

    uri: str
    table: str  # `<schema>.<table>` as DMS spells its folders
    name: str
    written_at: datetime  # UTC, naive: the time in its name (DMS's clock)
    size: int = 0
    landed_at: datetime | None = None  # UTC, naive: S3's LastModified

    @property
    def table_key(self) -> str:
        return self.table.lower()

    @property
    def age_from(self) -> datetime:
        """When the file can last have been announced: the later of its name's time and its landing."""
        return max(self.written_at, self.landed_at) if self.landed_at else self.written_at


def raw_cdc_files(objects: Iterable[tuple[str, int, datetime | None]]) -> list[RawFile]:
    """The CDC files among listed objects (uri, size, last modified): LOAD files and keys that are not DMS
    files are left out."""
    found = []
    for uri, size, modified in objects:
        try:
            file = parse_dms_key(uri, size)
        except NotADmsFileError:
            continue
        if file.is_full_load or file.written_at is None:
            continue
        found.append(RawFile(uri, file.qualified_table, file.name, file.written_at, size, modified))
    return sorted(found, key=lambda f: (f.written_at, f.uri))


def classify(
    raw_files: Sequence[RawFile],
    applied: Collection[tuple[str, str]],
    pending: Collection[str],
    moved_aside: Collection[str],
    quarantined: Collection[str],
    loaded_at: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
) -> list[tuple[RawFile, Status]]:
    """Each file with its status (module docstring), the first that holds in that order.

    `applied`: (lower-case `<schema>.<table>`, file name) of the ledger; `pending`, `moved_aside`,
    `quarantined`: file URIs; `loaded_at`: lower-case table -> when DMS had written its last (re)load;
    `now`: UTC (naive or aware)."""
    moment = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    ledger = {(table.lower(), name) for table, name in applied}
    sorted_out: list[tuple[RawFile, Status]] = []
    for file in raw_files:
        status: Status
        reloaded = loaded_at.get(file.table_key)
        if (file.table_key, file.name) in ledger:
            status = "applied"
        elif file.uri in quarantined:
            status = "quarantined"
        elif reloaded is not None and file.written_at <= reloaded:
            status = "superseded"
        elif file.uri in pending:
            status = "pending"
        elif file.uri in moved_aside:
            status = "moved_aside"
        elif moment - file.age_from < grace:
            status = "young"
        else:
            status = "lost"
        sorted_out.append((file, status))
    return sorted_out


def unapplied_files(
    raw_files: Sequence[RawFile],
    applied: Collection[tuple[str, str]],
    pending: Collection[str],
    now: datetime,
    grace: timedelta,
    *,
    moved_aside: Collection[str] = (),
    quarantined: Collection[str] = (),
    loaded_at: Mapping[str, datetime] | None = None,
) -> list[RawFile]:
    """The CDC files older than `grace` that nothing will apply: in no ledger, pending or moved-aside
    manifest, not quarantined, not superseded by a reload."""
    verdicts = classify(raw_files, applied, pending, moved_aside, quarantined, loaded_at or {}, now, grace)
    return [file for file, status in verdicts if status == "lost"]


# ------------------------------------------------------------------------------------- the re-sent event


def encode_key(key: str) -> str:
    """An object key as S3 event notifications carry it: URL-encoded. Every byte but unreserved characters
    and `/` is percent-escaped (a space is `%20`, never `+`), so both form decoding (`+` as space) and plain
    percent decoding give the key back."""
    return quote(key, safe="/")


def file_event(
    bucket: str,
    key: str,
    size: int,
    created: datetime,
    account: str = "000000000000",
    region: str = "us-east-1",
) -> dict[str, Any]:
    """The "Object Created" event EventBridge delivers for a new object (the FIFO queue's message body)."""
    moment = created.astimezone(UTC) if created.tzinfo else created.replace(tzinfo=UTC)
    identity = uuid.uuid5(uuid.NAMESPACE_URL, f"s3://{bucket}/{key}")
    return {
        "version": "0",
        "id": str(identity),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": account,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": encode_key(key), "size": size, "etag": "", "sequencer": ""},
            "request-id": "raw-audit",
            "requester": account,
            "reason": "PutObject",
        },
    }


def deduplication_id(uri: str, recovery_round: int) -> str:
    """The same file in the same recovery round is one message (an audit retried within SQS's five-minute
    deduplication window sends it once); the next round may send it again."""
    return hashlib.sha256(f"{uri}#{recovery_round}".encode()).hexdigest()


def recovery_round(now: datetime, grace: timedelta) -> int:
    """Rounds are grace periods since the epoch: a lost file is re-sent at most once per round."""
    moment = now if now.tzinfo else now.replace(tzinfo=UTC)
    return int(moment.timestamp() // max(grace.total_seconds(), 1))


def recovery_message(
    file: RawFile, queue_url: str, recovery: int, region: str = "us-east-1"
) -> dict[str, Any]:
    """`sqs.send_message` arguments that re-enqueue a lost file as its EventBridge event."""
    if not file.uri.startswith("s3://"):
        raise ValueError(f"{file.uri}: only an S3 object has an S3 event to re-send")
    bucket, key = split_s3(file.uri)
    account = _account_of(queue_url)
    event = file_event(bucket, key, file.size, file.landed_at or file.written_at, account, region)
    return {
        "QueueUrl": queue_url,
        "MessageBody": json.dumps(event),
        "MessageGroupId": MESSAGE_GROUP_ID,
        "MessageDeduplicationId": deduplication_id(file.uri, recovery),
        "MessageAttributes": {"recovered_by": {"DataType": "String", "StringValue": METRICS_SERVICE}},
    }


def _account_of(queue_url: str) -> str:
    """https://sqs.<region>.amazonaws.com/<account>/<name> (LocalStack's URLs have the same path)."""
    parts = [p for p in urlparse(queue_url).path.split("/") if p]
    return parts[0] if len(parts) == 2 and parts[0].isdigit() else "000000000000"


# ------------------------------------------------------------------------------------------------ I/O


@dataclass
class RawAuditReport:
    listed: int = 0  # CDC files in the raw zone
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    recovered_keys: list[str] = field(default_factory=list)  # a sample of the re-enqueued URIs
    moved_aside_keys: list[str] = field(default_factory=list)  # a sample
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            **{name: self.counts[name] for name in STATUSES if name != "lost"},
            "recovered": self.recovered,
            "recovered_keys": self.recovered_keys,
            "moved_aside_keys": self.moved_aside_keys,
            "recovery_round": self.recovery_round,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class LakeView:
    """What the lake knows about the raw zone's files, read once."""

    applied: set[tuple[str, str]]
    quarantined: set[str]
    loaded_at: dict[str, datetime]


def list_raw_files(raw_path: str, endpoint_url: str | None = None) -> list[RawFile]:
    return raw_cdc_files((o.uri, o.size, o.last_modified) for o in list_objects(raw_path, endpoint_url))


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
    ledger = config.clean_table(config.applied_files_table)
    applied: set[tuple[str, str]] = set()
    if files and table_exists(spark, ledger):
        wanted = literal_frame(
            spark,
            [{"table_key": f.table_key, "file_name": f.name} for f in files],
            "table_key string, file_name string",
        ).distinct()
        recorded = spark.table(ledger).select(F.lower("source_table").alias("table_key"), "file_name")
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
) -> RawAuditReport:
    """List the raw zone, re-enqueue every lost CDC file (module docstring) and publish `FilesRecovered`
    (namespace `metrics_namespace`, dimension service=raw-audit; None: not published). A file that can't
    be re-sent fails the audit (the job fails: alarmed) after the others were sent."""
    import time

    begun = time.monotonic()
    moment = now or datetime.now(UTC)
    files = list_raw_files(raw_path, config.s3_endpoint_url)
    prefix = manifest_prefix_uri.rstrip("/")
    pending = manifest_files(f"{prefix}/pending/", config.s3_endpoint_url)
    failed = manifest_files(f"{prefix}/failed/", config.s3_endpoint_url)
    view = read_lake_view(spark, config, files, _schema(config))
    verdicts = classify(files, view.applied, pending, failed, view.quarantined, view.loaded_at, moment, grace)
    report = RawAuditReport(listed=len(files), recovery_round=recovery_round(moment, grace))
    report.counts |= Counter(status for _, status in verdicts)
    lost = [file for file, status in verdicts if status == "lost"]
    report.moved_aside_keys = [f.uri for f, status in verdicts if status == "moved_aside"][:SAMPLE_SIZE]
    report.recovered_keys = [f.uri for f in lost[:SAMPLE_SIZE]]
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
    """`FilesRecovered` (alarmed) and the audit's other counts, dimension service=raw-audit. Published on
    every audit, zero included, so the dashboard shows the audit runs."""
    dimensions = [{"Name": "service", "Value": METRICS_SERVICE}]
    figures = {
        "FilesRecovered": report.recovered,
        "FilesPendingInFailedManifests": report.moved_aside,
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
    file of a table the schema file lacks, or a file nothing knows makes it False."""
    cutoff = moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
    files = [f for f in list_raw_files(raw_path, config.s3_endpoint_url) if f.written_at < cutoff]
    if not files:
        return True
    view = read_lake_view(spark, config, files, _schema(config))
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
