"""Every example in ``examples/`` runs as a script, offline, and says what it should.

The litellm apps talk HTTP to the local OpenAI-compatible test server (started here; its URL
reaches them through ``EXAMPLE_API_BASE``) and are checked on what that server received; the
others run on `ScriptedModel` or LangChain's fake chat model. The proxy example
(``examples/proxy``) has its own test.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.openai_server import (
    OpenAIServer,
    Reply,
    count_prompt_tokens,
    reply,
    tool_call,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BUDGET = 2_000
"""The input budget `examples/existing_app_after.py` sets."""


def run_example(name: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<name>`` as a script in a clean environment; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(ROOT),
            "PYTHONPATH": str(ROOT),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3_000:]
    assert "Traceback" not in done.stderr
    return done


def test_custom_middleware_keeps_addresses_from_the_model() -> None:
    out = run_example("custom_middleware.py").stdout
    model_lines = [line for line in out.splitlines() if line.startswith("model:")]
    assert model_lines == [
        "model: I received: Please reply to <email> about her refund.",
        "model: I received: Also copy <email> and tell me who is waiting.",
    ]
    assert out.count("'mask_emails:1'") == 2  # the function middleware printed each manifest
    assert "the session's full record keeps 2 original messages" in out


def is_summary_request(body: dict[str, Any]) -> bool:
    """The app always sends its tool and lets the model use it; a summary request sends no
    tool (a transcript) or forbids using one (asked in place, over the agent's own prefix)."""
    return not body.get("tools") or body.get("tool_choice") == "none"


def weather_server(body: dict[str, Any]) -> Reply:
    """Answer like a model: call the tool for a question, answer after its result."""
    if is_summary_request(body):
        return reply("Summary: the user asked about the weather in several cities.")
    last = body["messages"][-1]
    if last["role"] == "tool":
        return reply(f"In {last['content'].split(':')[0]} it is sunny.")
    city = re.search(r"city \d+", str(last.get("content")))
    return tool_call("get_weather", {"city": city.group(0) if city else "nowhere"})


def pairs_are_valid(messages: list[dict[str, Any]]) -> bool:
    """Whether every tool call is answered right after its turn, and every result has a call."""
    waiting: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in waiting:
                return False
            waiting.discard(message["tool_call_id"])
        elif waiting:
            return False
        else:
            waiting = {c["id"] for c in message.get("tool_calls") or ()}
    return not waiting


def code_lines(name: str) -> list[str]:
    """The lines of an example after its module docstring."""
    text = (EXAMPLES / name).read_text("utf-8")
    return text.split('"""\n', 2)[2].splitlines() if text.startswith('"""') else text.splitlines()


@pytest.mark.slow  # two processes that import litellm (~5 s of CPU each)
def test_the_existing_app_before_and_after_the_harness() -> None:
    changed = [
        line
        for line in difflib.unified_diff(
            code_lines("existing_app_before.py"), code_lines("existing_app_after.py"), n=0
        )
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) <= 6, changed  # a few lines: the import, the budget, the call, a print
    with OpenAIServer(default=weather_server) as server:
        env = {
            "EXAMPLE_API_BASE": server.base_url,
            "EXAMPLE_MODEL": "openai/gpt-4o-mini",
            "OPENAI_API_KEY": "test",
        }
        before = run_example("existing_app_before.py", **env).stdout
        plain = list(server.requests)
        server.requests.clear()
        after = run_example("existing_app_after.py", **env).stdout
        harnessed = [b for b in server.requests if not is_summary_request(b)]
    answers = [line for line in before.splitlines() if line.startswith("turn ")]
    assert len(answers) == 8 and "turn 7: In city 7 it is sunny." in answers
    assert [line for line in after.splitlines() if line.startswith("turn ")] == answers
    assert max(count_prompt_tokens(b) for b in plain) > BUDGET  # it outgrows the budget
    assert len(harnessed) == len(plain) == 16
    assert all(count_prompt_tokens(b) <= BUDGET for b in harnessed)
    assert all(pairs_are_valid(b["messages"]) for b in harnessed)
    assert "history_compaction" in after  # the manifest line the app prints
    first = harnessed[0]["messages"][0]
    assert first == {"role": "system", "content": "You are a travel assistant."}


def test_the_langchain_agent() -> None:
    pytest.importorskip("langchain.agents")
    out = run_example("langchain_agent.py").stdout
    turns = [line for line in out.splitlines() if line.startswith("turn ")]
    assert len(turns) == 8 and all("has shipped." in line for line in turns)
    received = [int(m) for m in re.findall(r"the model received (\d+)", out)]
    held = [int(m) for m in re.findall(r"the graph holds (\d+)", out)]
    assert held[-1] == 32 and received[-1] < held[-1]  # the model got a fitted request
    limits = re.findall(r"\((\d+) of (\d+) tokens\)", out)
    assert all(int(used) <= int(limit) for used, limit in limits)
    assert "history_compaction" in out
    assert "every request had its tool pairs and reasoning" in out
    assert "sync invoke: 'Order 8 has shipped.'" in out  # the sync agent works too
