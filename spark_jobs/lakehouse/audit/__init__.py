"""What the lake knows of itself: freshness and consistent points after each CDC run, the raw zone against the ledger."""
