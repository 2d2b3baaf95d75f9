"""A middleware of your own in a stack of your own, run by HarnessAgent.

`MaskEmails` keeps e-mail addresses away from the model: before every request it sends a
masked copy of each history message that contains one, and records what it did in the
request's manifest (``mask_emails:<n>``). The session's full record keeps the originals.
`print_size` is a middleware too — a plain ``async def`` with the same signature — that
prints each request's size after the model answered.

The stack is the default list with both added; reorder, shorten or extend it as you like
(an order that cannot work is refused when the agent is built, with a message saying why).

Runs offline with `providers.ScriptedModel`, which shows what the model actually received::

    python examples/custom_middleware.py
"""

from __future__ import annotations

import os
import re
from typing import Final

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import anyio

from harness import (
    Handler,
    HarnessAgent,
    Middleware,
    ModelRequest,
    ModelResponse,
    RuntimeContext,
    Transform,
    TransformKind,
)
from middleware import default_stack
from providers import ScriptedModel

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
MASK_EMAILS: Final = TransformKind("mask_emails")
"""What `MaskEmails` records in the manifest: ``mask_emails:<how many messages>``."""


class MaskEmails:
    """Replace e-mail addresses in the history the model receives with ``<email>``.

    Args:
        mask: the text that stands in for an address.
    """

    def __init__(self, *, mask: str = "<email>") -> None:
        self.mask = mask

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Send a masked copy of every message that contains an address."""
        history = []
        masked = 0
        for message in request.history:
            text = message.text
            if isinstance(message.content, str) and EMAIL.search(text):
                message = message.revise("masked", content=EMAIL.sub(self.mask, text))
                masked += 1
            history.append(message)
        if masked:
            request = request.replace(history=tuple(history)).with_transforms(
                Transform(MASK_EMAILS, masked)
            )
        return await call_next(request)


async def print_size(request: ModelRequest, call_next: Handler) -> ModelResponse:
    """Print the size of every request once the model has answered."""
    response = await call_next(request)
    if response.manifest is not None:
        manifest = response.manifest
        print(
            f"  [size] {manifest.estimated_input_tokens} of {manifest.input_limit} tokens, "
            f"transforms {list(manifest.transforms)}"
        )
    return response


def echo_what_it_saw(request: ModelRequest) -> str:
    """The scripted model's answer: the last user message as the model received it."""
    last = next(m for m in reversed(request.history) if m.role == "user")
    return f"I received: {last.text}"


async def main() -> None:
    """Run two turns and show what the model received."""
    stack: list[Middleware] = [print_size, MaskEmails(), *default_stack()]
    model = ScriptedModel(default=echo_what_it_saw)
    agent = HarnessAgent(model=model, stack=stack, system_prompt="You help with support mail.")
    ctx = RuntimeContext(user_id="demo", session_id="support-1")
    for question in (
        "Please reply to jane.doe@example.com about her refund.",
        "Also copy ops-team@example.org and tell me who is waiting.",
    ):
        print(f"user:  {question}")
        answer = await agent.call(question, ctx)
        print(f"model: {answer.text}")
    sent = model.requests[-1]
    assert not any(EMAIL.search(m.text) for m in sent.history), "an address reached the model"
    record = await agent.history(ctx)
    kept = sum(1 for m in record if EMAIL.search(m.text))
    print(f"the model saw no address; the session's full record keeps {kept} original messages")


if __name__ == "__main__":
    anyio.run(main)
