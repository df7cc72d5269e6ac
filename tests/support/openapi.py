"""Checking the HTTP service's answers against its own OpenAPI document (schemathesis), the
same way in both test layers."""

from __future__ import annotations

import re
from typing import Any

import schemathesis
from schemathesis.checks import positive_data_acceptance

#: The 422 answers' types for a valid text that the vLLM server's answer decides.
SERVER_REFUSALS = frozenset({"ContextLengthError", "ServerStatusError", "LabelParseError"})
#: The 422 messages of ``POST /v1/decisions``'s rules that its document states in words only (no
#: schema keyword can): distinct question names, distinct choice values, the input's length as
#: rendered, and answers sharing first tokens that the vLLM server cannot score.
WORDED_REFUSALS = re.compile(
    r"question names must be distinct|choice values must be distinct|input renders to \d+ characters"
    r"|its labels share first tokens"
)


def refused_in_words(response: schemathesis.Response) -> bool:
    """Whether ``response`` is a 422 for a rule only the document's words or the vLLM server
    can tell (see :data:`SERVER_REFUSALS` and :data:`WORDED_REFUSALS`)."""
    if response.status_code != 422:
        return False
    error = response.json()["error"]
    return error["type"] in SERVER_REFUSALS or bool(
        error["type"] == "InvalidInputError" and WORDED_REFUSALS.search(error["message"])
    )


def call_and_check(
    case: schemathesis.Case, headers: dict[str, str], base_url: str | None = None, **checks: Any
) -> schemathesis.Response:
    """Send ``case`` with ``headers`` (the key), to ``base_url`` if given (else to the app the
    document was read from), and run every check on the answer, as ``case.call_and_validate``
    does: the status is one the document declares for the operation, the body is valid against
    that status's schema and has its content type, a valid request is accepted, an invalid one
    refused, a request without the key refused, and nothing is a 5xx. One exception: a valid
    request may be answered 422 for what only the vLLM server can tell (too long in tokens,
    refused for its content, or answered with what no label reads) or for a decisions rule no
    schema keyword states (:func:`refused_in_words`), rules the document can only state in
    words."""
    response = case.call(base_url, headers=headers)
    excluded = list(checks.pop("excluded_checks", []))
    if refused_in_words(response):
        excluded.append(positive_data_acceptance)
    # The checks that send the request again (without the key, say) send it where this one went.
    sent = {"headers": headers, **({"base_url": base_url} if base_url else {})}
    case.validate_response(response, headers=headers, transport_kwargs=sent, excluded_checks=excluded, **checks)
    return response
