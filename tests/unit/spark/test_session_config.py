"""The catalog is configuration: the same code talks to the Glue Data Catalog or a local folder."""

import os
from pathlib import Path

import pytest
from lakehouse.base.config import LakeConfig, parse_job_arguments
from lakehouse.io.session import catalog_conf, iceberg_runtime_jar, local_jar_settings


def test_glue_catalog_uses_glue_catalog_and_s3_file_io():
    conf = catalog_conf(
        LakeConfig(catalog_type="glue", catalog_name="lake", warehouse="s3://clean/warehouse/")
    )
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.warehouse"] == "s3://clean/warehouse/"
    assert conf["spark.sql.extensions"].endswith("IcebergSparkSessionExtensions")
    assert conf["spark.sql.session.timeZone"] == "UTC"


def test_a_glue_session_adds_icebergs_extensions_to_those_the_engine_launched_with():
    """Given the `spark.sql.extensions` a Glue or EMR launch set (none, another's, Iceberg's already), When a
    Glue-catalog session is built, Then Iceberg's extensions are added once and no launched one is dropped."""
    from lakehouse.io.session import ICEBERG_EXTENSIONS, with_iceberg_extensions

    other = "com.example.SessionExtensions"
    assert with_iceberg_extensions(None) == ICEBERG_EXTENSIONS
    assert with_iceberg_extensions(f" {other} ") == f"{other},{ICEBERG_EXTENSIONS}"
    assert with_iceberg_extensions(f"{ICEBERG_EXTENSIONS},{other}") == f"{ICEBERG_EXTENSIONS},{other}"


def test_local_catalog_is_a_hadoop_warehouse_folder(tmp_path):
    conf = catalog_conf(LakeConfig(catalog_type="hadoop", warehouse=str(tmp_path)))
    assert conf["spark.sql.catalog.lake.type"] == "hadoop"
    assert conf["spark.sql.catalog.lake.warehouse"] == tmp_path.resolve().as_uri()


def test_glue_job_arguments_parse_and_unknown_glue_arguments_are_ignored():
    config, _ = parse_job_arguments(
        ["--catalog_type", "glue", "--warehouse", "s3://c/w", "--JOB_RUN_ID", "jr_1", "--TempDir", "s3://t"]
    )
    assert (config.catalog_type, config.warehouse, config.clean_database) == ("glue", "s3://c/w", "clean")


def test_pinned_iceberg_runtime_jar_is_installed():
    assert iceberg_runtime_jar().endswith("iceberg-spark-runtime-3.5_2.12-1.10.2.jar")


def test_a_local_master_gets_the_jars_at_launch_and_other_masters_ship_them():
    """Given a local master (its driver is its executor), Then the jars are on the driver's class path from its
    start; given a master whose executors are other JVMs, Then spark.jars ships the same jars to them."""
    local = local_jar_settings("local[2]")
    cluster = local_jar_settings("local-cluster[2,1,1024]")

    assert list(local) == ["spark.driver.extraClassPath"]
    assert local["spark.driver.extraClassPath"].split(os.pathsep) == cluster["spark.jars"].split(",")
    assert list(cluster) == ["spark.jars"] and iceberg_runtime_jar() in cluster["spark.jars"].split(",")
    assert local_jar_settings("local") == local_jar_settings("local[*]") == local


def test_a_new_context_in_a_running_jvm_copies_no_jar(spark):
    """Given the tests' session, built by build_session in a JVM that outlives its SparkContexts (as a warm
    worker of the local AWS does, one context a job run), Then the Iceberg runtime loads through the JVM's own
    class loader and the context's scratch folder holds no jar: spark.jars copied the 44 MB runtime there for
    every new context and kept the copy open until the JVM ended (46 MB a context, measured)."""
    from pyspark import SparkFiles

    if not spark.sparkContext.master.startswith("local["):
        pytest.skip("executors in other JVMs get the jars through spark.jars")
    jvm = spark.sparkContext._jvm

    assert (
        jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkCatalog")
        .getName()
        .endswith("SparkCatalog")
    )
    assert spark.sparkContext.getConf().get("spark.jars", "") == ""
    assert not [f for f in Path(SparkFiles.getRootDirectory()).rglob("*") if f.suffix == ".jar"]


