"""The small I/O layer: read and list objects on S3 or a local disk, stage S3 inputs for a local Spark.

On AWS, Spark reads s3:// itself (Glue's S3 file system). Locally, Spark has no S3 connector, so
inputs on the local emulator's S3 are copied once into a staging folder first.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from lakehouse.base.names import s3_bucket_and_key

HEADER_PROBE_BYTES = 1 << 16


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int
    last_modified: datetime | None = None  # UTC, naive


def is_missing(error: BaseException) -> bool:
    """The error says the object does not exist (a local file, or an S3 key)."""
    if isinstance(error, FileNotFoundError):
        return True
    code = getattr(error, "response", {}).get("Error", {}).get("Code") if hasattr(error, "response") else None
    return code in ("NoSuchKey", "404", "NotFound")


class StorageError(RuntimeError):
    """Reading an object failed for a reason that is not in the object (access, throttling, network): the
    batch must wait and retry, never quarantine the file as bad data and count it applied."""


def is_storage_failure(error: BaseException) -> bool:
    """The error comes from where the object is kept, not from what it holds: an S3 error other than
    "no such key" (AccessDenied, a KMS key it may not use, SlowDown, InternalError), a connection or
    timeout, a local permission error. A file that is corrupt (bad gzip, no Parquet footer, not UTF-8)
    is not one of these."""
    if is_missing(error):
        return False
    from botocore.exceptions import BotoCoreError, ClientError  # boto3 ships with Glue and the local venv

    return isinstance(error, BotoCoreError | ClientError | PermissionError | ConnectionError | TimeoutError)


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def split_s3(uri: str) -> tuple[str, str]:
    """Bucket and key, the key exactly as written (names.s3_bucket_and_key: no URL parsing)."""
    return s3_bucket_and_key(uri)


def local_path(uri: str) -> Path:
    """A local path or `file://` URI as a path; the rest of the text is the path's own (`?`, `#`, `%`)."""
    return Path(uri.removeprefix("file://")) if uri.startswith("file://") else Path(uri)


@cache
def _s3_client(endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url) if endpoint_url else boto3.client("s3")


def read_bytes(uri: str, endpoint_url: str | None = None, max_bytes: int | None = None) -> bytes:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        extra = {"Range": f"bytes=0-{max_bytes - 1}"} if max_bytes else {}
        return _s3_client(endpoint_url).get_object(Bucket=bucket, Key=key, **extra)["Body"].read()
    with local_path(uri).open("rb") as handle:
        return handle.read(max_bytes) if max_bytes else handle.read()


def read_text(uri: str, endpoint_url: str | None = None) -> str:
    return read_bytes(uri, endpoint_url).decode("utf-8")


def read_json(uri: str, endpoint_url: str | None = None) -> Any:
    return json.loads(read_text(uri, endpoint_url))


def write_text(uri: str, text: str, endpoint_url: str | None = None) -> None:
    if is_s3(uri):
        bucket, key = split_s3(uri)
        _s3_client(endpoint_url).put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))
        return
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def list_objects(prefix_uri: str, endpoint_url: str | None = None) -> list[ObjectInfo]:
    """Every object below a folder (`<prefix>/`: never `<prefix>2/…`), sorted by key; the prefix is taken
    literally (no glob, no URL decoding)."""
    if is_s3(prefix_uri):
        bucket, prefix = split_s3(prefix_uri)
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        paginator = _s3_client(endpoint_url).get_paginator("list_objects_v2")
        found = [
            ObjectInfo(
                f"s3://{bucket}/{item['Key']}",
                item["Size"],
                item["LastModified"].astimezone(UTC).replace(tzinfo=None)
                if item.get("LastModified")
                else None,
            )
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])
        ]
    else:
        root = local_path(prefix_uri)
        found = []
        for folder, _, names in os.walk(root):  # no pattern: a folder's name is never a glob
            for name in names:
                path = Path(folder) / name
                if path.is_file():
                    status = path.stat()
                    modified = datetime.fromtimestamp(status.st_mtime, UTC).replace(tzinfo=None)
                    found.append(ObjectInfo(str(path), status.st_size, modified))
    return sorted(found, key=lambda info: info.uri)


