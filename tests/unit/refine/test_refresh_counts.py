"""What an incremental refresh spends, counted (never timed): the Spark jobs of one model's refresh after a change
confined to one data file of its fact input, then after a change of its dimension, and that they do not grow
with the table.

Two models over a fact (`sales`) and a dimension (`item`): `enriched` (the fact left-joined to the dimension, keyed
on the fact's key) and `by_category` (an aggregate of `enriched`, keyed on its group). One sale is updated and one
inserted, then one item reclassified; each model's refresh is then counted by its Spark jobs (the status tracker's jobs of a job group set
around the refine). A change that adds an action per model (a count, a checkpoint, another run of the model)
changes a figure here: the reviewer sees the constant change with it. The rows an aggregate's keys step reads of
its input's kept changes are counted likewise (the stages' input records in Spark's status store)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lakehouse.io.iceberg import append_rows, create_table, ensure_namespace
from lakehouse.refine import refresh
from lakehouse.refine.models import load_folder
from lakehouse.refine.refresh import refine

pytestmark = pytest.mark.spark

MODELS = {
    "enriched.sql": """{{ config(materialized='incremental', unique_key='id') }}
SELECT s.id, s.amount, i.category FROM {{ source('sales') }} s LEFT JOIN {{ source('item') }} i ON s.item = i.item
""",
    "by_category.sql": """{{ config(materialized='incremental', unique_key='category') }}
SELECT category, sum(amount) AS amount, count(*) AS lines FROM {{ ref('enriched') }} GROUP BY category
""",
}
# The most jobs of one model's incremental refresh after a one-file change of one input, whatever the table's size,
# by change: 7 and 7 after the fact's change, 11 and 10 after the item's, as counted (adaptive execution's
# re-planning adds one or two on a loaded machine). Before a change's few keys were joined to the rows in their
# range, and the recomputed rows to their keys, in the task that reads those rows (no broadcast of either: a job
# each), 9 and 9 after the fact's change (the fact ceilings fail on that code; the item's change reads every file
# in range, where nothing changed). Before the MERGE's source was computed in the MERGE (merge-on-read reads
# it once), not kept by a job of its own: 10 and 9, 12 and 9. Before a change's few keys and the few rows in
# their range were taken in one task (no shuffle: the keys' distinct, the aggregate's exchange), 11 and 11,
# 13 and 11: both ceilings fail on that code. Before the keyed recompute it was 25 and 24 after the fact's change; before
# the keys were traced along the joins, 16 and 17 after the fact's, 19 and 17 after the item's (the model run
# with the changed items and without, over the whole fact, and subtracted); before rows only added and deleted
# were taken as the changes without comparing them, 14 and 14, 16 and 14; before the keys' count and bounds were
# observed as they were kept, not aggregated after, 13 and 13, 15 and 13.
JOBS_AT_MOST = {"fact": {"enriched": 8, "by_category": 8}, "item": {"enriched": 12, "by_category": 10}}
# A second aggregate of `enriched` on fewer of its columns: `enriched`'s changes are then kept once for both
# aggregates (lakehouse.refine.consumed.SharedChanges), each comparing them on its own columns.
TWO_AGGREGATES = {
    **MODELS,
    "lines_by_category.sql": """{{ config(materialized='incremental', unique_key='category') }}