# pyspark.java_gateway.launch_gateway's star imports, in its order
GATEWAY_STAR_IMPORTS = (
    "org.apache.spark.api.java",
    "org.apache.spark.api.python",
    "org.apache.spark.ml.python",
    "org.apache.spark.mllib.api.python",
    "org.apache.spark.resource",
    "org.apache.spark.sql",
    "org.apache.spark.sql.api.python",
    "org.apache.spark.sql.hive",
)


def test_the_short_names_pyspark_calls_by_resolve_to_the_classes_its_star_imports_find(spark):
    """Given the tests' session, built by build_session (which imports PYSPARK_SHORT_NAMES singly),
    When each short name is resolved through the session's view of the JVM and through a new view holding
    only the gateway's own star imports,
    Then both name the same class: the single imports change how fast a name resolves, never what it names
    (a mistyped one would have made every F.col fail)."""
    from lakehouse.io.session import PYSPARK_SHORT_NAMES
    from py4j.java_gateway import java_import

    star_only = spark.sparkContext._gateway.new_jvm_view("star-imports-only")
    for package in GATEWAY_STAR_IMPORTS:
        java_import(star_only, f"{package}.*")
    for name in PYSPARK_SHORT_NAMES:
        short = name.rsplit(".", 1)[1]
        assert getattr(spark.sparkContext._jvm, short)._fqn == name
        assert getattr(star_only, short)._fqn == name


def test_a_long_lived_local_jvm_compiles_a_query_again_only_after_many_others(spark):
    """Given the tests' session (a local JVM that lives for the whole run, as a warm worker of the local AWS),
    When a query runs, then 150 queries whose generated code differs, then the first query again,
    Then its second run compiles nothing: its classes are still cached (Spark's default keeps 100, and the
    applies of six tables need about 240, so each apply compiled all of its classes again)."""
    if not spark.sparkContext.master.startswith("local["):
        pytest.skip("executors in other JVMs compile their own stages")
    compilations = (
        spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    )

    def run(number: int) -> None:
        # a long literal is written into the generated code: each number makes code of its own
        spark.range(3).selectExpr(f"id * {number} + {number} AS v").collect()

    run(1_000_001)
    for number in range(150):
        run(2_000_000 + number)
    before = compilations.getCount()
    run(1_000_001)

    assert compilations.getCount() == before


def test_every_session_carries_the_measured_tuning(spark, base_config):
    """Given a session built by build_session (the shared one, built again: a job's main run in this process
    before, such as the CDC job's, leaves its own settings on it), Then the columnar cache is not compressed
    (a batch lives in the cache for seconds), a batch's files are listed by 8 tasks, not one per file, and a
    MERGE target from 256 MB of scan up is Bloom-filtered by the batch's keys (bench/profile_cdc.py measured
    all three)."""
    from lakehouse.io.session import TUNING, build_session

    assert TUNING["spark.sql.inMemoryColumnarStorage.compressed"] == "false"
    assert TUNING["spark.sql.sources.parallelPartitionDiscovery.parallelism"] == "8"
    assert TUNING["spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold"] == "256MB"
    session = build_session(base_config, "lakehouse-tests")
    for key, value in TUNING.items():
        assert session.conf.get(key) == value


def test_the_jobs_that_apply_changes_broadcast_nothing_and_the_others_do(spark, base_config):
    """Given the session built for a job that applies changes (APPLY_TUNING), Then no join is broadcast:
    Spark builds the MERGE's runtime Bloom filter only for a join it expects to shuffle, and it expects a
    broadcast of any batch small enough, although a MERGE that inserts can't broadcast its batch (1,000
    changes into 100M rows: 42 s with broadcasts on, 4.6 s off; bench/RESULTS.md). When the session is
    built again for another job (the refine's joins of small dimensions gain from a broadcast), Then
    broadcasts are back at Spark's default."""
    from lakehouse.io.session import APPLY_TUNING, build_session

    assert APPLY_TUNING == {"spark.sql.autoBroadcastJoinThreshold": "-1"}
    try:
        applying = build_session(base_config, "lakehouse-tests", APPLY_TUNING)
        assert applying.conf.get("spark.sql.autoBroadcastJoinThreshold") == "-1"
    finally:
        other = build_session(base_config, "lakehouse-tests")
    assert other.conf.get("spark.sql.autoBroadcastJoinThreshold") == "10MB"


