"""Consistent points and freshness, the pure rules (lakehouse.audit.consistent, lakehouse.audit.freshness): no Spark.

Given/When/Then, each test a whole outcome: which snapshot of each table is exact at which moments, and the
newest moment every table is exact at."""

from __future__ import annotations

from datetime import datetime, timedelta

from lakehouse.audit.consistent import (
    MICROSECOND,
    SOURCE_TS_MAX,
    SOURCE_TS_MIN,
    Commit,
    Interval,
    Point,
    commit_facts,
    complete_before,
    exact_intervals,
    latest_common_moment,
)
from lakehouse.audit.freshness import raw_path_of, running_newest, source_time_summary, table_freshness


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 26, 10, minute, second)


def test_a_late_older_batch_never_lowers_the_newest_time() -> None:
    # Given a table holding changes up to 10:05, When a late batch of 10:01..10:02 commits
    summary = source_time_summary(at(5), at(1), at(2))
    # Then the commit says 10:05 is still the newest it holds, and 10:01 the oldest it applied
    assert summary == {SOURCE_TS_MAX: at(5).isoformat(), SOURCE_TS_MIN: at(1).isoformat()}
    assert running_newest(None, None) is None
    assert source_time_summary(None, None, None) == {}


def test_summaries_become_commit_facts() -> None:
    # Given three snapshots: a CDC commit, a compaction of it, and a commit by hand (no facts)
    cdc = commit_facts(
        1, "overwrite", {SOURCE_TS_MAX: at(3).isoformat(), SOURCE_TS_MIN: at(1).isoformat()}, None
    )
    compaction = commit_facts(2, "replace", {}, cdc)
    by_hand = commit_facts(3, "overwrite", {}, compaction)
    # Then the compaction holds what its parent held and applied nothing; the hand-made one may hold anything
    assert (cdc.newest, cdc.oldest) == (at(3), at(1))
    assert (compaction.newest, compaction.oldest) == (at(3), None)
    assert (by_hand.newest, by_hand.oldest) == (None, datetime.min)
    # And an aware time in a summary is read as UTC
    aware = commit_facts(4, "append", {SOURCE_TS_MAX: "2026-11-26T11:00:00+01:00"}, None)
    assert aware.newest == at(0)


def test_in_order_batches_give_adjacent_intervals() -> None:
    # Given a table loaded at 10:00, then batches of 10:01..10:02 and 10:03..10:04, complete before 10:10
    lineage = [Commit(1, at(0), at(0)), Commit(2, at(2), at(1)), Commit(3, at(4), at(3))]
    # When its exact intervals are computed
    intervals = exact_intervals(lineage, at(10))
    # Then each snapshot is exact from its newest change up to the next batch's oldest, the last up to 10:10
    assert intervals == [Interval(at(0), at(1), 1), Interval(at(2), at(3), 2), Interval(at(4), at(10), 3)]


def test_a_late_file_makes_the_snapshots_before_it_inexact_where_it_reaches() -> None:
    # Given batches 10:04..10:05, then a late file of 10:01 (delivered after it), complete before 10:10
    lineage = [Commit(1, at(0), at(0)), Commit(2, at(5), at(4)), Commit(3, at(5), at(1))]
    intervals = exact_intervals(lineage, at(10))
    # Then snapshot 2 lacks the 10:01 change: it is exact nowhere; snapshot 1 only before 10:01
    assert intervals == [Interval(at(0), at(1), 1), Interval(at(5), at(10), 3)]


def test_a_table_complete_only_before_its_newest_change_is_exact_nowhere_after() -> None:
    # Given a table whose newest applied change is 10:05 but a file of 10:03 is not applied (complete < 10:02)
    lineage = [Commit(1, at(0), at(0)), Commit(2, at(5), at(4))]
    # Then only the load is exact, up to the completeness bound
    assert exact_intervals(lineage, at(2)) == [Interval(at(0), at(2), 1)]


def test_a_commit_without_facts_hides_everything_before_it() -> None:
    lineage = [Commit(1, at(0), at(0)), Commit(2, None, datetime.min)]
    assert exact_intervals(lineage, at(10)) == []


