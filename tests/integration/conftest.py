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
def openai_server() -> Iterator[OpenAIServer]:
    """Start a fresh scriptable OpenAI chat-completions server for one test."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _litellm_loaded() -> None:
    """Import litellm once per session (it takes seconds), outside any test's own time."""
    from providers.litellm_client import load_litellm

    load_litellm()
