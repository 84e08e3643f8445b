"""LocalStack plugins of the embedded local AWS (loaded by LocalStack through setuptools entry points)."""
