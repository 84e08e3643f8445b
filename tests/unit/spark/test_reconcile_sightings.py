"""The reconcile's in-flight rule (lakehouse/reconcile/bisect.py `recheck`): a difference is divergence only
when a read at least S (the settle time) after the read that saw it, with the lake caught up with every file
DMS named before that sighting + S, still sees it with the same source row. Pure: the two sides are dicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from lakehouse.reconcile.bisect import (
    Comparison,
    Sighting,
    compare_table,
    diff_rows,
    recheck,
    sightings_document,
    sightings_from,
)
from lakehouse.reconcile.plan import Level, ReconcileOptions

SETTLE = 120.0
LOOP = ReconcileOptions(settle_seconds=SETTLE, recheck_wait_seconds=0.0)  # the loop's runs never wait
LEAF = Level(0, 0, ((0, 9),))
PLAN = SimpleNamespace(spec="s.t")


class Side:
    """A side whose rows (key -> row hash) the test sets between reads; the lake's rows may have the commit
    time of their last applied change (`commits`, microseconds since 1970 UTC)."""

    def __init__(self, rows: dict[tuple[str, ...], int]) -> None:
        self.rows = rows
        self.commits: dict[tuple[str, ...], int] = {}

    def row_hashes(self, plan, level, *_, **__) -> dict[tuple[str, ...], int]:
        return dict(self.rows)

    def row_versions(self, plan, level, *_, **__) -> dict[tuple[str, ...], tuple[int, int | None]]:
        return {key: (h, self.commits.get(key)) for key, h in self.rows.items()}


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


class CaughtUp:
    def __init__(self, answer: bool) -> None:
        self.answer, self.asked = answer, []

    def __call__(self, spec, moment: datetime) -> bool:
        self.asked.append(moment)
        return self.answer


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def compared(source: Side, lake: Side) -> Comparison:
    return Comparison(diff_rows(source.rows, lake.rows), [LEAF], 1, 1)


def test_a_difference_first_seen_settles_and_is_carried_not_reported() -> None:
    """Given a source and a lake differing in three keys (missing, extra, differing), no earlier sighting,
    When the loop's run (it never waits) rechecks,
    Then nothing is divergence, all three are in flight ("settling"), the lake is not even asked, and the
    three are carried with their kind, source row and the moment they were seen."""
    source, lake = Side({("1",): 10, ("2",): 20}), Side({("2",): 21, ("3",): 30})
    caught_up = CaughtUp(True)
    before = now()

    confirmed, in_flight, what, carried = recheck(
        PLAN, compared(source, lake), source, lake, caught_up, {}, LOOP
    )

    assert (confirmed, in_flight, what, caught_up.asked) == ({}, 3, "settling", [])
    assert {k: (s.kind, s.source_hash) for k, s in sorted(carried.items())} == {
        ("1",): ("missing", 10),
        ("2",): ("differing", 20),
        ("3",): ("extra", None),
    }
    assert all(before <= s.seen_at <= now() for s in carried.values())


def test_a_later_run_confirms_what_stayed_the_same_and_no_change_in_flight() -> None:
    """Given sightings 200 s old (S = 120) of keys 1 (missing), 2 (differing), 3 (extra) and 4 (missing), the
    lake caught up with every file named before they were seen + S,
    When a run sees: key 1 still missing with the same source row, key 2 differing but its source row changed
    since (a change in flight, seen anew), key 3 still extra, key 4 applied meanwhile, and key 5 new,
    Then exactly keys 1 and 3 are divergence, 3 keys are in flight, the lake was asked about the sightings'
    moment + S, and what still differs is carried: 1 and 3 with their first sighting, 2 and 5 seen now."""
    old = now() - timedelta(seconds=200)
    earlier = {
        ("1",): Sighting("missing", 10, old),
        ("2",): Sighting("differing", 20, old),
        ("3",): Sighting("extra", None, old),
        ("4",): Sighting("missing", 40, old),
    }
    source = Side({("1",): 10, ("2",): 22, ("4",): 40, ("5",): 50, ("6",): 60})
    lake = Side({("2",): 21, ("3",): 30, ("6",): 60})
    comparison = compared(source, lake)
    lake.rows[("4",)] = 40  # its file applied between the comparison and the recheck
    caught_up = CaughtUp(True)

    confirmed, in_flight, what, carried = recheck(PLAN, comparison, source, lake, caught_up, earlier, LOOP)

    assert what == "confirmed"
    assert sorted(confirmed.items()) == [(("1",), ("missing", ("1",), 10)), (("3",), ("extra", ("3",), None))]
    assert in_flight == 3
    assert caught_up.asked == [old + timedelta(seconds=SETTLE)]
    assert sorted(carried) == [("1",), ("2",), ("3",), ("5",)]
    assert carried[("1",)].seen_at == carried[("3",)].seen_at == old
    assert carried[("2",)].seen_at > old and carried[("2",)].source_hash == 22
    assert carried[("5",)].seen_at > old


def test_a_lake_behind_its_raw_files_confirms_nothing_and_keeps_the_sightings() -> None:
    """Given a sighting S old and a lake that has not applied every file DMS named before it + S,
    When the loop's run rechecks, Then nothing is divergence ("lake behind") and the sighting is kept as it was."""
    old = now() - timedelta(seconds=SETTLE + 1)
    earlier = {("1",): Sighting("missing", 10, old)}
    source, lake = Side({("1",): 10}), Side({})

    confirmed, in_flight, what, carried = recheck(
        PLAN, compared(source, lake), source, lake, CaughtUp(False), earlier, LOOP
    )

    assert (confirmed, in_flight, what, carried) == ({}, 1, "lake behind", earlier)