SELECT category, count(*) AS lines FROM {{ ref('enriched') }} GROUP BY category
""",
}


def _input_rows(spark, group: str) -> int:
    """The input records of every stage of the job group's jobs (Spark's status store, all attempts)."""
    context, jvm = spark.sparkContext, spark._jvm
    store = context._jsc.sc().statusStore()
    stages = {
        s
        for job in context.statusTracker().getJobIdsForGroup(group)
        for s in context.statusTracker().getJobInfo(job).stageIds
    }
    rows = 0
    for stage in stages:
        attempts = store.stageData(
            stage, False, jvm.java.util.ArrayList(), False, context._gateway.new_array(jvm.double, 0)
        )
        rows += sum(int(attempts.apply(i).inputRecords()) for i in range(attempts.size()))
    return rows


def _refresh_jobs(
    spark, base_config, monkeypatch, sales: int, suffix: str, changes: tuple[str, ...], models=MODELS
) -> list[dict[str, tuple[str, int, int]]]:
    """Each model's (mode, Spark jobs, rows its keys' step read) of a refresh after each of `changes`, over `sales`
    rows in a file per 50 ids: "fact", the newest sale updated and one inserted; "item", an item reclassified."""
    config = replace(
        base_config, clean_database=f"counts_clean_{suffix}", refined_database=f"counts_refined_{suffix}"
    )
    ensure_namespace(spark, config.catalog_name, config.clean_database)
    fact, dimension = config.clean_table("main_sales"), config.clean_table("main_item")
    create_table(spark, fact, spark.createDataFrame([], "id bigint, item bigint, amount bigint").schema)
    create_table(spark, dimension, spark.createDataFrame([], "item bigint, category string").schema)
    rows = spark.createDataFrame(
        [(n, n % 7, n) for n in range(sales)], "id bigint, item bigint, amount bigint"
    )
    append_rows(spark, fact, rows.repartitionByRange(sales // 50, "id"), {})  # a file per 50 ids
    items = [(n, f"c{n % 3}") for n in range(7)]
    append_rows(spark, dimension, spark.createDataFrame(items, "item bigint, category string"), {})
    folder = load_folder(models.items())
    assert {t.mode for t in refine(spark, config, models=folder).tables} == {"built"}
    context = spark.sparkContext
    unwrapped = refresh._Refiner.refresh
    group = [""]  # the job group's prefix of the refine being counted

    def in_its_job_group(refiner: refresh._Refiner, model):  # type: ignore[no-untyped-def]
        context.setJobGroup(f"{group[0]}-{model.name}", "counted refresh")
        try:
            return unwrapped(refiner, model)
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)

    unwrapped_keys = refresh.kept_keys

    def keys_in_their_job_group(keys):  # type: ignore[no-untyped-def]
        model_group = context.getLocalProperty("spark.jobGroup.id")
        context.setJobGroup(f"{model_group}-keys", "counted keys")
        try:
            return unwrapped_keys(keys)
        finally:
            context.setJobGroup(model_group, "counted refresh")

    monkeypatch.setattr(refresh._Refiner, "refresh", in_its_job_group)
    monkeypatch.setattr(refresh, "kept_keys", keys_in_their_job_group)
    counted = []
    for change in changes:
        if change == "fact":
            spark.sql(f"UPDATE {fact} SET amount = amount + 1 WHERE id = {sales - 1}")
            new_sale = spark.createDataFrame([(sales, 1, 5)], "id bigint, item bigint, amount bigint")
            append_rows(spark, fact, new_sale, {})
        else:
            spark.sql(f"UPDATE {dimension} SET category = 'c9' WHERE item = 3")
        group[0] = f"refresh-counts-{suffix}-{change}"
        report = refine(spark, config, models=folder)
        context._jsc.sc().listenerBus().waitUntilEmpty(30_000)
        tracker = context.statusTracker()
        counted.append(
            {
                t.table: (
                    t.mode,
                    sum(len(tracker.getJobIdsForGroup(f"{group[0]}-{t.table}{s}")) for s in ("", "-keys")),
                    _input_rows(spark, f"{group[0]}-{t.table}-keys"),
                )
                for t in report.tables
            }
        )
    monkeypatch.undo()
    return counted


def test_a_one_file_change_refreshes_in_a_few_jobs_whatever_the_table_size(
    spark, base_config, monkeypatch
) -> None:
    """Given two incremental models over a fact of N rows in N/50 files, refreshed after the newest sale updated
    and one inserted; when the same is done over a fact of 2N rows in twice the files, then one item is
    reclassified; then both refresh incrementally each time, each in at most a small number of Spark jobs at
    either size (no count, checkpoint or model run per row or file, and the item's change traced along the join, not
    by running the model with it and without it)."""
    for sales, suffix, changes in ((200, "small", ("fact",)), (400, "large", ("fact", "item"))):
        counted = _refresh_jobs(spark, base_config, monkeypatch, sales, suffix, changes)
        for change, refreshed in zip(changes, counted, strict=True):
            assert {name: mode for name, (mode, _, _) in refreshed.items()} == dict.fromkeys(
                JOBS_AT_MOST[change], "incremental"
            )
            jobs = {name: count for name, (_, count, _) in refreshed.items()}
            assert all(jobs[name] <= most for name, most in JOBS_AT_MOST[change].items()), (
                suffix,
                change,
                jobs,
            )


def test_each_aggregate_reads_its_input_changes_at_most_twice(spark, base_config, monkeypatch) -> None:
    """Given two aggregates of `enriched` on different columns, refreshed after the newest sale updated and one
    inserted (`enriched`'s change: the updated sale's old row deleted, it and the new sale added, 3 rows by its
    commit's summary); when each aggregate finds its keys from those changes, kept once for both and compared on
    its own columns; then the step that keeps its keys reads at most 2 rows for each changed row: the kept
    changes read once for each side of its comparison (4 on ddfea7b: each side read each image again)."""
    [refreshed] = _refresh_jobs(spark, base_config, monkeypatch, 200, "reads", ("fact",), TWO_AGGREGATES)
    assert {name: mode for name, (mode, _, _) in refreshed.items()} == dict.fromkeys(refreshed, "incremental")
    enriched = base_config.table("counts_refined_reads", "enriched")
    summary = spark.sql(
        f"SELECT summary FROM {enriched}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()[0]
    changed = int(summary["added-records"]) + int(summary.get("added-position-deletes", 0))
    assert changed == 3
    for name in ("by_category", "lines_by_category"):
        read = refreshed[name][2]
        assert 0 < read <= 2 * changed, (name, read, changed)
