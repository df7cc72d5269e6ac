"""Checking the HTTP service's answers against its own OpenAPI document (schemathesis), the
same way in both test layers."""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.checks import positive_data_acceptance


def call_and_check(case: schemathesis.Case, headers: dict[str, str], **checks: Any) -> schemathesis.Response:
    """Send ``case`` with ``headers`` (the key) and run every check on the answer, as
    ``case.call_and_validate`` does: the status is one the document declares for the operation,
    the body is valid against that status's schema and has its content type, a valid request is
    accepted, an invalid one refused, a request without the key refused, and nothing is a 5xx.
    One exception: a valid text may be refused 422 ContextLengthError, since its length in tokens
    is the one rule the document can only state in words."""
    response = case.call(headers=headers)
    excluded = list(checks.pop("excluded_checks", []))
    if response.status_code == 422 and response.json()["error"]["type"] == "ContextLengthError":
        excluded.append(positive_data_acceptance)
    case.validate_response(
        response, headers=headers, transport_kwargs={"headers": headers}, excluded_checks=excluded, **checks
    )
    return response
