"""The one SparkSession factory: a local warehouse, or the AWS Glue Data Catalog (on AWS Glue and on EMR
Serverless alike: `--catalog_type glue` means the catalog, not the engine)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.base.config import LakeConfig, executor_cores, shuffle_partitions_for
from lakehouse.io.jvm import remember_names

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

# Runtime SQL settings of every session, local or Glue (measured with bench/profile_cdc.py):
# - the columnar cache uncompressed: a cached batch (tables without a primary key) lives for seconds, and
#   compressing it cost about as much CPU as reading and typing the CSV;
# - a CDC batch names 200 files or so, and past 32 paths Spark lists them in a job of one task per path
#   (3 s locally for 200 files); 8 tasks list them as well, each taking a share.
# - a CDC MERGE joins the batch with every row of the target. A runtime Bloom filter of the batch's keys
#   on the target scan (iceberg.merge_changes) leaves only rows that may match to shuffle and join: it
#   cut the MERGE at 10M rows from 13.9 to 11.1 s and cost 1.2 s at 1M, so Spark builds one once the target
#   scan is estimated at 256 MB (≈ 4M rows of a narrow table; Spark's default is 10 GB), for a batch
#   estimated at up to 8 GB (1M changes are estimated at 1.1 GB; default 10 MB), sized for 4M keys
#   (2 % false positives there; the default is sized for 1M).
TUNING = {
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "true",  # Spark 3.5's default; said, not assumed
    "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "256MB",
    "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "8GB",
    "spark.sql.optimizer.runtime.bloomFilter.expectedNumItems": "4000000",
    "spark.sql.optimizer.runtime.bloomFilter.numBits": "33554432",
    "spark.sql.autoBroadcastJoinThreshold": "10MB",  # Spark's default, said: APPLY_TUNING turns it off
    # Partitions from the input's size: a shuffle starts with spark.sql.shuffle.partitions (twice the
    # executor cores, parallelism()) and adaptive execution coalesces neighbours, keeping defaultParallelism
    # partitions (the same count) while each holds at least the minimum size (2 MB), and none over the
    # advisory size: a small batch on 80 cores runs a few tasks, not 160 of a few kB, and a large one keeps
    # every core busy. Coalescing by the advisory size alone (parallelismFirst=false) ran a 1M-change batch's
    # shuffles as 2 tasks and its MERGE's last as 1 on 2 cores (one idle): 10M-row CDC from Parquet took 12.9 s,
    # 10.4 s with this (bench/RESULTS.md, "The CDC apply got slower").
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.parallelismFirst": "true",
    "spark.sql.adaptive.coalescePartitions.minPartitionSize": "2MB",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64MB",
}

# Settings of the sessions that apply changes (the CDC and full-load jobs): no broadcast joins. Spark builds the
# runtime Bloom filter of the batch's keys on the target scan only for a join it expects to shuffle, and it
# expects a broadcast whenever the batch is small enough to be broadcast; but a MERGE that inserts is a right
# outer join, which can't broadcast the batch, so a small batch was joined by a shuffle of every key of the
# target: 1,000 changes into 100M rows took 42 s, and 4.6 s without broadcasts (10M rows: 6.2 and 2.3 s; a
# batch of 1M changes is as fast either way; bench/RESULTS.md, "Cost growth"). The refine job keeps them.
APPLY_TUNING = {"spark.sql.autoBroadcastJoinThreshold": "-1"}

# JVM options of a local session (its driver is its executor). Spark compiles each stage into one Java
# method; a wide table's typing and validation makes that method 24 kB of bytecode, and HotSpot never
# JIT-compiles a method over 8 kB, so the stage ran interpreted: the 40-column full load took 28-31 s
# with the default and 17-20 s with this flag, a wide CDC batch of 300k changes 21 s and 16-17 s
# (bench/RESULTS.md, "Fourth round"). Narrow tables stay under the limit. LAKE_SPARK_JAVA_OPTIONS
# replaces it (empty: the JVM's default). Glue launches its own JVMs: see the README's "Wide tables on Glue".
LOCAL_JAVA_OPTIONS = "-XX:-DontCompileHugeMethods"

# A local JVM lives long and runs the same queries again: a warm worker of the local AWS one CDC run after the
# other, a test run, the demo. Spark keeps the classes it compiled for 100 generated codes by default, and six
# tables' applies make about 240: every apply compiled its 30 to 46 classes again (Janino, a fifth of a small
# apply's CPU). A static setting: given when the session is made (on Glue each run is a new JVM anyway).
# bench/RESULTS.md, "A wide table's first pass".
LOCAL_STATIC_SETTINGS = {"spark.sql.codegen.cache.maxEntries": "2000"}

# The scheduler of every session, local or on Glue/EMR (static: given when the context is made): FAIR, so the
# tables a run applies at once (each in its own pool, lakehouse.apply.run) share the executors instead of
# queueing, first come first served, behind the stages of whichever table asked first.
SCHEDULER_SETTINGS = {"spark.scheduler.mode": "FAIR"}


# JDBC drivers of the reconcile job's local sources (Debian's packages: `make jdbc`, `make mariadb`), given to the
# local session when present (local_jar_settings); on Glue the job's connection brings its own driver.
LOCAL_JDBC_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/mariadb-java-client.jar")


def local_jars() -> list[str]:
    """The jars of a local session: the Iceberg runtime and whichever JDBC drivers are installed."""
    return [iceberg_runtime_jar(), *(jar for jar in LOCAL_JDBC_JARS if os.path.isfile(jar))]


def local_jar_settings(master: str) -> dict[str, str]:
    """How a local session's JVMs get the jars. A local master's driver is its executor: the jars go on its
    class path when it starts. spark.jars would copy them (the Iceberg runtime is 44 MB) into each
    SparkContext's scratch folder and keep the copy open until the JVM ends, and a long-lived JVM (a warm
    worker of the local AWS, the tests' session) makes a context per run: 44 MB of disk a run, never freed.
    Another master's executors are other JVMs: spark.jars ships the jars to them."""
    if master == "local" or master.startswith("local["):
        return {"spark.driver.extraClassPath": os.pathsep.join(local_jars())}
    return {"spark.jars": ",".join(local_jars())}


