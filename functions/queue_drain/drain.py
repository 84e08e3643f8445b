"""Drain the FIFO queue of new DMS files into ONE manifest: the batch of one Glue CDC run.

In-flight messages of a FIFO message group block further receives of that group, and S3 events all
share one group, so a drain that kept its messages in flight could take only 10 files per run. The
hand-off is durable instead: each received page is first written into the pending manifest on S3,
and only then deleted from the queue. The manifest is the unit of retry: it stays under `pending/`
until the CDC run that applied it succeeds (then the acknowledge step moves it to `done/`); a crash
between the write and the delete at worst lists a file in two manifests, which the CDC job makes
harmless.

Because a page leaves the queue within the drain's own run, the drain receives with a visibility
timeout just longer than that run (not the queue's, which outlasts a CDC run): if the Lambda dies
mid-page, the group is blocked for minutes, not for a whole CDC timeout.

Every message is judged on its own: anything that is not an S3 "Object Created" event of a DMS file of
the raw bucket below the DMS prefix goes to the dead-letter queue with the reason, whatever is wrong
with it. Full-load (`LOAD*`) files never enter a manifest: those created before the full-load job started
were read by it; a later one means DMS reloaded its table, and is recorded as a reload request for that
table (`<prefix>/reloads/<schema>.<table>.json`) before its message is deleted.

A pending manifest whose run keeps failing is handed out at most `max_manifest_attempts` times; a corrupt
one (unreadable, not a manifest) is not handed out at all. Either is then moved to `failed/` and the drain
goes on with new files (`continue`) or refuses to (`stop`), as configured. Each move is reported to the
caller's `on_moved_aside` as it happens, so its alarm is raised even if the rest of the drain fails.

Every write is fenced (`DrainFence`, docs/CONTRACTS.md "Fencing the Lambdas' writes"): the lease, the newest
drain of the execution, and the manifest's version (If-None-Match / If-Match), so two drains at once cannot
both write and correctness needs no reserved concurrency.

The drain's parts, one module each: `drain_config` (its locations and limits), `file_events` (a message's DMS
file, or why it is poison), `queue_pages` (receiving, sorting, deleting and releasing a page),
`pending_manifests` (handing out, holding or moving aside an earlier batch), `full_load_marker`, `drain_fence`;
the reload requests are the shared store `lake_contracts.reload_requests`.
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from functools import partial
from typing import Any

from botocore.exceptions import ClientError
from drain_config import DrainLimits, Locations
from drain_fence import DrainFence, put_manifest, unfenced
from file_events import object_exists_in
from full_load_marker import full_load_started
from lake_contracts.documents import Manifest
from lake_contracts.layout import new_run_id
from lake_contracts.reload_requests import pending_reload_tables, record_load_files
from lake_contracts.s3 import LeaseLostError
from pending_manifests import (
    MovedAsideReporter,
    batch_result,
    list_pending_manifests,
    manifest_tables,
    resume_pending_manifest,
)
from queue_pages import RECEIVE_PAGE, delete_messages, receive_page, release_messages, sort_page


def _ignore_moved_aside(moved: dict[str, str]) -> None:
    """The default reporter: the result's `moved_aside` lists the moves of a drain that returns."""


