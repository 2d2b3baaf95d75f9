"""Warm a proxy worker before its first request: one offline preparation at start-up.

A fresh litellm proxy worker's first chat request used to pay for everything the hook loads
lazily — the stack's modules and its composition, the secret scanner the recorder redacts
with, the model's estimator and exact tokenizer, litellm's model-info look-up: 0.41–0.46 s of a first request over a
45-message conversation (SQLite store, 2-core machine), against 2–10 ms for the requests
after it. `warm_up` runs one small preparation through the same stack at start-up instead,
with a scripted model and a private in-memory store (nothing reaches the operator's store
or any user's session), so the first client waits no longer than the second.

It also keeps the proxy's garbage collector cheap: litellm's proxy freezes the objects that
exist when its start-up ends (``gc.freeze()`` after loading ``config.yaml``, which builds
this hook), so what the warm-up loads is never walked again by a full collection, where the
same objects loaded by a first request stayed in the collected heap (30,000 of them).

A failed warm-up is logged and ignored: the proxy starts, and its first request loads what
it needs as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Final

import anyio

from harness.policy import ContextPolicy
from harness.types import Middleware

WARM_MODEL: Final = "gpt-4o-mini"
"""The model the warm-up prepares for (its family's estimator and tokenizer get loaded)."""
WARM_USER: Final = "context-harness:warm-up"
"""The user id of the warm-up's session (in a private store that is dropped at once)."""

_LOG = logging.getLogger(__name__)


def warm_up(
    stack: Sequence[Middleware] | None,
    policy: ContextPolicy | None,
    *,
    model: str = WARM_MODEL,
) -> float | None:
    """Run one offline preparation through ``stack``; return its seconds, ``None`` if it failed.

    Runs in a thread of its own with its own event loop, so it may be called while the
    proxy's loop is running (the proxy builds the hook while it loads its config).
    """
    failures: list[BaseException] = []

    def run() -> None:
        try:
            anyio.run(_prepare_once, stack, policy, model)
        except Exception as exc:  # the proxy must start whatever the warm-up meets
            failures.append(exc)

    started = time.perf_counter()
    thread = threading.Thread(target=run, name="context-harness-warm-up", daemon=True)
    thread.start()
    thread.join()
    if failures:
        _LOG.warning(
            "context-harness: the proxy hook's warm-up failed (%s); the first request will "
            "load what it needs instead",
            failures[0],
        )
        return None
    return time.perf_counter() - started


async def _prepare_once(
    stack: Sequence[Middleware] | None, policy: ContextPolicy | None, model: str
) -> None:
    from harness.accounting import exact_counter_of
    from harness.adapters.completion import prepare_messages
    from harness.sessions import open_store
    from harness.tokens import estimator_for
    from providers.litellm_client import LiteLLMClient
    from providers.scripted import ScriptedModel

    LiteLLMClient(model).context_window(model)  # litellm's model-info look-up, loaded lazily

    exact = exact_counter_of(estimator_for(model))
    if exact is not None:
        exact.count("warm up")  # loads the tokenizer a request near its limit counts with
    call = {"id": "warm_up_1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Warm up."},
        {"role": "user", "content": "Warm up."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "warm_up_1", "content": "ok"},
        {"role": "user", "content": "Done."},
    ]
    store = open_store("sqlite://")
    try:
        await prepare_messages(
            model,
            messages,
            client=ScriptedModel(model=model, default="ok", summary="Warm up."),
            stack=list(stack) if stack is not None else None,
            policy=policy,
            session_id="warm-up",
            user_id=WARM_USER,
            store=store,
            agent_id="warm-up",
        )
    finally:
        await store.aclose()
