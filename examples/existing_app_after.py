"""The app of `existing_app_before.py` with the harness: five lines differ.

``from harness import acompletion`` instead of litellm's: the same arguments, the same answer
(litellm's ``ModelResponse``), litellm's exceptions — and every request has been through the
default middleware stack first: the long tool results trimmed, early turns summarised once
the conversation outgrows the budget, tool calls never sent without their results. The
manifest of each request rides on the answer (`harness.manifest_of`). ``POLICY`` sets a
small input budget so that this short demo shows it; a real app leaves it out (the budget
then follows the model's window).

Run it like the other one::

    OPENAI_API_KEY=... EXAMPLE_API_BASE=http://127.0.0.1:8000/v1 \
        EXAMPLE_MODEL=openai/test-model python examples/existing_app_after.py

(The harness sets ``LITELLM_LOCAL_MODEL_COST_MAP`` itself before it imports litellm.)
"""

import asyncio
import json
import os
from typing import Any

from harness import ContextPolicy, acompletion, manifest_of

MODEL = os.environ.get("EXAMPLE_MODEL", "openai/gpt-4o-mini")
API_BASE = os.environ.get("EXAMPLE_API_BASE")  # None: the provider's own endpoint
POLICY = ContextPolicy(max_input_tokens=2_000)  # a small budget, to see it work
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}]  # fmt: skip


def get_weather(city: str) -> str:
    """Return a long weather report (tool results are often long)."""
    return f"{city}: 18 C, sunny. " * 30


async def chat(messages: list[Any], question: str) -> str:
    """Ask one question; run the tools the model calls until it answers."""
    messages.append({"role": "user", "content": question})
    while True:
        response = await acompletion(
            model=MODEL,
            messages=messages,
            tools=TOOLS,
            api_base=API_BASE,
            policy=POLICY,
        )
        print(f"  request: {response.usage.prompt_tokens} prompt tokens")
        if manifest := manifest_of(response):
            print(f"  harness: {manifest.estimated_input_tokens} tokens, {manifest.transforms}")
        message = response.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return str(message.content)
        for call in message.tool_calls:
            result = get_weather(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


async def main() -> None:
    """Eight questions in one conversation."""
    messages: list[Any] = [{"role": "system", "content": "You are a travel assistant."}]
    for i in range(8):
        answer = await chat(messages, f"What is the weather in city {i}? " * 12)
        print(f"turn {i}: {answer}")


if __name__ == "__main__":
    asyncio.run(main())
