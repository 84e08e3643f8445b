"""The rules template.yaml declares for its parameters, and the values CloudFormation would refuse by them: a
value outside AllowedValues, a String not matching its AllowedPattern (the whole value) or outside MinLength /
MaxLength, a Number that is no number or outside MinValue / MaxValue. The preflight says so before `sam build`;
the local AWS (LocalStack checks none of them) refuses them too, so no test passes on a stack AWS would refuse."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy import stack_names


def declarations(template: Path = stack_names.TEMPLATE) -> dict[str, dict[str, Any]]:
    """The template's Parameters as declared, read now (a built template changes between builds)."""
    return dict(stack_names.load_template(template).get("Parameters") or {})


def refused(values: Mapping[str, str], declared: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why CloudFormation would refuse these parameter values, one line a refusal ([] if none). A name the
    template does not declare is no refusal: `sam deploy` sends only the template's parameters."""
    refusals = []
    for name, value in values.items():
        rules = declared.get(name)
        if rules is None:
            continue
        allowed = rules.get("AllowedValues")
        pattern = rules.get("AllowedPattern")
        if allowed is not None and value not in [
            str(a).lower() if isinstance(a, bool) else str(a) for a in allowed
        ]:
            refusals.append(f"{name}={value!r}: not one of {allowed}")
        if pattern is not None and not re.fullmatch(pattern, value):
            refusals.append(f"{name}={value!r}: does not match {pattern}")
        if not int(rules.get("MinLength", 0)) <= len(value) <= int(rules.get("MaxLength", len(value))):
            refusals.append(
                f"{name}={value!r}: length outside {rules.get('MinLength')}..{rules.get('MaxLength')}"
            )
        if rules.get("Type") == "Number":
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                refusals.append(f"{name}={value!r}: not a number")
            elif not float(rules.get("MinValue", number)) <= number <= float(rules.get("MaxValue", number)):
                refusals.append(f"{name}={value!r}: outside {rules.get('MinValue')}..{rules.get('MaxValue')}")
    return refusals