def test_a_run_that_may_wait_waits_the_settle_time_out_and_confirms_itself() -> None:
    """Given S = 0.3 s and a run that may wait (by hand: recheck_wait_seconds > 0), a key missing from the lake,
    When it rechecks, Then it waits S out, asks the lake about its own sighting + S, and confirms the key."""
    options = ReconcileOptions(settle_seconds=0.3, recheck_wait_seconds=5.0, recheck_poll_seconds=0.05)
    source, lake = Side({("1",): 10}), Side({})
    caught_up = CaughtUp(True)
    began = now()

    confirmed, in_flight, what, carried = recheck(
        PLAN, compared(source, lake), source, lake, caught_up, {}, options
    )

    assert (list(confirmed), in_flight, what) == ([("1",)], 0, "confirmed")
    assert now() - began >= timedelta(seconds=0.3)
    assert caught_up.asked == [carried[("1",)].seen_at + timedelta(seconds=0.3)]


def test_the_sightings_cross_runs_as_json_the_oldest_kept_within_the_cap() -> None:
    """Given sightings of two tables, one with three keys (composite text keys, a missing source row),
    When written with a cap of 2 and read back, Then each table keeps its 2 oldest, exactly; anything
    unreadable is no sighting."""
    t = datetime(2026, 11, 26, 12, 0, 0, 123456)
    by_table = {
        "s.a": {
            ("x", "1"): Sighting("missing", -5, t + timedelta(seconds=2)),
            ("y", "é\x1f"): Sighting("extra", None, t),
            ("z", "3"): Sighting("differing", 2**62, t + timedelta(seconds=1)),
        },
        "s.b": {("7",): Sighting("extra", None, t)},
        "s.c": {},
    }

    document = sightings_document(by_table, cap=2)

    assert sightings_from(document) == {
        "s.a": {("y", "é\x1f"): by_table["s.a"][("y", "é\x1f")], ("z", "3"): by_table["s.a"][("z", "3")]},
        "s.b": by_table["s.b"],
    }
    assert sightings_from({"s.a": [["k", "missing"]], "s.b": document["s.b"]}) == {"s.b": by_table["s.b"]}
    assert sightings_from(None) == {}