def test_the_cdc_and_full_load_jobs_build_their_session_with_the_apply_settings(monkeypatch, tmp_path):
    """Given the CDC and full-load jobs' entry points, When each builds its session, Then it asks for
    APPLY_TUNING (the session itself is replaced by a stop here: only the request is the point)."""
    import pytest
    from lakehouse.io.session import APPLY_TUNING
    from lakehouse.jobs import cdc, full_load

    asked = []

    def build(config, app_name, tuning=None):
        asked.append((app_name, tuning))
        raise RuntimeError("stop here")

    monkeypatch.setattr(cdc, "build_session", build)
    monkeypatch.setattr(full_load, "build_session", build)
    schema = tmp_path / "schema.json"
    schema.write_text('{"tables": {}}')
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"version": 1, "run_id": "r1", "files": []}')
    common = ["--schema_file", str(schema), "--warehouse", str(tmp_path / "w")]
    with pytest.raises(RuntimeError, match="stop here"):
        cdc.main([*common, "--manifest", str(manifest)])
    with pytest.raises(RuntimeError, match="stop here"):
        full_load.main([*common, "--raw_path", str(tmp_path / "raw")])
    assert asked == [("dms-cdc", APPLY_TUNING), ("dms-full-load", APPLY_TUNING)]


def test_the_local_jvm_compiles_huge_generated_methods(spark):
    """Given the shared local session, Then its JVM JIT-compiles generated methods over 8 kB of bytecode:
    a 40-column table's typing stage is one 24 kB method, which HotSpot would otherwise leave interpreted
    (the wide full load took 28-31 s without the flag, 17-20 s with it: bench/RESULTS.md)."""
    jvm = spark._jvm
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class)
    assert bean.getVMOption("DontCompileHugeMethods").getValue() == "false"


def test_a_mistyped_argument_of_ours_is_an_error_while_glue_s_own_pass(capsys):
    """Given `--schema_fle` (a typo of ours) among Glue's own parameters, When parsed, Then it is an
    error naming it; Glue's (`--JOB_ID`, `--enable-metrics`, `--conf`) alone parse."""
    import pytest

    glue_own = ["--JOB_ID", "j_1", "--enable-metrics", "true", "--conf", "spark.x=1", "--TempDir", "s3://t"]
    parse_job_arguments(glue_own)
    with pytest.raises(SystemExit):
        parse_job_arguments([*glue_own, "--schema_fle", "s.json"])
    assert "--schema_fle" in capsys.readouterr().err


def test_jobs_refuse_a_missing_schema_file_and_a_bad_database_before_spark_starts(capsys):
    import pytest
    from lakehouse.jobs.cdc import main as cdc_main
    from lakehouse.jobs.full_load import main as full_load_main

    with pytest.raises(SystemExit):
        cdc_main(["--manifest", "m.json"])
    assert "--schema_file is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        full_load_main(["--raw_path", "r", "--schema_file", "s.json", "--clean_database", "Clean-Zone"])
    assert "lower-case letters" in capsys.readouterr().err


def test_every_job_argument_is_explained_by_help():
    """Given the CDC and full-load jobs' parsers (with the arguments every job takes), Then every argument
    has a help text (`--help` explains them all)."""
    from lakehouse.base.config import add_lake_arguments
    from lakehouse.jobs.cdc import parser as cdc_parser
    from lakehouse.jobs.full_load import parser as full_load_parser

    for parser in (cdc_parser(), full_load_parser()):
        add_lake_arguments(parser)
        silent = [a.option_strings for a in parser._actions if not (a.help or "").strip()]
        assert silent == [], silent
