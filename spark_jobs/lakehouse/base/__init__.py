"""Foundations without a SparkSession or I/O: the naming rule, types, the schema file, job configuration, the DMS file contract, the manifest, what a run reports."""
