"""What runs next to the pipeline, never on Glue: the demo's source generator (`sample_data`), the
schema-file generator (`schema_gen`), the verifier (`verify`), the BI query runner (`bi`), the dashboard
(`dashboard`) and the Spark-only demo (`demo_spark`). They import `lakehouse`, never the reverse: the Glue
library (`spark_jobs/lakehouse`, shipped as lakehouse.zip) holds only what the jobs import."""