def iceberg_runtime_jar() -> str:
    """The pinned Iceberg Spark runtime (Apache Iceberg 1.10.2, Scala 2.12) from its PyPI wheel."""
    jars = resources.files("snowpark_connect_deps_iceberg") / "jars"
    jar = jars / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} is missing: install snowpark-connect-deps-iceberg==1.0.2")
    return str(jar)


def with_iceberg_extensions(extensions: str | None) -> str:
    """`spark.sql.extensions` with Iceberg's among them: what the engine's launch already set stays (Glue's own
    Iceberg, `--datalake-formats`, leaves it to the job; a `--conf` or an EMR image may not), Iceberg's is not
    named twice."""
    names = [name.strip() for name in (extensions or "").split(",") if name.strip()]
    return ",".join(names if ICEBERG_EXTENSIONS in names else [*names, ICEBERG_EXTENSIONS])


def catalog_conf(config: LakeConfig) -> dict[str, str]:
    """Spark settings of the Iceberg catalog. Glue: GlueCatalog + S3FileIO; local: a hadoop warehouse.
    On EMR Serverless the same settings also go on the spark-submit line (tools/emr_serverless_asl.py derives
    them from this function), where the Iceberg extensions must be before the session exists."""
    prefix = f"spark.sql.catalog.{config.catalog_name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",  # DMS writes commit times in UTC
    }
    if config.catalog_type == "glue":
        conf |= {
            f"{prefix}.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
            f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            f"{prefix}.warehouse": config.warehouse,
            f"{prefix}.glue.skip-name-validation": "false",
        }
    else:
        conf |= {
            f"{prefix}.type": "hadoop",
            f"{prefix}.warehouse": _absolute(config.warehouse),
        }
    return conf


def _absolute(location: str) -> str:
    if "://" in location:
        return location
    return Path(location).resolve().as_uri()


def parallelism(config: LakeConfig, conf: dict[str, str], default_parallelism: int | None = None) -> int:
    """The job's shuffle partitions (and default parallelism): `--shuffle_partitions` when above 0, else
    derived from the executors the engine gave the job (lakehouse.base.config.executor_cores: Spark's settings,
    then the Glue worker type and count), else from Spark's defaultParallelism (None: not known yet)."""
    cores = executor_cores(conf, config.worker_type, config.number_of_workers, os.cpu_count() or 1)
    if config.shuffle_partitions <= 0 and cores is None and default_parallelism is None:
        return 0
    return shuffle_partitions_for(cores, default_parallelism or 1, config.shuffle_partitions)


