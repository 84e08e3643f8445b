"""The small I/O layer: the SparkSession, S3 or local storage, the lease fence, Iceberg tables with our facts in each commit, calls into the JVM."""