def drain(
    s3: Any,
    sqs: Any,
    where: Locations,
    limits: DrainLimits,
    now: datetime | None = None,
    *,
    on_moved_aside: MovedAsideReporter = _ignore_moved_aside,
    fence: DrainFence | None = None,
) -> dict[str, Any]:
    """Return the batch to apply next: a pending manifest if one exists, else a new one drained from
    the queue (up to the limits; `caught_up` when the queue had no more), or `has_work: false` when the
    queue is empty. A pending manifest moved
    aside on the way is passed to `on_moved_aside` at once (and listed in the result's `moved_aside`).
    With a `fence` (the Lambda always passes one), each write first checks it (`DrainFence`)."""
    moment = now or datetime.now(UTC)
    moved_aside: list[dict[str, str]] = []
    check = fence.check if fence is not None else unfenced
    if fence is not None:
        fence.claim(moment)

    def report_moved_aside(moved: dict[str, str]) -> None:
        moved_aside.append(moved)
        on_moved_aside(moved)

    # A batch with files of a table DMS reloads waits for the reload (the reloads run before the next CDC
    # run, CheckReloads -> RunReload): the files the reload removed would fail it, and so move it aside
    # or, with OnStuckBatch=stop, stop the pipeline before the reload that fixes it could run.
    reloading = set(pending_reload_tables(s3, where.reload_requests))
    held: list[str] = []
    for key in list_pending_manifests(s3, where):
        resumed = resume_pending_manifest(s3, where, limits, key, report_moved_aside, check, reloading, held)
        if resumed is not None:
            extra = {
                "moved_aside": moved_aside,
                "reloads_pending": pending_reload_tables(s3, where.reload_requests),
            }
            return resumed | extra | ({"held_for_reload": held} if held else {})

    manifest = Manifest(new_run_id(moment), created_at=moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    key = where.pending_key(manifest.run_id)
    etag: str | None = None  # the manifest's version as this drain last wrote it
    loads_read_before = full_load_started(s3, where)
    put = partial(put_manifest, s3, where.artifacts_bucket)  # fenced: a lost condition is LeaseLostError
    exists = object_exists_in(s3) if where.raw_bucket else None
    deadline = time.monotonic() + limits.time_budget_seconds
    counts = {"poison_messages": 0, "skipped_full_load": 0, "duplicates": 0, "reload_files": 0}
    set_aside = 0  # corrupt reload requests replaced (kept under reloads-failed/)
    caught_up = False  # the queue gave no more, rather than a limit stopping the drain
    while len(manifest.files) < limits.max_files and manifest.total_bytes < limits.max_bytes:
        if time.monotonic() > deadline:
            break
        wanted = min(RECEIVE_PAGE, limits.max_files - len(manifest.files))
        page = receive_page(sqs, where, limits, wanted)
        if not page:
            caught_up = True
            break
        sorted_page = sort_page(sqs, where, page, manifest, limits, loads_read_before, exists)
        for name in counts:
            counts[name] += getattr(sorted_page, name)
        # Recorded durably first (reload requests, manifest); only then may the messages leave the queue.
        try:
            if sorted_page.reloads or sorted_page.files:
                check()
            set_aside += record_load_files(s3, where.reload_requests, sorted_page.reloads, moment, put)
            if sorted_page.files:
                etag = put_manifest(
                    s3,
                    where.artifacts_bucket,
                    key,
                    manifest.to_dict()
                    | {"files": [f.to_dict() for f in [*manifest.files, *sorted_page.files]]},
                    etag,
                )
                manifest.files.extend(sorted_page.files)
        except LeaseLostError:
            # fenced off: give the page back at once, so the lease holder's drain need not wait out its
            # visibility timeout (FIFO returns it first)
            # best effort: they reappear after their visibility timeout anyway
            with contextlib.suppress(ClientError):
                release_messages(sqs, where.queue_url, sorted_page.leaving + sorted_page.released)
            raise
        if sorted_page.leaving:
            delete_messages(sqs, where.queue_url, sorted_page.leaving)
        if sorted_page.released:
            release_messages(sqs, where.queue_url, sorted_page.released)
            break
    pending = pending_reload_tables(s3, where.reload_requests)
    extra = counts | {"moved_aside": moved_aside, "reloads_pending": pending}
    if set_aside:
        extra["reload_requests_set_aside"] = set_aside
    if manifest.files and manifest_tables(where, manifest) & set(pending):
        # Kept pending, not handed out, and not counted as an attempt: the drain after the reload gives it out.
        manifest.attempts = 0
        check()
        put_manifest(s3, where.artifacts_bucket, key, manifest.to_dict(), etag)
        held.append(key)
    if held:
        extra["held_for_reload"] = held
    if not manifest.files or key in held:
        return {"has_work": False, "file_count": 0} | extra
    # caught up: the loop may pace its next run (RunPaceSeconds); a batch cut by a limit is a backlog
    return batch_result(where, key, manifest, resumed=False, etag=etag) | extra | {"caught_up": caught_up}
