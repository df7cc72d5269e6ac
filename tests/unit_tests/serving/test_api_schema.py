"""The service's OpenAPI document tells the truth. Requests generated from its own
``/openapi.json`` (schemathesis), sent in process to the app over the canned vLLM with the API
key on, each get a status the document declares for the operation, a body valid against that
status's schema and the declared content type; valid requests are accepted, invalid ones
rejected, a request without the key refused, and none is answered 5xx: ``POST /v1/classify``
and ``POST /v1/decisions`` alike. The document's rule for a blank text is the classifier's, code
point by code point, and the vLLM server's failures answer as the document says too, on both
routes."""

from __future__ import annotations

import re
import sys
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.classification import validate_text
from langchain_qwen_fast.errors import InvalidInputError
from langchain_qwen_fast.serving.service import ServiceOptions, create_app
from langchain_qwen_fast.serving.service.schema import NON_BLANK
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from tests.support.fake_vllm import FakeVLLM, raw, status, timeout
from tests.support.openapi import call_and_check

KEY = "sk-schema-5"
AUTHORISED = {"Authorization": f"Bearer {KEY}"}
#: A decisions request of one question: one prompt, so one queued fault fails it.
DECISION = {
    "model": "qwen3",
    "input": "Stocks rally",
    "questions": [{"type": "predicate", "instructions": "Good news?"}],
}


# A text's limit in characters well below the default (65,536): schemathesis merges the
# document's non-blank pattern and the limit into one regex, ``^[...]{1,limit}$``, and compiling
# and canonicalising it costs close to a second a strategy at the default (most of this module's
# time), a few milliseconds here; generated texts reach the limit more often too.
MAX_TEXT_CHARS = 256
# Few questions and choices a decisions request, for the same reason: the generated requests
# reach the limits, and each stays small.
MAX_QUESTIONS = 4
MAX_CHOICES = 5


def app_over(fake: FakeVLLM) -> Any:
    classifier = QwenClassifier(
        labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1", http_transport=fake.transport, max_retries=0
    )
    options = ServiceOptions(
        api_key=KEY, max_wait_ms=1, max_text_chars=MAX_TEXT_CHARS, max_questions=MAX_QUESTIONS, max_choices=MAX_CHOICES
    )
    return create_app(classifier, options)


def refusing_oversize_bodies(document: Any) -> Any:
    """``document`` with 413 among the answers its checks take for valid and invalid data alike:
    a body over the service's byte limit is refused before it is read, a rule no schema keyword
    can state (the document gives it in words), as a text's length in tokens is."""
    checks = document.config.checks
    for config in (checks.negative_data_rejection, checks.positive_data_acceptance):
        config.expected_statuses = [*config.expected_statuses, "413"]
    return document


schema = refusing_oversize_bodies(schemathesis.openapi.from_asgi("/openapi.json", app_over(FakeVLLM())))


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_answer_matches_the_document(case: schemathesis.Case) -> None:
    call_and_check(case, AUTHORISED)


def test_the_blank_text_rule_is_the_classifiers_at_every_code_point() -> None:
    document = schema.raw_schema["components"]["schemas"]["ClassifyRequest"]["properties"]["input"]["anyOf"][0]
    assert document["pattern"] == NON_BLANK and document["minLength"] == 1
    python = re.compile(NON_BLANK)
    rust = jsonschema_rs.validator_for(document)  # the validator schemathesis checks answers with
    disagree = []
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if 0xD800 <= point <= 0xDFFF:  # lone surrogates: not Unicode text, refused as such
            continue
        try:
            validate_text(char)
            accepted = True
        except InvalidInputError:
            accepted = False
        if len({accepted, bool(python.search(char)), rust.is_valid(char)}) > 1:
            disagree.append(hex(point))
    assert disagree == []


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (status(503, {"Retry-After": "3"}, message="overloaded"), 503),
        (status(429, {"Retry-After": "3"}), 429),
        (status(400), 422),  # the server refused the text itself
        (raw(b"{not json"), 502),
        (timeout(), 504),
    ],
)
@pytest.mark.parametrize(("path", "body"), [("/v1/classify", {"input": "Stocks rally"}), ("/v1/decisions", DECISION)])
def test_a_vllm_failure_answers_as_the_document_says(fault: Any, code: int, path: str, body: dict[str, Any]) -> None:
    fake = FakeVLLM()
    failing = schemathesis.openapi.from_asgi("/openapi.json", app_over(fake))
    case = failing[path]["POST"].Case(body=body)
    call_and_check(case, AUTHORISED, excluded_checks=[not_a_server_error])  # the set-up, while vLLM is up
    fake.fail("/v1/completions", fault)
    response = call_and_check(case, AUTHORISED, excluded_checks=[not_a_server_error])
    assert response.status_code == code


