"""The contracts the pipeline's parts share: one definition of each, for the Lambdas (deployed as the layer
`LakeContractsLayer` (template.yaml; `sam build` puts this folder under the layer's `python/`, which AWS, `sam
local invoke` and the local Lambda plugin put on every function's path; the unit tests find it through
pyproject.toml's pythonpath), for the Spark jobs (the pure modules they import travel in lakehouse.zip) and
for the local DMS.

- `dms_files`: the DMS file contract: file and folder names, `DmsFile`, `parse_dms_key`, the leading columns.

- `names`: the DMS file names the drain accepts, the table-name encoding of reload-request keys, the decoding
  of object keys in EventBridge events (docs/CONTRACTS.md, "Object keys in events").
- `layout`: where things live in the artifacts bucket (pending/done/failed manifests, reload requests, the
  drain claim, the full-load marker, run reports), run ids and report names.
- `documents`: the manifest (the drain's batch, the CDC job's input) and the reload request, as written and
  as read (anything the drain reads back that is not one is corrupt).
- `reload_requests`: the store of reload requests the drain records LOAD files into and the reloads
  function checks, retires and counts failed runs on (corrupt ones kept aside under `reloads-failed/`).
- `s3`: the error codes S3 answers ("object missing", "condition failed"), the conditional delete, the lease.
- `times`: the ISO-8601 form every document carries.
- `resend_horizon`: how old a CDC file may be and still be re-sent (the raw audit, a requeued batch).
- `config`: a function's environment as a typed model, validated at cold start.

`lakehouse.zip` carries only modules without third-party imports (`config` needs pydantic, `s3` botocore).
"""
