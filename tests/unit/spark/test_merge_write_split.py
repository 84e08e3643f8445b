"""A MERGE's write split by its batch's size (lakehouse.io.write_split): a merge-on-read MERGE writes every new
row version from one shuffle partition unless its advisory size is below the batch's bytes. A large batch gets
an advisory size of its estimated write over the shuffle partitions (never below a floor), a small batch none
(one file, as before); the size is set on a copy of the session, never on the shared one."""

from __future__ import annotations

import pytest
from lakehouse.base.names import OP
from lakehouse.io.iceberg import create_table, load_table, merge_changes
from lakehouse.io.write_split import (
    ADVISORY_PARTITION_SIZE,
    SHUFFLE_BYTES_PER_FILE_BYTE,
    SPLIT_FLOOR_BYTES,
    merge_advisory_bytes,
    session_copy,
    sql_with_settings,
    write_advisory_bytes,
)
from pyspark.sql import functions as F
from pyspark.sql import types as T

MB = 2**20


def test_a_batch_under_the_floor_keeps_icebergs_sizing_and_a_large_one_is_split_over_the_partitions():
    # Given a row size at which one row is estimated at exactly the floor's shuffle bytes
    floor_row = SPLIT_FLOOR_BYTES / SHUFFLE_BYTES_PER_FILE_BYTE
    # When batches of 1, 2 and 8 such rows are sized for 4 shuffle partitions
    # Then the batch at the floor keeps Iceberg's own size (one partition, one file)
    assert write_advisory_bytes(rows=1, file_bytes_per_row=floor_row, partitions=4) is None
    # and one of 2 floors is split at the floor (2 parts), one of 8 floors in 4 parts of 2 floors
    assert write_advisory_bytes(rows=2, file_bytes_per_row=floor_row, partitions=4) == SPLIT_FLOOR_BYTES
    assert write_advisory_bytes(rows=8, file_bytes_per_row=floor_row, partitions=4) == 2 * SPLIT_FLOOR_BYTES
    # and a size not below Iceberg's own (the target file size in shuffle bytes) is left to Iceberg
    assert (
        write_advisory_bytes(rows=10 * 2**30, file_bytes_per_row=1, partitions=4, target_file_bytes=MB)
        is None
    )


def test_where_no_session_copy_can_be_made_the_statement_still_runs_in_the_session_without_the_settings():
    # Given a session whose copy cannot be made (a Spark whose catalog manager keeps its catalogs elsewhere)
    class NoCopy:
        def cloneSession(self):
            raise RuntimeError("no field catalogs")

    class Session:
        _jsparkSession = NoCopy()
        statements: list[str] = []

        def sql(self, statement):
            self.statements.append(statement)

    session = Session()
    # When a MERGE is run with an advisory size
    sql_with_settings(session, {ADVISORY_PARTITION_SIZE: "1024"}, "MERGE INTO t USING s ON true")
    # Then it runs once, in the session itself (its write split as Iceberg would)
    assert session.statements == ["MERGE INTO t USING s ON true"]


@pytest.mark.spark
def test_a_large_batch_merges_in_several_files_a_small_one_in_one_and_the_shared_session_is_untouched(
    spark, lake_config
):
    # Given a merge-on-read table of a few rows
    table = f"{lake_config.catalog_name}.write_split.items"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lake_config.catalog_name}.write_split")
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())])
    create_table(spark, table, schema)
    spark.range(3).select("id", F.lit("first").alias("name")).writeTo(table).append()

    def inserts(first: int, count: int):
        # rows of 1.5 kB that barely compress: a batch of a few MB is shuffled in more than one partition
        text = F.concat(
            *[F.sha2(F.concat(F.col("id").cast("string"), F.lit(str(n))), 512) for n in range(12)]
        )
        return spark.range(first, first + count, numPartitions=2).select(
            "id", text.alias("name"), F.lit("I").alias(OP)
        )

    # When a batch of 6,000 new keys (9 MB) is merged with a 64 kB advisory size, and one of 10 with none
    merge_changes(spark, table, inserts(100, 6_000), ["id"], {}, advisory_bytes=64 * 1024)
    merge_changes(spark, table, inserts(100_000, 10), ["id"], {})

    # Then the large batch's new rows are in more than one data file, the small batch's in one
    added = [
        int(row[0])
        for row in spark.sql(
            f"SELECT summary['added-data-files'] FROM {table}.snapshots WHERE operation <> 'append' "
            "ORDER BY committed_at"
        ).collect()
    ]
    assert added[0] > 1 and added[1] == 1, added
    assert spark.table(table).count() == 3 + 6_000 + 10
    # and the shared session never had the advisory size set, while a copy has it and loads tables through the
    # session's own catalog (its cached metadata, which the copy's commit updates)
    assert spark.conf.get(ADVISORY_PARTITION_SIZE, None) is None
    copy = session_copy(spark, {ADVISORY_PARTITION_SIZE: "1024"})
    assert copy.conf().get(ADVISORY_PARTITION_SIZE) == "1024"
    catalogs = [
        s.sessionState().catalogManager().catalog(lake_config.catalog_name)
        for s in (copy, spark._jsparkSession)
    ]
    assert catalogs[0].equals(catalogs[1])
    # and the apply's sizing reads the table's own bytes a row: 10 rows are under the floor, 100,000 are not
    java_table = load_table(spark, table)
    assert merge_advisory_bytes(spark, java_table, 10) is None
    assert (merge_advisory_bytes(spark, java_table, 100_000) or 0) > SPLIT_FLOOR_BYTES
