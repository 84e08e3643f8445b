"""Parallelism from the cluster and the data: shuffle partitions derived from the executors
a job has (Spark's own settings as Glue, EMR Serverless or a local master set them, else the Glue job's
worker type and count), overridable by `--shuffle_partitions`; adaptive execution coalesces small shuffles
by size, so a small batch on a large cluster runs few tasks."""

from __future__ import annotations

import pytest
from lakehouse.base.config import (
    LakeConfig,
    executor_cores,
    parse_job_arguments,
    shuffle_partitions_for,
)
from lakehouse.io.session import TUNING, catalog_conf, parallelism

GLUE_AUTO_SCALING = {  # what a Glue 5 run with auto scaling says of its executors (10 G.2X workers)
    "spark.master": "yarn",
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.maxExecutors": "9",
    "spark.executor.cores": "8",
}
EMR_SERVERLESS = {  # the application's spark-defaults (template.yaml) at EmrMaximumVcpu=64
    "spark.master": "yarn",
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.maxExecutors": "15",
    "spark.executor.cores": "4",
}


@pytest.mark.parametrize(
    ("conf", "worker_type", "workers", "cores"),
    [
        ({"spark.master": "local[2]"}, None, None, 2),
        ({"spark.master": "local[2]"}, "G.2X", 10, 2),  # a local run of a deployed job: the master wins
        ({"spark.master": "local[*]"}, None, None, 6),  # the machine's CPUs (6 here)
        ({"spark.master": "local"}, None, None, 1),
        ({"spark.master": "local-cluster[2,1,1024]"}, None, None, 2),
        ({"spark.master": "local-cluster[3, 2, 2048]"}, None, None, 6),
        (GLUE_AUTO_SCALING, "G.1X", 2, 72),  # Spark's settings come before the hint
        (EMR_SERVERLESS, None, None, 60),
        ({"spark.executor.instances": "4", "spark.executor.cores": "4"}, None, None, 16),
        ({}, "G.1X", 2, 4),  # Glue said nothing: one of the two workers runs the driver
        ({}, "G.2X", 10, 72),
        ({}, "G.8X", 299, 298 * 32),
        ({"spark.dynamicAllocation.enabled": "true", "spark.executor.cores": "4"}, "G.1X", 11, 40),
        (  # dynamic allocation without a ceiling ("infinity"): the ceiling is unknown, the hint decides
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": "infinity",
                "spark.executor.cores": "4",
            },
            None,
            None,
            None,
        ),
        ({"spark.executor.instances": "4"}, None, None, None),  # cores per executor unknown
        ({}, "G.9X", 4, None),  # an unknown worker type is not guessed
        ({}, None, None, None),
    ],
)
def test_the_executor_cores_a_job_has(conf, worker_type, workers, cores):
    assert executor_cores(conf, worker_type, workers, local_cpus=6) == cores


def test_shuffle_partitions_are_twice_the_cores_unless_overridden():
    """Given cores (or only Spark's defaultParallelism), Then twice as many partitions, at least 2; an
    override above 0 is taken as it is."""
    assert [shuffle_partitions_for(c, default_parallelism=3) for c in (1, 2, 72, 9536)] == [2, 4, 144, 19072]
    assert shuffle_partitions_for(None, default_parallelism=3) == 6
    assert shuffle_partitions_for(None, default_parallelism=1) == 2
    assert shuffle_partitions_for(72, default_parallelism=3, override=7) == 7
    assert shuffle_partitions_for(None, default_parallelism=3, override=1) == 1


@pytest.mark.parametrize(
    ("argv", "conf", "expected"),
    [
        ([], {"spark.master": "local[2]"}, 4),  # what a local job always ran with
        (["--worker_type", "G.2X", "--number_of_workers", "10"], {"spark.master": "yarn"}, 144),
        (["--worker_type", "G.1X", "--number_of_workers", "2"], {"spark.master": "yarn"}, 8),  # defaults
        (["--worker_type", "G.1X", "--number_of_workers", "2"], EMR_SERVERLESS, 120),
        (["--shuffle_partitions", "400", "--worker_type", "G.1X", "--number_of_workers", "2"], {}, 400),
        ([], {"spark.master": "yarn"}, 0),  # nothing known before the session: asked once it runs
    ],
)
def test_a_jobs_arguments_and_its_engine_give_its_partitions(argv, conf, expected):
    config, _ = parse_job_arguments(["--catalog_type", "glue", "--warehouse", "s3://b/w/", *argv])
    assert parallelism(config, conf) == expected


def test_once_started_spark_default_parallelism_decides_when_nothing_else_does():
    config = LakeConfig(catalog_type="glue", warehouse="s3://b/w/")
    assert parallelism(config, {"spark.master": "yarn"}, default_parallelism=24) == 48


def test_shuffle_partitions_is_no_longer_a_constant_4_of_the_job_arguments_or_the_catalog():
    """Given no --shuffle_partitions, Then the job derives them (0), and the catalog settings (which the EMR
    state machine's spark-submit line carries) no longer fix them; a negative value is refused."""
    config, _ = parse_job_arguments(["--catalog_type", "glue", "--warehouse", "s3://b/w/"])
    assert (config.shuffle_partitions, config.worker_type, config.number_of_workers) == (0, None, None)
    assert "spark.sql.shuffle.partitions" not in catalog_conf(config)
    with pytest.raises(SystemExit):
        parse_job_arguments(["--shuffle_partitions", "-1"])


def test_adaptive_execution_keeps_the_cores_busy_and_coalesces_small_partitions():
    assert TUNING["spark.sql.adaptive.coalescePartitions.parallelismFirst"] == "true"
    assert TUNING["spark.sql.adaptive.coalescePartitions.minPartitionSize"] == "2MB"
    assert TUNING["spark.sql.adaptive.advisoryPartitionSizeInBytes"] == "64MB"


def _partitions_after_shuffle(spark, rows: int) -> tuple[int, tuple]:
    from pyspark.sql import functions as F

    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "16")
    try:
        data = spark.range(0, rows, numPartitions=4).select(
            "id", F.sha2(F.col("id").cast("string"), 256).alias("payload")
        )
        shuffled = data.repartition("id")
        total = shuffled.agg(F.count("*"), F.sum("id"), F.countDistinct("payload")).first()
        return shuffled.rdd.getNumPartitions(), tuple(total)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)


def test_a_large_shuffle_keeps_one_partition_per_core_and_a_small_one_runs_as_one_task(spark):
    """Given 16 shuffle partitions (8 cores' worth) and the session's defaultParallelism (2 here),
    When a shuffle of about 25 MB (300k rows) runs, Then adaptive execution keeps at least defaultParallelism
    partitions, fewer than 16 (every core busy; by the advisory size alone it ran as one task while a core idled);
    When a shuffle of about 100 kB (1k rows) runs, Then it is one partition (under the 2 MB minimum);
    and both results are whole."""
    cores = spark.sparkContext.defaultParallelism
    partitions, total = _partitions_after_shuffle(spark, 300_000)
    assert cores >= 2 and cores <= partitions < 16  # neighbours joined up to about 25 MB / cores each
    assert total == (300_000, 300_000 * 299_999 // 2, 300_000)
    assert _partitions_after_shuffle(spark, 1_000) == (1, (1_000, 1_000 * 999 // 2, 1_000))
