"""The provider-error mapper, case by case, against real-shaped provider bodies.

``tests/data/overflow_bodies.json`` holds one body per provider wording and the class it
must become. Here each body goes through the mapper as text and as the litellm exception
litellm raises for it (its message carries only the provider's ``error.message``; the
whole body stays on ``response``). ``tests/integration/test_litellm_client.py`` sends the
same bodies over real HTTP through litellm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness.errors import (
    ContextOverflowError,
    HarnessError,
    InvalidInputError,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from providers.errors import (
    classify,
    is_overflow_text,
    overflow_from_finish,
    provider_errors,
    translate_error,
)
from providers.litellm_client import load_litellm

TABLE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "overflow_bodies.json").read_text()
)
CASES: list[dict[str, Any]] = TABLE["cases"]
IDS = [case["id"] for case in CASES]
EXPECT: dict[str, type[ProviderError]] = {
    "overflow": ContextOverflowError,
    "rate_limited": ProviderRateLimited,
    "auth": ProviderAuthError,
    "bad_request": ProviderBadRequest,
    "unavailable": ProviderUnavailable,
}


@pytest.fixture(scope="module", autouse=True)
def _litellm_loaded() -> None:
    """Import litellm once (it takes seconds), outside any test's own time."""
    load_litellm()


def body_text(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body)


def provider_message(body: Any) -> str:
    """What litellm puts in an exception's message: the body's ``error.message`` if any."""
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return body_text(body)


def litellm_exception(status: int, body: Any) -> Exception:
    """Build the exception litellm raises for an OpenAI-compatible answer ``status``/``body``."""
    litellm = load_litellm()
    response = httpx.Response(
        status,
        content=body_text(body).encode(),
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )
    message = f"OpenAIException - {provider_message(body)}"
    common: dict[str, Any] = {"message": message, "model": "gpt-4o", "llm_provider": "openai"}
    by_status = {
        400: litellm.BadRequestError,
        413: litellm.BadRequestError,
        401: litellm.AuthenticationError,
        403: litellm.PermissionDeniedError,
        429: litellm.RateLimitError,
        503: litellm.ServiceUnavailableError,
    }
    raised: Exception
    if status in by_status:
        raised = by_status[status](response=response, **common)
    elif status >= 500:  # litellm reports these as 500 and keeps the real status aside
        raised = litellm.InternalServerError(
            response=response, provider_status_code=status, **common
        )
    else:
        raised = litellm.APIError(status_code=status, response=response, **common)
    return raised


# ---------------------------------------------------------------------- the body table
def test_table_covers_every_class_and_the_named_providers() -> None:
    assert {case["expect"] for case in CASES} == set(EXPECT)
    assert len(IDS) == len(set(IDS))
    for needed in (
        "openai",
        "anthropic",
        "deepseek",
        "azure",
        "openrouter",
        "gemini",
        "mistral",
        "vllm",
        "ollama",
        "vertex",
        "tgi",
    ):
        assert any(
            case["id"].startswith(needed) for case in CASES if case["expect"] == "overflow"
        ), needed
    assert any(case["status"] == 429 and case["expect"] == "overflow" for case in CASES)
    assert any(
        case["status"] == 429 and "Request too large" in body_text(case["body"]) for case in CASES
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_body_text_is_classified(case: dict[str, Any]) -> None:
    assert classify(case["status"], body_text(case["body"])) is EXPECT[case["expect"]]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_litellm_exception_is_translated(case: dict[str, Any]) -> None:
    raised = litellm_exception(case["status"], case["body"])

    error = translate_error(raised, model="gpt-4o")

    assert type(error) is EXPECT[case["expect"]], str(error)
    assert error.status == case["status"]
    assert error.provider == "openai"
    assert error.context["model"] == "gpt-4o"
    assert error.context["detail"]  # the provider's own words are kept
    assert "litellm." not in error.context["detail"]


# --------------------------------------------------------------------- specific rules
def test_litellm_context_window_class_is_an_overflow_even_without_known_text() -> None:
    litellm = load_litellm()
    raised = litellm.ContextWindowExceededError(
        message="input rejected", model="m", llm_provider="acme"
    )

    error = translate_error(raised)

    assert isinstance(error, ContextOverflowError)
    assert error.provider == "acme"


def test_sdk_class_names_do_not_count_as_provider_words() -> None:
    """'RateLimitError' in litellm's prefix must not hide an overflow sent with 429."""
    text = "litellm.RateLimitError: RateLimitError: OpenAIException - Prompt exceeds max length"
    assert is_overflow_text(text)
    assert classify(429, text) is ContextOverflowError


def test_per_minute_limits_are_never_overflow() -> None:
    text = "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 45000."
    assert not is_overflow_text(text)
    assert classify(429, text) is ProviderRateLimited
    assert classify(400, text) is ProviderRateLimited


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, ProviderAuthError),
        (403, ProviderAuthError),
        (402, ProviderRateLimited),
        (404, ProviderBadRequest),
        (408, ProviderUnavailable),
        (422, ProviderBadRequest),
        (502, ProviderUnavailable),
        (None, ProviderUnavailable),
    ],
)
def test_status_decides_when_the_text_says_nothing(
    status: int | None, expected: type[ProviderError]
) -> None:
    assert classify(status, "something went wrong") is expected


