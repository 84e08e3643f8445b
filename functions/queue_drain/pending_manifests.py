"""The pending manifests (`pending/`): batches drained earlier and not yet applied, handed out again before
any new files. A manifest whose run keeps failing is handed out at most `max_manifest_attempts` times; a
corrupt one (unreadable, not a manifest) is not handed out at all. Either is then moved to `failed/` and the
drain goes on with new files (`continue`) or refuses to (`stop`, StuckBatchError), as configured; each move is
reported to a MovedAsideReporter as it happens. A manifest with files of a table being reloaded is held."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from drain_config import DrainLimits, Locations
from drain_fence import put_manifest, unfenced
from lake_contracts.dms_files import LOAD_FILE
from lake_contracts.documents import CorruptManifestError, Manifest, read_manifest
from lake_contracts.layout import run_id_time
from lake_contracts.names import dms_layout
from lake_contracts.resend_horizon import oldest_cdc_file
from lake_contracts.s3 import LeaseLostError, delete_if_unchanged, is_missing
from lake_contracts.times import aware, parse_time

# Called with {"manifest_key", "failed_key", "reason"} right after a pending manifest was moved to failed/.
MovedAsideReporter = Callable[[dict[str, str]], None]


class StuckBatchError(RuntimeError):
    """A pending manifest failed too often (or is corrupt) and the policy is to stop."""


def list_pending_manifests(s3: Any, where: Locations) -> list[str]:
    """Manifests left pending by a failed run or a stopped execution: they go first, oldest first."""
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=where.artifacts_bucket, Prefix=where.pending_prefix
    ):
        keys += [item["Key"] for item in page.get("Contents", []) if item["Key"].endswith(".json")]
    return sorted(keys)


def resume_pending_manifest(
    s3: Any,
    where: Locations,
    limits: DrainLimits,
    key: str,
    report_moved_aside: MovedAsideReporter,
    check: Callable[[], None] = unfenced,
    reloading: set[str] | None = None,
    held: list[str] | None = None,
) -> dict[str, Any] | None:
    """Hand out a pending manifest again (one more attempt), or move it aside when it is corrupt or was
    handed out `max_manifest_attempts` times (None: look at the next one). A manifest with files of a table
    being reloaded (in `reloading`, or its files gone and LOAD files newer than it) is held: left pending as
    it is, its key added to `held` (None)."""
    try:
        current = s3.get_object(Bucket=where.artifacts_bucket, Key=key)
        body, etag = current["Body"].read(), str(current["ETag"])
    except ClientError as error:
        if is_missing(error):
            return None  # acknowledged meanwhile
        raise
    try:
        manifest = read_manifest(body, key)
    except CorruptManifestError as error:
        reason = f"corrupt manifest: {error}"
    else:
        tables = manifest_tables(where, manifest)
        waited = set(manifest.waited_for_reload)
        gone = _reloaded_since(s3, where, manifest, tables - waited) if manifest.attempts else set()
        if tables & (reloading or set()) or gone:
            # Its failures so far were the reload's (files it removed): they don't count. `gone` is asked
            # once: the drain now reads the queue, where the reload's LOAD files are announced.
            if gone or manifest.attempts:
                manifest.attempts, manifest.waited_for_reload = 0, sorted(waited | gone)
                check()
                put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
            if held is not None:
                held.append(key)
            return None
        if manifest.attempts < limits.max_manifest_attempts:
            manifest.attempts += 1
            check()
            etag = put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
            return batch_result(where, key, manifest, resumed=True, etag=etag)
        reason = f"its CDC run failed {manifest.attempts} times"
    if limits.on_stuck_batch == "stop":
        raise StuckBatchError(f"s3://{where.artifacts_bucket}/{key}: {reason}; policy is to stop")
    check()
    target = where.failed_key(key.rsplit("/", 1)[-1])
    s3.put_object(
        Bucket=where.artifacts_bucket,
        Key=target,
        Body=body,
        Metadata={"reason": reason[:1000].encode("ascii", "replace").decode()},
    )
    if not delete_if_unchanged(s3, where.artifacts_bucket, key, etag):
        raise LeaseLostError(f"s3://{where.artifacts_bucket}/{key} changed meanwhile: not deleted")
    report_moved_aside({"manifest_key": key, "failed_key": target, "reason": reason})
    return None


def manifest_tables(where: Locations, manifest: Manifest) -> set[str]:
    """The tables (`schema.table`, as reload requests name them) of a manifest's files."""
    tables = set()
    for entry in manifest.files:
        uri = entry.uri
        key = uri.split("/", 3)[3] if uri.startswith("s3://") and uri.count("/") >= 3 else ""
        schema, table, _ = dms_layout(key, where.raw_prefix)
        if schema:
            tables.add(f"{schema}.{table}")
    return tables


