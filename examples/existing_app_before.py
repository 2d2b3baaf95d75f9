"""An existing app on plain ``litellm.acompletion``: a travel assistant with one tool.

Every turn sends the whole conversation, which grows until it no longer fits the model's
window. `existing_app_after.py` is the same app with the harness: compare the two files —
the import, one setting, the call and a print line change.

Point it at any OpenAI-compatible server (the test suite uses its local one)::

    OPENAI_API_KEY=... EXAMPLE_API_BASE=http://127.0.0.1:8000/v1 \
        EXAMPLE_MODEL=openai/test-model python examples/existing_app_before.py

Without ``EXAMPLE_API_BASE`` it talks to the provider ``EXAMPLE_MODEL`` names. Set
``LITELLM_LOCAL_MODEL_COST_MAP=True`` too, or litellm fetches its model map at import.
"""

import asyncio
import json
import os
from typing import Any

from litellm import acompletion

MODEL = os.environ.get("EXAMPLE_MODEL", "openai/gpt-4o-mini")
API_BASE = os.environ.get("EXAMPLE_API_BASE")  # None: the provider's own endpoint
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
        )
        print(f"  request: {response.usage.prompt_tokens} prompt tokens")
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
