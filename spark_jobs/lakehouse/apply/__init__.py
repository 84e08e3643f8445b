"""Applying changes: the full load and reload, the CDC apply (one commit per table), the ledger and tombstones, the quarantine, row history."""