def test_message_says_what_to_do_next_and_keeps_the_facts() -> None:
    raised = litellm_exception(
        400, {"error": {"message": "prompt is too long: 208732 tokens > 200000 maximum"}}
    )

    error = translate_error(raised, model="claude-x")

    text = str(error)
    assert "HTTP 400" in text and "claude-x" in text
    assert "prompt is too long: 208732 tokens > 200000 maximum" in text
    assert "OverflowRetry" in text
    assert error.context["cause"] == "BadRequestError"


# ------------------------------------------------------------------ the context manager
def test_provider_errors_translates_and_chains() -> None:
    raised = litellm_exception(401, {"error": {"message": "Incorrect API key provided"}})

    with (
        pytest.raises(ProviderAuthError) as caught,
        provider_errors(provider="openai", model="gpt-4o"),
    ):
        raise raised

    assert caught.value.__cause__ is raised
    assert caught.value.status == 401


def test_provider_errors_lets_our_own_errors_and_our_bugs_through() -> None:
    ours = InvalidInputError("bad message")
    with pytest.raises(InvalidInputError) as caught, provider_errors():
        raise ours
    assert caught.value is ours

    with pytest.raises(TypeError), provider_errors():
        raise TypeError("a bug in our code is not a provider failure")


@pytest.mark.parametrize(
    ("raised", "status"),
    [
        (TimeoutError("read timed out"), 408),
        (ConnectionRefusedError(111, "Connection refused"), None),
    ],
    ids=["timeout", "refused"],
)
def test_network_failures_are_unavailable(raised: Exception, status: int | None) -> None:
    with pytest.raises(ProviderUnavailable) as caught, provider_errors(provider="openai"):
        raise raised
    assert caught.value.status == status
    assert isinstance(caught.value, HarnessError)


async def test_cancellation_passes_through() -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        with provider_errors(provider="openai"):
            await anyio.sleep(1)
    assert scope.cancelled_caught


# ------------------------------------------------------------------- finish reasons
@pytest.mark.parametrize(
    ("finish", "native", "completion", "output", "overflow"),
    [
        ("length", None, 0, False, True),
        ("length", None, 0, True, True),  # text with zero generated tokens is provider text
        ("length", None, None, False, True),
        ("length", None, 12, True, False),  # max_tokens cut a real answer short
        ("length", None, None, True, False),
        ("length", "model_context_window_exceeded", 30, True, True),
        ("model_context_window_exceeded", None, 30, True, True),
        ("stop", None, 0, False, False),
        ("tool_calls", None, 9, True, False),
        (None, None, None, False, False),
    ],
)
def test_overflow_from_finish(
    finish: str | None, native: str | None, completion: int | None, output: bool, overflow: bool
) -> None:
    error = overflow_from_finish(
        finish,
        native_reason=native,
        completion_tokens=completion,
        produced_output=output,
        provider="anthropic",
        model="claude-x",
    )
    assert (error is not None) is overflow
    if error is not None:
        assert error.status == 200
        assert error.provider == "anthropic"
        assert "compact" in str(error)


def test_a_missing_key_is_an_auth_error_even_when_litellm_reports_it_as_a_500() -> None:
    text = (
        "Missing credentials. Please pass an `api_key`, `workload_identity`, or set the "
        "`OPENAI_API_KEY` environment variable."
    )
    assert classify(500, text, classes=frozenset({"InternalServerError"})) is ProviderAuthError
