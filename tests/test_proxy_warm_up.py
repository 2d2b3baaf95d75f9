"""The proxy hook's warm-up: one offline preparation when the hook is built, never a stored one.

What a worker's first request used to load lazily is loaded when the proxy builds the hook
(`providers.proxy_warm_up`); the warm-up must leave the operator's store as it was and must
never keep the proxy from starting.
"""

from __future__ import annotations

import importlib
import logging
import sqlite3
from pathlib import Path

import pytest

from harness.errors import ProviderError
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler

pytestmark = pytest.mark.integration  # SQLite files, and litellm's proxy types


class _Refuses:
    """A user's middleware that refuses every request (the warm-up must survive it)."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        raise ProviderError("this stack refuses everything", model=request.model)


def test_the_warm_up_prepares_once_and_leaves_the_operators_store_empty(tmp_path: Path) -> None:
    from harness.accounting import exact_counter_of
    from harness.tokens import estimator_for
    from providers.proxy_hook import HarnessProxyHook, ProxyHookSettings
    from providers.proxy_warm_up import WARM_MODEL

    url = f"sqlite:///{tmp_path}/proxy.db"
    hook = HarnessProxyHook.from_settings(ProxyHookSettings(store=url, warm_up=True))
    assert hook.store == url
    exact = exact_counter_of(estimator_for(WARM_MODEL))
    assert exact is not None and getattr(exact, "loaded", False)
    # The warm-up's session went to a private store: the operator's file has none (it may
    # not even exist yet: the hook opens it at its first request).
    if (tmp_path / "proxy.db").exists():
        with sqlite3.connect(tmp_path / "proxy.db") as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "sessions" in tables:
                assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


def test_warm_up_reports_its_time_and_a_failing_stack_only_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from middleware import default_stack
    from providers.proxy_warm_up import warm_up

    took = warm_up(default_stack(), None)
    assert took is not None and took > 0
    with caplog.at_level(logging.WARNING, logger="providers.proxy_warm_up"):
        assert warm_up([_Refuses()], None) is None
    assert "this stack refuses everything" in caplog.text
    assert "first request will load what it needs" in caplog.text


def test_importing_the_module_builds_no_hook_and_the_config_name_builds_one() -> None:
    module = importlib.import_module("providers.proxy_hook")
    assert module._INSTANCE == []  # importing HarnessProxyHook costs no warm-up
    instance = module.proxy_handler_instance  # what litellm's config loader reads
    assert isinstance(instance, module.HarnessProxyHook)
    assert module.proxy_handler_instance is instance
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = module.no_such_name