# The JVM classes PySpark names by their short name on every call: `functions` for each F.col, F.when, F.lit…,
# PythonUtils for each list of columns a DataFrame method sends; and the package roots it walks (`jvm.org.apache
# .spark.sql.Observation` for each observed DataFrame, `jvm.py4j.reflection.TypeUtil` for each Java exception
# it converts). py4j resolves each again on every use, through class-loader misses that search every jar (250
# of them): bound on the session's view of the JVM, each is resolved once (lakehouse.io.jvm.remember_names).
# bench/RESULTS.md, "A wide table's first pass" and "Java collections and classes from Python".
PYSPARK_SHORT_NAMES = (
    "org.apache.spark.sql.functions",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.sql.api.python.PythonSQLUtils",
    "org.apache.spark.sql.SparkSession",
    "org.apache.spark.sql.SparkSession$",
    "org.apache.spark.api.python.PythonRDD",
)
PYSPARK_PACKAGE_ROOTS = ("org", "java", "py4j")


def import_short_names(spark: SparkSession) -> SparkSession:
    """`spark` with PYSPARK_SHORT_NAMES and PYSPARK_PACKAGE_ROOTS remembered on its gateway's view of the JVM."""
    remember_names(spark.sparkContext._jvm, PYSPARK_SHORT_NAMES, PYSPARK_PACKAGE_ROOTS)
    return spark


def build_session(
    config: LakeConfig, app_name: str = "lakehouse", tuning: Mapping[str, str] | None = None
) -> SparkSession:
    """Return the SparkSession for `config`. On Glue our script creates the session (it never makes a
    GlueContext first), so the Iceberg extensions and catalog are set at creation; if a session exists
    already, the catalog settings are applied at run time (catalogs load lazily). On EMR Serverless the run's
    spark-submit carries the same settings: the builder finds them set, with the same values. Shuffle
    partitions and default parallelism come from the executors the job has (parallelism()). `tuning`:
    settings of this job's session on top of TUNING (APPLY_TUNING for the jobs that apply changes)."""
    settings = TUNING | dict(tuning or {})
    if config.catalog_type == "glue":
        from pyspark import SparkConf

        submitted = dict(SparkConf().getAll())  # what Glue's or EMR's spark-submit set, before the context
        partitions = parallelism(config, submitted)
        builder = SparkSession.builder.appName(app_name)
        launched = {"spark.sql.extensions": with_iceberg_extensions(submitted.get("spark.sql.extensions"))}
        for key, value in (catalog_conf(config) | SCHEDULER_SETTINGS | launched).items():
            builder = builder.config(key, value)
        if partitions and "spark.default.parallelism" not in submitted:
            builder = builder.config("spark.default.parallelism", str(partitions))
        spark = builder.getOrCreate()
        if not partitions:  # the engine said nothing of its executors: what Spark sees once started
            partitions = parallelism(config, submitted, spark.sparkContext.defaultParallelism)
        runtime = catalog_conf(config) | settings | {"spark.sql.shuffle.partitions": str(partitions)}
        for key, value in runtime.items():
            if key != "spark.sql.extensions":
                spark.conf.set(key, value)
        return import_short_names(spark)
    master = os.environ.get("LAKE_SPARK_MASTER", "local[2]")
    partitions = parallelism(config, {"spark.master": master})
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.memory", os.environ.get("LAKE_SPARK_DRIVER_MEMORY", "4g"))
        .config(
            "spark.driver.extraJavaOptions", os.environ.get("LAKE_SPARK_JAVA_OPTIONS", LOCAL_JAVA_OPTIONS)
        )
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    # a local master says its cores; another (LAKE_SPARK_MASTER=spark://…) is asked once started
    if partitions:
        builder = builder.config("spark.default.parallelism", str(partitions))
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    for key, value in (
        local_jar_settings(master)
        | LOCAL_STATIC_SETTINGS
        | SCHEDULER_SETTINGS
        | catalog_conf(config)
        | settings
    ).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not partitions:
        partitions = parallelism(config, {}, spark.sparkContext.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.sparkContext.setLogLevel(os.environ.get("LAKE_SPARK_LOG_LEVEL", "WARN"))
    return import_short_names(spark)
