"""The contracts the pipeline's Lambdas share: one definition of each, deployed as the Lambda layer
`LakeContractsLayer` (template.yaml; `sam build` puts this folder under the layer's `python/`, which AWS, `sam
local invoke` and the local Lambda plugin put on every function's path; the unit tests find it through
pyproject.toml's pythonpath).

- `names`: the DMS file names the drain accepts, the table-name encoding of reload-request keys, the decoding
  of object keys in EventBridge events (docs/CONTRACTS.md, "Object keys in events").
- `layout`: where things live in the artifacts bucket (pending/done/failed manifests, reload requests, the
  drain claim, the full-load marker, run reports), run ids and report names.
- `documents`: the manifest and the reload request, as written and as read (anything else is corrupt).
- `reload_requests`: the store of reload requests the drain records LOAD files into and the reloads
  function checks, retires and counts failed runs on (corrupt ones kept aside under `reloads-failed/`).
- `s3`: the error codes S3 answers ("object missing", "condition failed"), the conditional delete, the lease.
- `times`: the ISO-8601 form every document carries.
- `config`: a function's environment as a typed model, validated at cold start.

The Spark jobs read the same formats with their own code (spark_jobs/lakehouse: dms_files.py, manifest.py);
tests/unit/functions/test_queue_drain_hardening.py (test_the_drain_accepts_exactly_the_files_the_spark_jobs_read)
keeps the two readings of a DMS file name equal.
"""
