"""moto for tests that call AWS: no network, no Spark imports (the Lambda tests share it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def offline_aws(monkeypatch: pytest.MonkeyPatch, region: str = "us-east-1", **env: str) -> Iterator[None]:
    """moto for every AWS call, with fake credentials, `region` and `env`; never the local emulator."""
    from moto import mock_aws

    fake = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": region}
    for key, value in (fake | env).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield
