"""Names: the DMS files the drain accepts (by the file contract, lake_contracts.dms_files), table names in S3
keys, object keys in EventBridge events."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import unquote, unquote_plus

from lake_contracts.dms_files import CDC_FILE, LOAD_FILE, trailing_date_folders

# Characters no schema or table name may hold (spark_jobs/lakehouse/base/names.py check_source_name).
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The qualified names the drain can write (schema and table as DMS names its folders: no `/`, no control
# characters), which reload requests and the reloads function accept.
TABLE_NAME = r"^[^/\x00-\x1f\x7f]+\.[^/\x00-\x1f\x7f]+$"
FileKind = Literal["load", "cdc"]


def dms_layout(key: str, raw_prefix: str) -> tuple[str, str, FileKind]:
    """(schema, table, kind) of a DMS file key below `raw_prefix`; ("", "", "cdc") when it is not one."""
    not_dms: tuple[str, str, FileKind] = ("", "", "cdc")
    parts = key.split("/")
    prefix = [p for p in raw_prefix.strip("/").split("/") if p]
    if parts[: len(prefix)] != prefix or not all(parts):
        return not_dms
    folders, name = parts[len(prefix) : -1], parts[-1]
    kind: FileKind
    if LOAD_FILE.match(name):
        kind = "load"
    elif CDC_FILE.match(name):
        kind = "cdc"
    else:
        return not_dms
    folders = folders[: len(folders) - trailing_date_folders(folders)]
    if len(folders) != 2:
        return not_dms
    return folders[0], folders[1], kind


def unusable_name(name: str) -> bool:
    """A schema or table name the jobs refuse (control characters, `.` or `..`)."""
    return bool(CONTROL.search(name)) or name in (".", "..")


_NAME_SAFE = re.compile(r"[A-Za-z0-9._-]")


def encode_name(name: str) -> str:
    """A table name as one S3 key segment, reversibly: every UTF-8 byte outside [A-Za-z0-9._-] as %XX
    (so `sales.a,b` is `sales.a%2Cb`, ` x` is `%20x`); `decode_name` gives the name back."""
    return "".join(c if _NAME_SAFE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in name)


def decode_name(segment: str) -> str:
    """The name `encode_name` encoded; UnicodeDecodeError for a segment that is not one."""
    return unquote(segment, errors="strict")


# How `detail.object.key` of an EventBridge "Object Created" event encodes the key (docs/CONTRACTS.md, "Object
# keys in events"). It is NOT the rule of S3 event *notifications* (form-URL-encoding: a space is `+`, a `+` is
# `%2B`, AWS's notification-content-structure page), and the sources disagree on what it is:
# - a recorded real event (S3 → EventBridge, 2023) carries `raw/health-check/2023-08-08T14:03:40.532432.zip`: the
#   `:` a notification encodes as `%3A` is left as is; a reported one has a space as `%20` and a `+` left as is,
#   i.e. percent-encoding of a URL path (RFC 3986), where `+` is a literal plus;
# - LocalStack 2026.3 (services/s3/notifications.py, EventBridgeNotifier) sends `urllib.parse.quote(key)`:
#   a space is `%20`, a `+` is `%2B`; percent-decoding restores the key;
# - moto 5.2 (s3/notifications.py) sends the key unencoded (a literal `%` stays `%`);
# - Powertools' S3EventBridgeNotificationObject.key applies unquote_plus, the notification rule, which turns a
#   literal `+` into a space (`plus+sign` recorded as `plus sign`). So the drain parses
#   the event with Powertools' model (S3EventNotificationEventBridgeModel, whose `key` field is the text as
#   sent) and decodes the key here, never through that property.
# So the key is percent-decoded with `+` kept literal (`decode_key`), which is right for AWS's path encoding
# and LocalStack's; and because the sources disagree, the drain does not trust one rule blindly: it asks the raw
# bucket which reading exists (`key_readings`, in this order), and a key that exists under none of them is a
# poison message (dead-letter queue, with the keys tried), never a batch entry naming a missing file.
def decode_key(encoded: str) -> str:
    """The object key of an EventBridge S3 event: percent-escapes decoded (UTF-8), `+` kept as a plus."""
    return unquote(encoded, errors="strict")


def key_readings(encoded: str) -> list[str]:
    """The keys an event's `detail.object.key` may stand for, most likely first: percent-decoded (AWS,
    LocalStack), as sent (moto sends it unencoded), form-decoded (the notification rule). Duplicates and
    readings that are not UTF-8 are left out."""
    readings: list[str] = []
    for decode in (decode_key, str, lambda text: unquote_plus(text, errors="strict")):
        try:
            key = decode(encoded)
        except UnicodeDecodeError:
            continue
        if key not in readings:
            readings.append(key)
    return readings
