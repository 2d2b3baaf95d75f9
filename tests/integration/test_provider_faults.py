"""Provider faults through litellm and real HTTP: retries, requests never sent, overflow shapes.

Everything goes through `LiteLLMClient`, litellm and a real `OpenAIServer` on 127.0.0.1,
which records every request it receives — so "nothing was sent" is checked on the
server's side, and "retried" is the number of requests that really arrived. Retry waits
are kept small (``retry-after: 0.01``, ``retry_base_delay=0.01``); no test asserts a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import (
    ContextOverflowError,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderRateLimited,
    ProviderUnavailable,
)
from harness.messages import ContentPart, Message, ToolCall
from harness.request import ModelRequest, SystemPart
from providers import ProviderRetry, retries_of
from providers.litellm_client import LiteLLMClient

from .openai_server import SERVER_ERROR, OpenAIServer, Raw, error, reply

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o"
CASES: dict[str, dict[str, Any]] = {
    case["id"]: case
    for case in json.loads(
        (Path(__file__).parents[1] / "data" / "overflow_bodies.json").read_text()
    )["cases"]
}
RATE_LIMITED = CASES["openai_rpm_rate_limit"]["body"]
QUOTA_GONE = CASES["openai_insufficient_quota"]["body"]
OVERLOADED = CASES["anthropic_overloaded_529"]["body"]


def client_for(server: OpenAIServer, **options: Any) -> LiteLLMClient:
    options.setdefault("retry_base_delay", 0.01)
    return LiteLLMClient(MODEL, api_base=server.base_url, api_key="test", timeout=5, **options)


def make_request(*history: Message, model: str = MODEL) -> ModelRequest:
    return ModelRequest(
        model=model,
        system=(SystemPart(name="prompt", text="You are terse."),),
        history=history or (Message.user("hi"),),
    )


def rate_limited(**headers: str) -> Raw:
    return Raw(status=429, body=RATE_LIMITED, headers=headers)


# ------------------------------------------------------------------------------ retries
@pytest.mark.parametrize(
    ("headers", "asked"),
    [
        ({"retry-after": "0.01"}, 0.01),
        ({"retry-after-ms": "20"}, 0.02),
        ({"retry-after-ms": "20", "retry-after": "1"}, 0.02),  # the finer header wins
    ],
    ids=["retry-after", "retry-after-ms", "both"],
)
async def test_rate_limit_is_retried_after_what_the_provider_asked(
    openai_server: OpenAIServer, headers: dict[str, str], asked: float
) -> None:
    openai_server.push(rate_limited(**headers), reply("Back again."))

    response = await client_for(openai_server).complete(make_request())

    assert response.message.text == "Back again."
    assert len(openai_server.requests) == 2
    assert openai_server.requests[0] == openai_server.requests[1]  # the same request resent
    assert retries_of(response) == (
        ProviderRetry(
            attempt=1, status=429, error="ProviderRateLimited", wait_s=asked, retry_after_s=asked
        ),
    )
    assert retries_of(response)[0].label == f"provider_retry:429:{asked:.2f}s"


@pytest.mark.parametrize(
    "failure",
    [
        Raw(status=503, body="upstream unavailable"),
        error(529, OVERLOADED),
        error(500, SERVER_ERROR),
    ],
    ids=["503", "529-overloaded", "500"],
)
async def test_transient_server_failure_is_retried(
    openai_server: OpenAIServer, failure: Raw
) -> None:
    openai_server.push(failure, reply("Recovered."))

    response = await client_for(openai_server).complete(make_request())

    assert response.message.text == "Recovered."
    assert len(openai_server.requests) == 2
    (retry,) = retries_of(response)
    assert (retry.attempt, retry.status, retry.error) == (1, failure.status, "ProviderUnavailable")
    assert retry.retry_after_s is None
    assert 0 < retry.wait_s <= 0.01  # the back-off, not a provider's retry-after


async def test_retries_while_opening_a_stream_are_recorded_on_the_final_response(
    openai_server: OpenAIServer,
) -> None:
    openai_server.push(rate_limited(**{"retry-after": "0.01"}), reply("Streamed after a wait."))

    chunks = [c async for c in client_for(openai_server).stream(make_request())]

    final = chunks[-1].response
    assert final is not None
    assert final.message.text == "Streamed after a wait."
    assert [r.status for r in retries_of(final)] == [429]
    assert len(openai_server.requests) == 2


async def test_rate_limit_forever_ends_after_the_bounded_retries(
    openai_server: OpenAIServer,
) -> None:
    openai_server.default = rate_limited(**{"retry-after": "0.01"})

    with pytest.raises(ProviderRateLimited) as caught:
        await client_for(openai_server, max_retries=2).complete(make_request())

    error_ = caught.value
    assert error_.status == 429
    assert len(openai_server.requests) == 3  # the first attempt and 2 retries
    retries = error_.provider_retries
    assert [(r.attempt, r.status, r.wait_s) for r in retries] == [(1, 429, 0.01), (2, 429, 0.01)]
    assert "Gave up after 2 retries" in str(error_)
    assert "Rate limit reached" in str(error_)  # the provider's own words are kept
    assert type(error_.__cause__).__module__.startswith("litellm")


async def test_default_client_retries_three_times(openai_server: OpenAIServer) -> None:
    openai_server.default = rate_limited(**{"retry-after": "0.01"})

    with pytest.raises(ProviderRateLimited) as caught:
        await client_for(openai_server).complete(make_request())

    assert len(openai_server.requests) == 4
    assert len(caught.value.provider_retries) == 3


async def test_retry_after_beyond_the_bound_is_not_waited_for(
    openai_server: OpenAIServer,
) -> None:
    openai_server.push(rate_limited(**{"retry-after": "120"}))

    with pytest.raises(ProviderRateLimited) as caught:
        await client_for(openai_server, max_retry_wait=1).complete(make_request())

    assert len(openai_server.requests) == 1
    assert "asked to wait 120 s" in str(caught.value)
    assert "max_retry_wait" in str(caught.value)
    assert caught.value.retry_after == 120
    assert caught.value.provider_retries == ()


@pytest.mark.parametrize(
    "failure",
    [
        Raw(status=429, body=QUOTA_GONE, headers={"retry-after": "0.01"}),
        error(429, CASES["openai_tpm_request_too_large"]["body"]),
        error(400, CASES["vertex_input_token_count_only_supports"]["body"]),
        error(401, CASES["openai_invalid_api_key"]["body"]),
        error(400, CASES["openai_max_tokens_too_large"]["body"]),
    ],
    ids=["quota-exhausted", "request-over-tpm", "overflow", "auth", "bad-request"],
)
async def test_failures_that_waiting_cannot_fix_are_not_retried(
    openai_server: OpenAIServer, failure: Raw
) -> None:
    openai_server.push(failure)

    with pytest.raises(
        (ProviderRateLimited, ContextOverflowError, ProviderAuthError, ProviderBadRequest)
    ) as caught:
        await client_for(openai_server).complete(make_request())

    assert len(openai_server.requests) == 1
    assert caught.value.provider_retries == ()


async def test_max_retries_zero_turns_retrying_off(openai_server: OpenAIServer) -> None:
    openai_server.push(Raw(status=503, body="upstream unavailable"), reply("never reached"))

    with pytest.raises(ProviderUnavailable):
        await client_for(openai_server, max_retries=0).complete(make_request())

    assert len(openai_server.requests) == 1


# ------------------------------------------------------------- overflow shapes over HTTP
@pytest.mark.parametrize(
    "case_id",
    [
        "vertex_input_token_count_only_supports",
        "tgi_inputs_plus_max_new_tokens_422",
        "tgi_inputs_must_have_less_than_422",
    ],
)
async def test_vertex_and_tgi_overflow_bodies_are_overflows_with_the_cause_kept(
    openai_server: OpenAIServer, case_id: str
) -> None:
    case = CASES[case_id]
    openai_server.push(error(case["status"], case["body"]))

    with pytest.raises(ContextOverflowError) as caught:
        await client_for(openai_server).complete(make_request())

    assert caught.value.status == case["status"]
    assert len(openai_server.requests) == 1  # compaction's job, never the client's retry
    cause = caught.value.__cause__
    assert cause is not None and type(cause).__module__.startswith("litellm")
    assert getattr(cause, "status_code", None) == case["status"]


async def test_overflow_on_every_attempt_keeps_the_provider_error_as_cause(
    openai_server: OpenAIServer,
) -> None:
    case = CASES["tgi_inputs_must_have_less_than_422"]
    openai_server.default = error(case["status"], case["body"])
    client = client_for(openai_server)

    for _ in range(2):
        with pytest.raises(ContextOverflowError) as caught:
            await client.complete(make_request())
        assert caught.value.__cause__ is not None
        assert getattr(caught.value.__cause__, "status_code", None) == 422
        assert "must have less than 4000 tokens" in str(caught.value)  # TGI's own words


# ------------------------------------------------------------- requests never sent
@pytest.mark.parametrize(
    ("history", "where"),
    [
        ((Message.user("caf\udce9 au lait"),), "message 1 of 2 (role 'user') at content"),
        (
            (
                Message(
                    role="user",
                    content=(
                        ContentPart(type="text", text="ok"),
                        ContentPart(type="text", text="\ud83d"),
                    ),
                ),
            ),
            "message 1 of 2 (role 'user') at content[1].text",
        ),
        (
            (
                Message.user("weather?"),
                Message.assistant(
                    tool_calls=(ToolCall(id="c1", name="w", arguments='{"city": "\udcff"}'),)
                ),
                Message.tool("c1", "sunny", name="w"),
            ),
            "message 2 of 4 (role 'assistant') at tool_calls[0].function.arguments",
        ),
    ],
    ids=["user-text", "content-part", "tool-call-arguments"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_lone_surrogate_is_refused_before_sending_and_not_retried(
    openai_server: OpenAIServer, history: tuple[Message, ...], where: str, streaming: bool
) -> None:
    client = client_for(openai_server)

    with pytest.raises(ProviderBadRequest) as caught:
        if streaming:
            _ = [c async for c in client.stream(make_request(*history))]
        else:
            await client.complete(make_request(*history))

    error_ = caught.value
    assert openai_server.requests == []  # nothing was sent, and nothing was retried
    assert error_.status is None
    assert error_.sent is False
    assert where in str(error_)
    assert "UTF-8" in str(error_) and "retrying will not help" in str(error_)
    assert "HTTP" not in str(error_)
    assert isinstance(error_.__cause__, UnicodeEncodeError)


async def test_unencodable_setting_is_caught_where_litellm_fails(
    openai_server: OpenAIServer,
) -> None:
    """Text outside the messages (a setting) fails inside litellm: still no status, no retry."""
    client = client_for(openai_server, user="id-\udc80")

    with pytest.raises(ProviderBadRequest) as caught:
        await client.complete(make_request())

    assert openai_server.requests == []
    assert caught.value.status is None
    assert caught.value.sent is False
    assert "nothing was sent" in str(caught.value)
    assert "500" not in str(caught.value)


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
async def test_unknown_model_names_the_provider_model_form(
    openai_server: OpenAIServer, streaming: bool
) -> None:
    client = LiteLLMClient("my-local-model", api_base=openai_server.base_url, api_key="test")
    request = make_request(model="my-local-model")

    with pytest.raises(ProviderBadRequest) as caught:
        if streaming:
            _ = [c async for c in client.stream(request)]
        else:
            await client.complete(request)

    text = str(caught.value)
    assert caught.value.status is None
    assert caught.value.sent is False
    assert "'my-local-model'" in text
    assert "'openai/my-local-model'" in text and "provider/model" in text and "anthropic/" in text
    assert "HTTP" not in text and "message shapes" not in text
    assert openai_server.requests == []


async def test_missing_openai_key_is_reported_without_a_status(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LiteLLMClient(MODEL, api_base=openai_server.base_url, retry_base_delay=0.01)

    with pytest.raises(ProviderAuthError) as caught:
        await client.complete(make_request())

    assert caught.value.status is None
    assert caught.value.sent is False
    assert "api_key=" in str(caught.value) and "nothing was sent" in str(caught.value)
    assert "HTTP 500" not in str(caught.value)
    assert openai_server.requests == []


async def test_missing_anthropic_key_is_reported_without_a_status(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    model = "anthropic/claude-sonnet-4-5"
    client = LiteLLMClient(model, api_base=openai_server.base_url, retry_base_delay=0.01)

    with pytest.raises(ProviderAuthError) as caught:
        await client.complete(make_request(model=model))

    assert caught.value.status is None
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    assert openai_server.requests == []


async def test_a_real_401_keeps_its_status(openai_server: OpenAIServer) -> None:
    """The 'never sent' rule does not swallow a key the server really rejected."""
    openai_server.push(error(401, {"error": {"message": "No API key provided.", "code": None}}))

    with pytest.raises(ProviderAuthError) as caught:
        await client_for(openai_server).complete(make_request())

    assert caught.value.status == 401
    assert len(openai_server.requests) == 1
