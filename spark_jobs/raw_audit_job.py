"""Glue job (and a local command): the raw zone <-> ledger audit (lakehouse/jobs/raw_audit.py).

    python spark_jobs/raw_audit_job.py --schema_file schema.json --raw_path s3://raw/dms \
        --manifest_prefix s3://artifacts/manifests --queue_url https://sqs…/cdc-files.fifo --grace_minutes 60
"""

import os
import sys

# local runs: the lakehouse package beside us, the contracts it shares with the Lambdas (on Glue: lakehouse.zip)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "functions", "shared"))

from lakehouse.jobs.raw_audit import main

if __name__ == "__main__":
    # not fenced: the audit commits nothing to the lake (re-enqueueing a file twice is harmless)
    sys.exit(main(sys.argv[1:]))
