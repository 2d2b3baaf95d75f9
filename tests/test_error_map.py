"""The provider-error mapper, case by case, against real-shaped provider bodies.

``tests/data/overflow_bodies.json`` holds one body per provider wording and the class it
must become. Here each body goes through the mapper as text and as the litellm exception
litellm raises for it (its message carries only the provider's ``error.message``; the
whole body stays on ``response``). ``tests/integration/test_litellm_client.py`` sends the
same bodies over real HTTP through litellm.
"""

from __future__ import annotations

import email.utils
import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness.errors import (
    ConfigurationError,
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
    retry_after_of,
    suspected_overflow,
    translate_error,
)
from providers.litellm_client import load_litellm
from providers.retry import RetryPolicy

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


def litellm_exception(status: int, body: Any, headers: dict[str, str] | None = None) -> Exception:
    """Build the exception litellm raises for an OpenAI-compatible answer ``status``/``body``."""
    litellm = load_litellm()
    response = httpx.Response(
        status,
        content=body_text(body).encode(),
        headers=headers,
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
    assert error.model == "gpt-4o"
    assert error.detail  # the provider's own words are kept
    assert "litellm." not in error.detail


# ----------------------------------------------------------- the window an error states
STATED_WINDOW: dict[str, int | None] = {
    "openai_context_length_exceeded": 128000,
    "openai_messages_and_completion": 8192,
    "anthropic_prompt_too_long": 200000,
    "anthropic_input_plus_max_tokens": 200000,
    "deepseek_maximum_context_length": 131072,
    "openrouter_endpoint_context_length": 131072,
    "gemini_input_token_count": 1048576,
    "mistral_prompt_too_large": 131072,
    "vllm_maximum_context_length": 16384,
    "vllm_decoder_prompt_longer": 16384,
    "vllm_input_prompt_exceeds_limit": 8192,
    "llamacpp_exceed_context_size": 4096,
    "lm_studio_context_overflows": 4096,
    "cerebras_current_length": 8192,
    "xai_maximum_prompt_length": 131072,
    "together_longer_than_context": 262144,
    "moonshot_exceeded_token_limit": 262144,
    "vertex_input_token_count_only_supports": 1048576,
    "tgi_inputs_plus_max_new_tokens_422": 4096,
    # The number is the excess, not the window: nothing to learn.
    "ollama_prompt_too_long": None,
    "llamacpp_context_exceeded_as_500": None,
    "groq_context_length_exceeded": None,
}


@pytest.mark.parametrize("case_id", sorted(STATED_WINDOW))
def test_an_overflow_carries_the_window_its_text_states(case_id: str) -> None:
    case = by_id(case_id)
    error = translate_error(litellm_exception(case["status"], case["body"]), model="m")

    assert isinstance(error, ContextOverflowError)
    assert error.window == STATED_WINDOW[case_id]


def test_a_window_is_not_read_from_a_non_overflow() -> None:
    case = by_id("openai_max_tokens_too_large")
    error = translate_error(litellm_exception(case["status"], case["body"]), model="m")

    assert type(error) is ProviderBadRequest
    assert not hasattr(error, "window")


def test_an_unexplained_400_of_a_nearly_full_request_is_a_suspected_overflow() -> None:
    bare = translate_error(litellm_exception(400, {"error": {"message": "Bad Request"}}), model="m")
    assert type(bare) is ProviderBadRequest

    suspected = suspected_overflow(bare, needed=7_900, room=8_192)
    assert isinstance(suspected, ContextOverflowError)
    assert suspected.reason == "suspected_overflow"
    assert suspected.status == 400
    assert "Bad Request" in suspected.message

    assert suspected_overflow(bare, needed=4_000, room=8_192) is None
    unsent = ProviderBadRequest("x", status=None, sent=False)
    assert suspected_overflow(unsent, needed=8_000, room=8_192) is None
    auth = translate_error(litellm_exception(401, {"error": {"message": "no"}}), model="m")
    assert suspected_overflow(auth, needed=8_000, room=8_192) is None


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


# ----------------------------------------------------------------- retry-after and retries
def by_id(case_id: str) -> dict[str, Any]:
    return next(case for case in CASES if case["id"] == case_id)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_from_the_answer_headers(
    headers: dict[str, str], expected: float | None
) -> None:
    raised = litellm_exception(429, by_id("openai_rpm_rate_limit")["body"], headers)
    assert retry_after_of(raised) == expected
    assert translate_error(raised).retry_after == expected


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    raised = litellm_exception(503, "busy", {"retry-after": when})

    wait = retry_after_of(raised)

    assert wait is not None and 60 < wait <= 121


def decide(
    case_id: str, headers: dict[str, str] | None = None, *, attempt: int = 1, **policy: Any
) -> float | None:
    case = by_id(case_id)
    raised = litellm_exception(case["status"], case["body"], headers)
    try:
        raise translate_error(raised) from raised
    except ProviderError as error:
        return RetryPolicy(**policy).decide(error, attempt=attempt).wait_s


def test_rate_limits_and_transient_5xx_are_retried_others_not() -> None:
    assert decide("openai_rpm_rate_limit", {"retry-after": "2"}) == 2.0
    assert decide("anthropic_rate_limit_input_tokens", {"retry-after-ms": "100"}) == 0.1
    assert decide("anthropic_overloaded_529", base_delay=1.0) is not None
    assert decide("gateway_503_plain_text", {"retry-after": "1"}) == 1.0
    for never in (
        "openai_insufficient_quota",
        "openai_tpm_request_too_large",
        "anthropic_long_context_extra_usage",
        "openai_context_length_exceeded",
        "gateway_overflow_sent_as_429",
        "llamacpp_context_exceeded_as_500",
        "openai_invalid_api_key",
        "openai_max_tokens_too_large",
    ):
        assert decide(never, {"retry-after": "1"}) is None, never


def test_backoff_doubles_with_jitter_and_stays_bounded() -> None:
    for attempt, (low, high) in enumerate([(0.5, 1.0), (1.0, 2.0), (2.0, 4.0)], start=1):
        wait = decide("openai_server_error", attempt=attempt, base_delay=1.0, max_retries=5)
        assert wait is not None and low <= wait <= high
    assert decide("openai_server_error", attempt=6, max_retries=5) is None
    capped = decide("openai_server_error", attempt=5, base_delay=1.0, max_retries=5, max_wait=3)
    assert capped is not None and capped <= 3


def test_a_retry_after_over_the_bound_is_not_retried_and_says_why() -> None:
    case = by_id("openai_rpm_rate_limit")
    raised = litellm_exception(429, case["body"], {"retry-after": "60"})
    try:
        raise translate_error(raised) from raised
    except ProviderError as error:
        decision = RetryPolicy(max_wait=30).decide(error, attempt=1)
    assert decision.wait_s is None
    assert decision.retry_after_s == 60
    assert "asked to wait 60 s" in decision.reason and "max_retry_wait (30 s)" in decision.reason


@pytest.mark.parametrize(
    "bad",
    [{"max_retries": -1}, {"max_retries": 1.5}, {"max_wait": 0}, {"base_delay": float("nan")}],
)
def test_retry_policy_refuses_bad_bounds(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**bad)


# ---------------------------------------------------------- failures before any request
def test_a_missing_key_litellm_raised_itself_has_no_status() -> None:
    litellm = load_litellm()
    raised = litellm.AuthenticationError(
        message="Missing Anthropic API Key - A call is being made to anthropic but no key is set",
        llm_provider="anthropic",
        model="claude-x",
    )

    error = translate_error(raised, model="claude-x")

    assert isinstance(error, ProviderAuthError)
    assert error.status is None
    assert error.sent is False
    assert "nothing was sent" in str(error) and "HTTP" not in str(error)


def test_the_same_words_from_a_real_answer_keep_the_status() -> None:
    raised = litellm_exception(401, {"error": {"message": "Missing credentials: no api key"}})

    error = translate_error(raised)

    assert isinstance(error, ProviderAuthError)
    assert error.status == 401
    assert error.sent is True  # a real answer came back


def test_an_unroutable_model_has_no_status_and_names_the_provider_form() -> None:
    litellm = load_litellm()
    raised = litellm.BadRequestError(
        message="LLM Provider NOT provided. Pass in the LLM provider you are trying to call.",
        model="my-model",
        llm_provider="",
    )

    error = translate_error(raised, model="my-model")

    assert isinstance(error, ProviderBadRequest)
    assert error.status is None
    assert "'openai/my-model'" in str(error) and "'my-model'" in str(error)


def test_an_encoding_failure_under_the_sdk_has_no_status() -> None:
    litellm = load_litellm()
    try:
        try:
            "\ud800".encode()
        except UnicodeEncodeError as inner:
            raise litellm.InternalServerError(
                message=f"OpenAIException - {inner}", model="gpt-4o", llm_provider="openai"
            ) from inner
    except Exception as raised:
        error = translate_error(raised, model="gpt-4o")

    assert isinstance(error, ProviderBadRequest)
    assert error.status is None
    assert "retrying will not help" in str(error)
