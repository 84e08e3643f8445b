"""Reading DMS files: CSV or Parquet into one DataFrame, and raw records into one change per key."""