def list_folders(prefix_uri: str, endpoint_url: str | None = None) -> list[str]:
    """The names of the folders right below a folder (S3: common prefixes with delimiter `/`), sorted."""
    if is_s3(prefix_uri):
        bucket, prefix = split_s3(prefix_uri)
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        paginator = _s3_client(endpoint_url).get_paginator("list_objects_v2")
        return sorted(
            item["Prefix"][len(prefix) :].rstrip("/")
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
            for item in page.get("CommonPrefixes", [])
        )
    root = local_path(prefix_uri)
    return sorted(entry.name for entry in os.scandir(root) if entry.is_dir()) if root.is_dir() else []


def list_grouped(
    prefix_uri: str, endpoint_url: str | None = None, *, delimiter: str = "", start_after: str = ""
) -> tuple[list[ObjectInfo], list[str]]:
    """S3's ListObjectsV2 as it is: the objects whose URI begins with `prefix_uri` exactly (no `/` added),
    after `start_after` (a URI; "" from the first), and, with a delimiter, the distinct beginnings up to its
    first occurrence after the prefix (`CommonPrefixes`, as URIs) instead of the objects below them. A local
    prefix is walked and grouped the same way."""
    if is_s3(prefix_uri):
        bucket, prefix = split_s3(prefix_uri)
        start = split_s3(start_after)[1] if start_after else ""
        paginator = _s3_client(endpoint_url).get_paginator("list_objects_v2")
        options = {"Bucket": bucket, "Prefix": prefix} | ({"Delimiter": delimiter} if delimiter else {})
        objects, groups = [], []
        for page in paginator.paginate(**options, **({"StartAfter": start} if start else {})):
            objects += [
                ObjectInfo(
                    f"s3://{bucket}/{item['Key']}",
                    item["Size"],
                    item["LastModified"].astimezone(UTC).replace(tzinfo=None),
                )
                for item in page.get("Contents", [])
            ]
            groups += [f"s3://{bucket}/{item['Prefix']}" for item in page.get("CommonPrefixes", [])]
        return objects, groups
    prefix, start = prefix_uri.removeprefix("file://"), start_after.removeprefix("file://")
    root = prefix if prefix.endswith("/") else os.path.dirname(prefix)
    found = [o for o in list_objects(root) if o.uri.startswith(prefix) and o.uri > start]
    if not delimiter:
        return found, []
    objects, grouped = [], set()
    for info in found:
        at = info.uri.find(delimiter, len(prefix))
        if at < 0:
            objects.append(info)
        else:
            grouped.add(info.uri[: at + len(delimiter)])
    return objects, sorted(grouped)


def stage_for_spark(uris: list[str], endpoint_url: str | None, staging_dir: str) -> dict[str, str]:
    """Map each input URI to a path Spark can read. Only S3 objects on a local emulator are copied; an
    object that does not exist is left out of the map (the caller tells missing from unreadable)."""
    if not endpoint_url:
        return {uri: uri for uri in uris}

    def stage(uri: str) -> tuple[str, str | None]:
        if not is_s3(uri):
            return uri, uri
        bucket, key = split_s3(uri)
        digest = hashlib.sha1(uri.encode()).hexdigest()[:12]
        target = Path(staging_dir).resolve() / bucket / f"{digest}-{Path(key).name}"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(target.suffix + ".part")
            try:
                _s3_client(endpoint_url).download_file(bucket, key, str(partial))
            except Exception as error:
                if is_missing(error):
                    return uri, None
                raise
            os.replace(partial, target)
        return uri, str(target)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return {uri: path for uri, path in pool.map(stage, uris) if path is not None}


def read_parquet_schema(uri: str, endpoint_url: str | None = None) -> Any:
    """A Parquet file's schema (pyarrow) from its footer alone: on S3, two ranged reads of its end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not is_s3(uri):
        return pq.read_schema(str(local_path(uri)))
    bucket, key = split_s3(uri)
    client = _s3_client(endpoint_url)
    end = client.get_object(Bucket=bucket, Key=key, Range="bytes=-8")["Body"].read()
    if len(end) != 8 or end[4:] != b"PAR1":
        raise ValueError("not a Parquet file (no PAR1 magic at its end)")
    footer = int.from_bytes(end[:4], "little") + 8
    tail = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{footer}")["Body"].read()
    return pq.read_schema(pa.BufferReader(tail))


def read_first_line(uri: str, endpoint_url: str | None = None) -> str:
    """The first line of a file (a DMS header row), without reading the whole file."""
    head = read_bytes(uri, endpoint_url, max_bytes=HEADER_PROBE_BYTES)
    if uri.endswith(".gz"):  # DMS CompressionType=GZIP: the start of the stream is enough
        head = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16).decompress(head, HEADER_PROBE_BYTES)
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    return line.decode("utf-8-sig")