def _reloaded_since(s3: Any, where: Locations, manifest: Manifest, tables: set[str]) -> set[str]:
    """Of `tables`, those with a file of the manifest gone from the raw zone and a LOAD file written after
    the manifest was: DMS reloads them (it empties a reloaded table's folder, then writes LOAD files), and
    their reload requests are still in the queue. Only with the raw bucket known (the Lambda's)."""
    if not where.raw_bucket:
        return set()
    try:
        created = parse_time(manifest.created_at)
    except ValueError:
        return set()
    if created is None:
        return set()
    uris = manifest.uris
    found = set()
    for table in sorted(tables):
        schema, name = table.split(".", 1)
        prefix = f"{where.raw_prefix.strip('/')}/{schema}/{name}/"
        present: set[str] = set()
        reloaded = False
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=where.raw_bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                present.add(f"s3://{where.raw_bucket}/{item['Key']}")
                if LOAD_FILE.match(item["Key"].rsplit("/", 1)[-1]) and aware(item["LastModified"]) > created:
                    reloaded = True
        mine = {u for u in uris if u.startswith(f"s3://{where.raw_bucket}/{prefix}")}
        if reloaded and mine - present:
            found.add(table)
    return found


def batch_result(
    where: Locations, key: str, manifest: Manifest, resumed: bool, etag: str | None
) -> dict[str, Any]:
    return {
        "manifest_etag": etag,  # the version handed out: the acknowledge retires exactly that one
        "has_work": True,
        "resumed": resumed,
        "run_id": manifest.run_id,
        "manifest_uri": f"s3://{where.artifacts_bucket}/{key}",
        "manifest_key": key,
        "file_count": len(manifest.files),
        "total_bytes": manifest.total_bytes,
        "attempt": manifest.attempts,
    }


def moved_aside_since(s3: Any, bucket: str, key: str) -> datetime | None:
    """What a moved-aside batch's age counts from, by the rule `tools.requeue_batch` refuses it by: its
    oldest timestamp-named file's time (lake_contracts.resend_horizon), else when it was drained (its run id);
    None when neither is known."""
    drained = run_id_time(key.rsplit("/", 1)[-1].removesuffix(".json"))
    try:
        document = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        files = document.get("files", [])
        oldest = oldest_cdc_file(str(f["uri"]) for f in files if isinstance(f, dict) and "uri" in f)
    except (ClientError, ValueError, TypeError, AttributeError):
        oldest = None  # gone since the listing, or corrupt: its drain time
    return aware(oldest[1]) if oldest is not None else drained


def oldest_moved_aside_days(s3: Any, where: Locations, now: datetime) -> float:
    """Age in days of the oldest batch moved aside (`failed/`), counted from its oldest file's time (else its
    drain: `moved_aside_since`): its changes are at least that old. Requeued after `TombstoneRetentionDays`
    of that, its deletes would be older than the tombstones that keep a deleted row from coming back, and
    the requeue refuses it; 0 when there is none."""
    oldest: datetime | None = None
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=where.artifacts_bucket, Prefix=where.failed_key("")
    ):
        for item in page.get("Contents", []):
            since = moved_aside_since(s3, where.artifacts_bucket, item["Key"])
            if since is not None and (oldest is None or since < oldest):
                oldest = since
    return 0.0 if oldest is None else max((now - oldest).total_seconds() / 86400, 0.0)
