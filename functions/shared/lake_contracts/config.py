"""A function's environment as a typed model, read once and validated at cold start: a missing or malformed
variable fails the function's init with the variable's name (not an empty string found at the first call).

    class Settings(BaseModel):
        artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET", min_length=1)

    SETTINGS = from_environment(Settings)      # at module level: the init phase
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ConfigurationError(RuntimeError):
    """The function's environment is missing a variable or holds a malformed one (each named)."""


def from_environment(model: type[Model], environment: Mapping[str, str] | None = None) -> Model:
    """`model` validated from the environment variables its fields name (their aliases)."""
    values = dict(os.environ if environment is None else environment)
    try:
        return model.model_validate(values)
    except ValidationError as error:
        problems = []
        for problem in error.errors():
            name = ".".join(str(part) for part in problem["loc"]) or "(the environment)"
            given = values.get(name)
            shown = "not set" if given is None else repr(given[:200])
            problems.append(f"{name} ({shown}): {problem['msg']}")
        raise ConfigurationError(
            f"{model.__name__}: the function's environment is invalid: {'; '.join(problems)}"
        ) from None
