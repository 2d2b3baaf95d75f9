"""Fixtures for integration tests: a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .openai_server import OpenAIServer


@pytest.fixture
def anyio_backend() -> str:
    """litellm runs on asyncio only, so the tests that reach it do too."""
    return "asyncio"


@pytest.fixture
def fresh_learning() -> Iterator[None]:
    """Forget what this process learned of windows and calibration, before and after a test.

    As a fresh process (or another proxy replica) would start: the tests of learned ratios
    and discovered windows must not see each other's.
    """
    from harness.policy import forget_window_warnings
    from harness.tokens.calibration import LEARNED
    from providers.windows import forget_windows

    def forget() -> None:
        forget_windows()
        forget_window_warnings()
        LEARNED.forget()

    forget()
    yield
    forget()


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """Start a fresh scriptable OpenAI chat-completions server for one test."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _litellm_loaded() -> None:
    """Import litellm once per session (it takes seconds), outside any test's own time."""
    from providers.litellm_client import load_litellm

    load_litellm()
