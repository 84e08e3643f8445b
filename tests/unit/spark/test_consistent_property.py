"""Consistent points against an oracle (hypothesis; the pure rules of lakehouse.audit.consistent, no Spark).

A model source commits random transactions over three tables; a model DMS writes each table's changes into
files in commit order, each named within the settle time of its changes; the files are delivered shuffled,
in random batches, each batch one commit per table it touches (its oldest and newest commit time, the
running newest). After every batch the newest point is computed from the commits' facts and the raw
zone's listing, and checked against the oracle: at the point T, the snapshot chosen for every table holds
exactly the table's changes committed at or before T. Points never go back, and once every file is
applied and the listing is late enough, the point covers every change."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakehouse.audit.consistent import Commit, complete_before, exact_intervals, latest_common_moment

TABLES = ("a", "b", "c")
BASE = datetime(2026, 11, 26, 10, 0, 0)
SETTLE = timedelta(seconds=30)


@dataclass
class File:
    table: str
    changes: list[tuple[int, datetime]]  # (change id, commit time)
    name: datetime


@dataclass
class Table:
    commits: list[Commit] = field(default_factory=list)
    holds: dict[int, set[int]] = field(default_factory=dict)  # snapshot id -> change ids it holds
    newest: datetime = BASE


def source_and_files(rng: random.Random, transactions: int) -> tuple[dict[str, list], list[File]]:
    """Transactions at rising (sometimes equal) commit times, each writing 1-3 tables; each table's changes
    cut into files named at or after their last change and within SETTLE of their first."""
    changes: dict[str, list[tuple[int, datetime]]] = {t: [] for t in TABLES}
    moment, number = BASE, 0
    for _ in range(transactions):
        moment += timedelta(milliseconds=rng.choice([0, 1, 300, 2000, 9000]))
        for table in rng.sample(TABLES, rng.randint(1, 3)):
            for _ in range(rng.randint(1, 2)):
                number += 1
                changes[table].append((number, moment))
    files: list[File] = []
    for table, stream in changes.items():
        named = BASE
        start = 0
        while start < len(stream):
            end = start + 1
            while end < len(stream) and stream[end][1] - stream[start][1] < SETTLE / 2 and rng.random() < 0.7:
                end += 1
            first, last = stream[start][1], stream[end - 1][1]
            delay = timedelta(milliseconds=rng.randint(0, int(SETTLE.total_seconds() * 500)))
            name = max(last + delay, named + timedelta(milliseconds=1))
            assert name <= first + SETTLE  # the one assumption the rules rest on
            files.append(File(table, stream[start:end], name))
            named, start = name, end
    return changes, files


def check_point(
    tables: dict[str, Table],
    changes: dict[str, list],
    applied: set[int],
    listing: datetime,
    files: list[File],
    previous: datetime | None,
) -> datetime | None:
    listed = [f for f in files if f.name <= listing]
    intervals = {}
    for name, table in tables.items():
        waiting = [f.name for f in listed if f.table == name and id(f) not in applied]
        intervals[name] = exact_intervals(table.commits, complete_before(waiting, listing, SETTLE))
    point = latest_common_moment(intervals)
    if point is None:
        return previous
    for name, table in tables.items():
        expected = {number for number, moment in changes[name] if moment <= point.at}
        assert table.holds[point.snapshots[name]] == expected, (name, point)
    assert previous is None or point.at >= previous
    return point.at


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), transactions=st.integers(1, 40), batches=st.integers(1, 8))
def test_every_point_holds_exactly_the_sources_changes_up_to_it(
    seed: int, transactions: int, batches: int
) -> None:
    rng = random.Random(seed)
    changes, files = source_and_files(rng, transactions)
    # Given every table loaded at BASE (its first snapshot holds no change)
    snapshot_ids = iter(range(1, 10_000))
    tables = {}
    for name in TABLES:
        load = next(snapshot_ids)
        tables[name] = Table([Commit(load, BASE, datetime.min)], {load: set()})
    # When the files are delivered shuffled, each once it has landed, in random batches
    order = sorted(files, key=lambda f: f.name + timedelta(seconds=rng.uniform(0, 60)))
    cuts = (
        sorted(rng.sample(range(1, len(order)), min(batches - 1, len(order) - 1))) if len(order) > 1 else []
    )
    applied: set[int] = set()
    listing, previous = BASE, None
    for batch in [order[i:j] for i, j in zip([0, *cuts], [*cuts, len(order)], strict=True)]:
        listing = max([listing, *(f.name for f in batch)]) + timedelta(seconds=rng.uniform(0, 20))
        for name in TABLES:
            mine = [f for f in batch if f.table == name]
            if not mine:
                continue
            table = tables[name]
            moments = [moment for f in mine for _, moment in f.changes]
            table.newest = max(table.newest, *moments)
            snapshot = next(snapshot_ids)
            table.commits.append(Commit(snapshot, table.newest, min(moments)))
            held = table.holds[table.commits[-2].snapshot_id]
            table.holds[snapshot] = held | {number for f in mine for number, _ in f.changes}
        applied |= {id(f) for f in batch}
        # Then the point, if any, holds exactly the source's changes up to it in every table
        previous = check_point(tables, changes, applied, listing, files, previous)
    # And once everything is applied and listed late enough, the point covers every change
    final = check_point(tables, changes, applied, listing + SETTLE * 2, files, previous)
    last = max((moment for stream in changes.values() for _, moment in stream), default=BASE)
    assert final is not None and final >= last
