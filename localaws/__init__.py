"""The embedded local AWS: LocalStack on the host plus our plugins (host Lambda, Glue, DMS, EMR Serverless)."""