def test_the_latest_common_moment_takes_each_tables_snapshot_there() -> None:
    # Given table a exact [10:00,10:03) at s1 and [10:03,10:09) at s2; b exact [10:01,10:05) at s7
    intervals = {
        "a": [Interval(at(0), at(3), 1), Interval(at(3), at(9), 2)],
        "b": [Interval(at(1), at(5), 7)],
    }
    # When the newest moment both are exact at is found
    point = latest_common_moment(intervals)
    # Then it is the last microsecond before b stops being exact, a at s2
    assert point == Point(at(5) - MICROSECOND, {"a": 2, "b": 7})
    # And with no overlap there is none; a table without any interval allows none either
    assert latest_common_moment({"a": [Interval(at(0), at(1), 1)], "b": [Interval(at(2), at(3), 2)]}) is None
    assert latest_common_moment({"a": [Interval(at(0), at(1), 1)], "b": []}) is None
    assert latest_common_moment({}) is None


def test_a_moment_at_an_intervals_start_counts() -> None:
    # Given a exact [10:00,10:02) and b exact only from 10:01:59.999999 (its newest change then)
    edge = at(2) - MICROSECOND
    point = latest_common_moment({"a": [Interval(at(0), at(2), 1)], "b": [Interval(edge, at(8), 4)]})
    assert point == Point(edge, {"a": 1, "b": 4})


def test_completeness_is_the_earliest_unapplied_file_or_the_listing_less_the_settle_time() -> None:
    settle = timedelta(seconds=60)
    # a table with nothing waiting (or no file at all): the listing time less the settle time
    assert complete_before([], at(10), settle) == at(9)
    # a table with files waiting: the earliest of them less the settle time
    assert complete_before([at(7), at(5)], at(10), settle) == at(4)


def test_a_transaction_split_across_batches_out_of_order_is_never_half_visible() -> None:
    """Transaction X commits at 10:02:00 on tables a and b. b's file (named 10:02:30) is delivered in a later
    batch than a's: the point after the first batch must hold neither half, after the second both."""
    settle = timedelta(seconds=60)
    x = at(2)
    # After batch 1: a applied X (snapshot 2); b's file is listed but not applied
    a = [Commit(1, at(0), at(0)), Commit(2, x, x)]
    b = [Commit(11, at(0), at(0))]
    first = latest_common_moment(
        {
            "a": exact_intervals(a, complete_before([], at(6), settle)),
            "b": exact_intervals(b, complete_before([at(2, 30)], at(6), settle)),
        }
    )
    assert first == Point(at(1, 30) - MICROSECOND, {"a": 1, "b": 11})
    assert first.at < x
    # After batch 2: b applied X too
    b = [*b, Commit(12, x, x)]
    second = latest_common_moment(
        {
            "a": exact_intervals(a, complete_before([], at(7), settle)),
            "b": exact_intervals(b, complete_before([], at(7), settle)),
        }
    )
    assert second == Point(at(6) - MICROSECOND, {"a": 2, "b": 12})


def test_freshness_of_a_table() -> None:
    lineage = [
        Commit(1, at(0), at(0), "full-load", at(1)),
        Commit(2, at(4), at(3), "batch-7", at(5)),
        Commit(3, at(4), None, None, at(6)),  # a compaction
    ]
    row = table_freshness("sales.item", "sales_item", lineage, at(8), at(9))
    assert row.to_dict() == {
        "source_table": "sales.item",
        "clean_table": "sales_item",
        "newest_source_commit_ts": at(4).isoformat(),
        "lag_seconds": 300.0,
        "applied_through_ts": (at(8) - MICROSECOND).isoformat(),
        "last_batch_id": "batch-7",
        "last_commit_at": at(5).isoformat(),
        "snapshot_id": 3,
    }
    # Without a listing nothing is known of what waits: no applied-through moment
    assert table_freshness("sales.item", "sales_item", lineage, None, at(9)).applied_through_ts is None


def test_the_raw_zone_root_from_a_file() -> None:
    uris = [("s3://raw/dms/sales/item/2026/11/26/20261126-100000000.csv", "sales", "item")]
    assert raw_path_of(uris) == "s3://raw/dms"
    assert raw_path_of([]) is None