def test_the_document_declares_the_limits_statuses_and_headers() -> None:
    """Each limit is in the document as a schema keyword or a status, with the headers the
    answers carry: a client generated from it knows what is refused and why."""
    document = create_app(
        QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1"),
        ServiceOptions(max_texts=7, max_text_chars=99, max_body_bytes=12345, max_queued_texts=50),
    ).openapi()
    one, many = document["components"]["schemas"]["ClassifyRequest"]["properties"]["input"]["anyOf"]
    assert (one["maxLength"], many["maxItems"], many["items"]["maxLength"]) == (99, 7, 99)
    answers = document["paths"]["/v1/classify"]["post"]["responses"]
    assert {"408", "413", "422", "429", "500", "502", "503", "504"} <= set(answers)
    assert "12345 bytes" in answers["413"]["description"] and "50 texts" in answers["429"]["description"]
    assert {"Retry-After"} <= set(answers["429"]["headers"]) and {"Retry-After"} <= set(answers["503"]["headers"])
    assert all("x-request-id" in answers[code]["headers"] for code in ("500", "502", "503", "504"))
    ready = document["paths"]["/ready"]["get"]["responses"]
    assert set(ready) == {"200", "503"} and "/health" in document["paths"]
    decided = document["paths"]["/v1/decisions"]["post"]["responses"]
    assert set(answers) <= set(decided) and "12345 bytes" in decided["413"]["description"]
    assert "50 prompts" in decided["429"]["description"] and {"Retry-After"} <= set(decided["429"]["headers"])
    assert all("x-request-id" in answer["headers"] for answer in decided.values())  # langchain-openai reads it
    questions = document["components"]["schemas"]["DecisionsRequest"]["properties"]["questions"]
    assert questions["maxItems"] == 50  # max_questions, bounded by the line


def test_the_document_names_the_key_metrics_format_and_labels_as_served() -> None:
    keyless = create_app(QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1")).openapi()
    for document, keyed in [(schema.raw_schema, True), (keyless, False)]:
        classify, metrics = document["paths"]["/v1/classify"]["post"], document["paths"]["/metrics"]["get"]
        assert ("401" in classify["responses"]) == ("401" in metrics["responses"]) == ("security" in classify) == keyed
        decisions = document["paths"]["/v1/decisions"]["post"]
        assert ("401" in decisions["responses"]) == ("security" in decisions) == keyed
        assert list(metrics["responses"]["200"]["content"]) == ["text/plain"]
        label = document["components"]["schemas"]["Classification"]["properties"]["labels"]["items"]
        assert label["enum"] == list(AG_NEWS_LABELS)


def test_the_document_refuses_a_choice_question_whose_choices_repeat() -> None:
    """Two identical choices repeat a value, which the service answers 422: the document says
    so with ``uniqueItems``, so a client (or a fuzzer) that keeps to it never sends them."""
    document = schema.raw_schema
    choices = document["components"]["schemas"]["ChoiceQuestion"]["properties"]["choices"]
    assert choices["uniqueItems"] is True
    request = {"$ref": "#/components/schemas/DecisionsRequest", "components": document["components"]}
    validator = jsonschema_rs.validator_for(request)
    question = {"type": "choice", "instructions": "Which?"}
    repeated = {**DECISION, "questions": [{**question, "choices": [{"value": "a"}, {"value": "a"}]}]}
    distinct = {**DECISION, "questions": [{**question, "choices": [{"value": "a"}, {"value": True}]}]}
    assert not validator.is_valid(repeated) and validator.is_valid(distinct)