def test_a_row_changed_back_and_forth_is_not_confirmed_while_the_lake_holds_a_change_after_the_sighting() -> (
    None
):
    """Given key 1 sighted 200 s ago (S = 120) differing with source row x while a change was in flight, then
    changed to y and back to x at the source, the lake caught up with the files named before the sighting + S,
    When a run rereads: the source shows x again (the sighted source row), the lake y, whose change it applied
    was committed after the sighting (the change back to x still in flight),
    Then key 1 is not divergence and is seen anew now; key 2, whose lake row was last changed before its
    sighting less S, and key 3, which has no commit time (loaded rows), are divergence."""
    old = now() - timedelta(seconds=200)
    earlier = {
        ("1",): Sighting("differing", 10, old),
        ("2",): Sighting("differing", 20, old),
        ("3",): Sighting("differing", 30, old),
    }
    source, lake = Side({("1",): 10, ("2",): 20, ("3",): 30}), Side({("1",): 11, ("2",): 21, ("3",): 31})
    lake.commits = {
        ("1",): micros(old + timedelta(seconds=5)),
        ("2",): micros(old - timedelta(seconds=SETTLE + 1)),
    }

    confirmed, in_flight, what, carried = recheck(
        PLAN, compared(source, lake), source, lake, CaughtUp(True), earlier, LOOP
    )

    assert (sorted(confirmed), in_flight, what) == ([("2",), ("3",)], 1, "confirmed")
    assert carried[("1",)].seen_at > old and carried[("2",)].seen_at == old


class SlowLake(Side):
    """The lake side of a whole comparison: its reads take `seconds` on the test's clock."""

    def __init__(self, rows: dict[tuple[str, ...], int], clock: list[datetime], seconds: float) -> None:
        super().__init__(rows)
        self.clock, self.seconds = clock, seconds

    def estimated_rows(self, plan) -> int:
        return len(self.rows)

    def segment_sums(self, plan, level, *_) -> dict[int, tuple[int, int]]:
        return {0: (len(self.rows), sum(self.rows.values()))}

    def row_hashes(self, plan, level, *_, **__) -> dict[tuple[str, ...], int]:
        self.clock[0] += timedelta(seconds=self.seconds)
        return dict(self.rows)


class SummedSide(Side):
    def segment_sums(self, plan, level, *_) -> dict[int, tuple[int, int]]:
        return {0: (len(self.rows), sum(self.rows.values()))}


def test_a_sighting_is_dated_by_the_source_read_that_saw_it_not_by_the_end_of_a_slow_comparison(
    monkeypatch,
) -> None:
    """Given a source and a lake differing in key 1, and a comparison whose lake side takes 10 minutes after
    the source's read of that key ended (at 10:00),
    When the loop's run compares and rechecks (S = 15 minutes: the difference settling),
    Then the difference is carried as sighted at 10:00, the read's end, not at 10:10: a later run then
    reads "changed after the sighting" against the moment the source really showed that row."""
    clock = [datetime(2026, 11, 28, 10, 0, 0)]
    monkeypatch.setattr("lakehouse.reconcile.bisect._now", lambda: clock[0])
    plan = SimpleNamespace(spec=SimpleNamespace(qualified_name="s.t"), integer_key=False)
    source, lake = SummedSide({("1",): 10}), SlowLake({("1",): 11}, clock, 600)
    options = ReconcileOptions(settle_seconds=900.0, recheck_wait_seconds=0.0, leaf_rows=8)

    comparison = compare_table(plan, source, lake, options)
    confirmed, in_flight, what, carried = recheck(plan, comparison, source, lake, CaughtUp(True), {}, options)

    assert (confirmed, in_flight, what) == ({}, 1, "settling")
    assert carried == {("1",): Sighting("differing", 10, datetime(2026, 11, 28, 10, 0, 0))}
    assert clock[0] == datetime(2026, 11, 28, 10, 10, 0)
