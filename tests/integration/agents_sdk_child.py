"""A child process for the Agents SDK resume test (run as a script, not collected).

``python agents_sdk_child.py BASE_URL STORE_URL SESSION_ID TEXT`` runs one turn of an Agents
SDK ``Runner`` with a `HarnessSession` on ``STORE_URL`` (user ``alice``) against the
OpenAI-compatible server at ``BASE_URL`` (the SDK's own OpenAI client, chat completions),
prints the final output as JSON and exits: the session must live in the store, not in RAM.
"""

from __future__ import annotations

import json
import sys

import anyio
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from harness.adapters import HarnessSession


async def turn(base_url: str, store_url: str, session_id: str, text: str) -> str:
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    client = AsyncOpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="test-model", openai_client=client)
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model)
    async with HarnessSession(session_id, store=store_url, user_id="alice") as session:
        result = await Runner.run(agent, text, session=session)
    await client.close()
    return str(result.final_output)


def main() -> None:
    base_url, store_url, session_id, text = sys.argv[1:5]
    output = anyio.run(turn, base_url, store_url, session_id, text)
    sys.stdout.write(json.dumps({"final_output": output}) + "\n")


if __name__ == "__main__":
    main()
