"""Table maintenance between CDC runs: compaction, delete-file rewrite, expiry, orphans, tombstones."""
