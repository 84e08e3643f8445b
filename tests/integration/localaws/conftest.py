import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from localaws import sam_app  # noqa: E402
from localaws.stack import running_stack  # noqa: E402


@pytest.fixture(scope="session")
def localstack_endpoint() -> Iterator[str]:
    """LocalStack with our plugins, started once for the session (or reused if one is already running)."""
    with running_stack() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def aws(localstack_endpoint: str):
    def client(service: str) -> Any:
        return sam_app.client(service, localstack_endpoint)

    return client
