"""DMS change files to Apache Iceberg: the Spark library behind the Glue jobs."""
