"""Comparing one table: segment sums on both sides, the differing segments bisected down to rows, and the
recheck that tells a divergence from a change in flight."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from lakehouse.audit.raw_zone import applied_everything_before
from lakehouse.base.config import LakeConfig
from lakehouse.base.names import table_folder
from lakehouse.base.schema import TableSpec
from lakehouse.reconcile.lake import LakeSide
from lakehouse.reconcile.plan import HASH_BITS, Level, ReconcileOptions, SourceSide, TablePlan, x_ranges

log = logging.getLogger(__name__)

Difference = tuple[str, tuple[str, ...], int | None]  # kind, key texts, the source's row hash


def diff_rows(
    source: dict[tuple[str, ...], int], lake: dict[tuple[str, ...], int]
) -> dict[tuple[str, ...], Difference]:
    """Keys whose rows differ: missing from the lake, extra in the lake, or with other values."""
    found: dict[tuple[str, ...], Difference] = {}
    for key, h in source.items():
        if key not in lake:
            found[key] = ("missing", key, h)
        elif lake[key] != h:
            found[key] = ("differing", key, h)
    for key in lake.keys() - source.keys():
        found[key] = ("extra", key, None)
    return found


@dataclass
class Comparison:
    differences: dict[tuple[str, ...], Difference]
    leaves: list[Level]  # the leaf segments the differences are in (to read again for the recheck)
    segments: int
    levels: int
    source_rows: int = 0  # the source's rows at the first level (all its keys)
    # when the source read that found each difference had ended: its sighting's moment, not the comparison's end
    read_at: dict[tuple[str, ...], datetime] = field(default_factory=dict)


def first_level(
    plan: TablePlan, source: SourceSide, lake: LakeSide, options: ReconcileOptions
) -> tuple[Level, int] | None:
    """Level 0: lo and the shift that gives segments of about `segment_rows` rows. None: both empty."""
    if plan.integer_key:
        bounds = [b for b in (source.bounds(plan), lake.bounds(plan)) if b is not None]
        if not bounds:
            return None
        lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
        span = hi - lo + 1
        if span >= 1 << 62:
            raise ValueError("key span too wide for range segments")
    else:
        lo, span = 0, 1 << HASH_BITS
    rows = max(1, lake.estimated_rows(plan))
    wanted = max(1, math.ceil(rows / options.segment_rows))
    shift = max(0, math.ceil(math.log2(max(1, span / wanted))))
    if plan.integer_key:
        return Level(shift, lo, ((0, span - 1),)), shift
    return Level(shift, lo, None), shift


def compare_table(
    plan: TablePlan, source: SourceSide, lake: LakeSide, options: ReconcileOptions
) -> Comparison:
    """Segment sums on both sides, bisecting the differing segments down to rows."""
    first = first_level(plan, source, lake, options)
    if first is None:
        return Comparison({}, [], 0, 0)
    level, _ = first
    step = int(math.log2(options.bisect_factor))
    parent_shift: int | None = None
    differences: dict[tuple[str, ...], Difference] = {}
    read_times: dict[tuple[str, ...], datetime] = {}
    leaves: list[Level] = []
    segments = 0
    source_total = 0
    levels = 0
    while True:
        levels += 1
        began = time.monotonic()
        source_sums, lake_sums = _both(
            partial(source.segment_sums, plan, level),
            partial(lake.segment_sums, plan, level, parent_shift),
        )
        log.info(
            "%s level %d (segments of 2^%d keys, %s ranges): %d sums, %.2fs",
            plan.spec.qualified_name,
            levels,
            level.shift,
            len(level.within) if level.within is not None else "all",
            len(source_sums),
            time.monotonic() - began,
        )
        if levels == 1:
            segments = len(source_sums.keys() | lake_sums.keys())
            source_total = sum(n for n, _ in source_sums.values())
        differing = [
            j for j in source_sums.keys() | lake_sums.keys() if source_sums.get(j) != lake_sums.get(j)
        ]
        if not differing:
            break
        small = [
            j
            for j in differing
            if level.shift == 0
            or max(source_sums.get(j, (0, 0))[0], lake_sums.get(j, (0, 0))[0]) <= options.leaf_rows
        ]
        large = sorted(set(differing) - set(small))
        if small:
            began = time.monotonic()
            leaf = Level(level.shift, level.lo, tuple(x_ranges(small, level.shift)))
            (source_rows, read_at), lake_rows = _both(
                partial(_read_stamped, source, plan, leaf),
                partial(lake.row_hashes, plan, leaf, level.shift),
            )
            log.info(
                "%s leaves of level %d: %d segments, %d source rows, %.2fs",
                plan.spec.qualified_name,
                levels,
                len(small),
                len(source_rows),
                time.monotonic() - began,
            )
            found = diff_rows(source_rows, lake_rows)
            differences.update(found)
            read_times.update(dict.fromkeys(found, read_at))
            leaves.append(leaf)
        if not large:
            break
        parent_shift = level.shift
        level = Level(max(0, level.shift - step), level.lo, tuple(x_ranges(large, level.shift)))
    return Comparison(differences, leaves, segments, levels, source_total, read_times)


def _read_stamped(
    source: SourceSide, plan: TablePlan, leaf: Level
) -> tuple[dict[tuple[str, ...], int], datetime]:
    """The source's rows of the leaf and when that read ended (the sighting's moment of what it shows)."""
    rows = source.row_hashes(plan, leaf)
    return rows, _now()


FirstResult = TypeVar("FirstResult")
SecondResult = TypeVar("SecondResult")


def _both(
    first: Callable[[], FirstResult], second: Callable[[], SecondResult]
) -> tuple[FirstResult, SecondResult]:
    """Run the source's and the lake's side at once (the source database works while Spark hashes)."""
    result: dict[str, Any] = {}
    failure: list[BaseException] = []

    began = time.monotonic()

    def run() -> None:
        try:
            result["first"] = first()
        except BaseException as error:  # re-raised below
            failure.append(error)
        log.debug("source side: %.2fs", time.monotonic() - began)

    thread = threading.Thread(target=run, name="reconcile-source")
    thread.start()
    result["second"] = second()
    log.debug("lake side: %.2fs", time.monotonic() - began)
    thread.join()
    if failure:
        raise failure[0]
    return result["first"], result["second"]


# ---------------------------------------------------------------------------------------- in flight
CaughtUp = Callable[[TableSpec, datetime], bool]


def raw_caught_up(spark: SparkSession, config: LakeConfig, raw_path: str) -> CaughtUp:
    """Has the clean table applied every CDC file DMS wrote into the raw zone before `t0`? The raw audit's
    rule (`raw_audit.applied_everything_before`: applied, quarantined as a whole file, or superseded by a
    reload), asked of the table's own folder only: another table's backlog does not hold this one up."""

    def check(spec: TableSpec, t0: datetime) -> bool:
        folder = table_folder(raw_path, spec.source_schema, spec.name)
        return applied_everything_before(spark, config, folder, t0)

    return check


@dataclass(frozen=True)
class Sighting:
    """A difference as a source read saw it, and when that read had ended: every change it showed was
    committed by then, so DMS has written it into a file named no later than `seen_at` + the settle time."""

    kind: str
    source_hash: int | None
    seen_at: datetime

    def matches(self, difference: Difference) -> bool:
        """The same kind and the same source row: the source did not change that row in between."""
        return (self.kind, self.source_hash) == (difference[0], difference[2])


Sightings = dict[tuple[str, ...], Sighting]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _micros(moment: datetime) -> int:
    """A naive UTC moment as microseconds since 1970 (the lake's commit times, `LakeSide.row_versions`)."""
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


def recheck(
    plan: TablePlan,
    comparison: Comparison,
    source: SourceSide,
    lake: LakeSide,
    caught_up: CaughtUp | None,
    earlier: Sightings,
    options: ReconcileOptions,
) -> tuple[dict[tuple[str, ...], Difference], int, str, Sightings]:
    """Tell divergence from changes in flight: (divergence, in flight, what the recheck did, the sightings
    to carry to the next run).

    A difference is divergence when it was sighted at a moment m at least the settle time S ago, the lake
    has since applied every CDC file of the table DMS named before m + S (so every change the source read
    at m showed), and a fresh read of both sides still shows the same difference with the same source row.
    The sighting may be this run's (a run given `recheck_wait_seconds` > 0 waits S out, then up to that long
    for the lake) or an earlier run's (`earlier`: the loop's runs, which never wait, carry their sightings
    over: each difference is judged by the first run at least S after the one that saw it)."""
    if not comparison.differences:
        return {}, 0, "not needed", {}
    if caught_up is None:
        return comparison.differences, 0, "no raw path", {}
    settle = timedelta(seconds=options.settle_seconds)
    seen_now = _now()
    sightings = {
        key: earlier[key]
        if key in earlier and earlier[key].matches(difference)
        else Sighting(difference[0], difference[2], comparison.read_at.get(key, seen_now))
        for key, difference in comparison.differences.items()
    }

    def settled() -> Sightings:
        now = _now()
        return {key: s for key, s in sightings.items() if s.seen_at + settle <= now}

    mature = settled()
    if not mature and options.recheck_wait_seconds > 0:  # a run that may wait (not the loop's) waits S out
        time.sleep(max(0.0, (seen_now + settle - _now()).total_seconds()))
        mature = settled()
    if not mature:
        return {}, len(comparison.differences), "settling", sightings
    deadline = time.monotonic() + options.recheck_wait_seconds
    applied_through = max(s.seen_at for s in mature.values()) + settle
    while not caught_up(plan.spec, applied_through):
        if time.monotonic() >= deadline:
            return {}, len(comparison.differences), "lake behind", sightings
        time.sleep(options.recheck_poll_seconds)
    source_rows: dict[tuple[str, ...], int] = {}
    lake_rows: dict[tuple[str, ...], tuple[int, int | None]] = {}
    for leaf in comparison.leaves:
        s, lk = _both(
            partial(source.row_hashes, plan, leaf),
            partial(lake.row_versions, plan, leaf, leaf.shift, fresh=True),
        )
        source_rows.update(s)
        lake_rows.update(lk)
    read_at = _now()
    now = diff_rows(source_rows, {key: h for key, (h, _) in lake_rows.items()})

    def holds(key: tuple[str, ...], difference: Difference) -> bool:
        """The same difference as sighted, and the lake's row not changed since by a change committed after
        the sighting (as far as the clocks tell: within S of it). A row changed back and forth (x, y, x) shows
        the sighted source row again while the lake holds y from a change made after it, its last in flight."""
        sighting = sightings.get(key)
        if sighting is None or not sighting.matches(difference):
            return False
        commit = lake_rows.get(key, (0, None))[1]
        return commit is None or commit <= _micros(sighting.seen_at - settle)

    confirmed = {key: d for key, d in now.items() if key in mature and holds(key, d)}
    carried = {
        key: sightings[key] if holds(key, d) else Sighting(d[0], d[2], read_at) for key, d in now.items()
    }
    return confirmed, len(comparison.differences) - len(confirmed), "confirmed", carried


def sightings_document(by_table: dict[str, Sightings], cap: int) -> dict[str, list[list[Any]]]:
    """The sightings as JSON the next run reads (`sightings_from`): per table at most `cap`, the oldest."""
    document: dict[str, list[list[Any]]] = {}
    for table, sightings in by_table.items():
        oldest = sorted(sightings.items(), key=lambda item: (item[1].seen_at, item[0]))[:cap]
        if oldest:
            document[table] = [[list(key), s.kind, s.source_hash, s.seen_at.isoformat()] for key, s in oldest]
    return document


def sightings_from(document: Any) -> dict[str, Sightings]:
    """What `sightings_document` wrote; anything unreadable is no sighting (its differences are seen anew)."""
    found: dict[str, Sightings] = {}
    if not isinstance(document, dict):
        return found
    for table, entries in document.items():
        try:
            found[str(table)] = {
                tuple(str(part) for part in key): Sighting(
                    str(kind), None if h is None else int(h), datetime.fromisoformat(at)
                )
                for key, kind, h, at in entries
            }
        except (TypeError, ValueError) as error:
            log.warning("%s: the sightings carried over are unreadable (%s); seen anew", table, error)
    return found
