"""Small windows, any tool session: every request fits, or the typed error is raised; pairs hold.

Random sessions of a few tool rounds (one or two calls a round, results from a line to a few
pages) run through `HarnessAgent` with the default stack in windows of 1,000–1,600 tokens,
where a newest result often does not fit beside System and the tool schemas and is offloaded
to the workspace (`newest_result_offload`). Every request the model receives — the agent's
and the summariser's — is within its input limit by the family's exact count, and every
agent request pairs each tool call with its result; a session that stops does so with
`ContextBudgetExceeded`, nothing else.
"""

from __future__ import annotations

import tempfile

import anyio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness import ContextBudgetExceeded, HarnessAgent, RuntimeContext
from harness.accounting import estimate_request
from harness.messages import Message
from harness.tokens import exact_for_family
from providers import ScriptedModel
from tests.test_budget_promise import pairs_valid

EXACT = exact_for_family("o200k")
SIZES = (40, 300, 600, 900, 3_000)
"""Result sizes in characters: a line, ~75–225 tokens (under every size limit), pages."""


def dump(size: int, seed: int) -> str:
    """Return a tool output of about ``size`` characters.

    Args:
        size: characters.
        seed: makes outputs distinct.
    """
    return "".join(f"{seed}-row {i} ok " for i in range(size // 8 + 1))[:size]


@st.composite
def sessions(draw: st.DrawFn) -> list[list[int]]:
    """Rounds of tool calls, each call given by its result size."""
    rounds = draw(st.integers(1, 5))
    return [draw(st.lists(st.sampled_from(SIZES), min_size=1, max_size=2)) for _ in range(rounds)]


def script(rounds: list[list[int]]) -> list[Message | str]:
    replies: list[Message | str] = []
    for r, sizes in enumerate(rounds):
        calls = [
            ScriptedModel.tool_call("dump", {"size": s, "seed": r * 10 + i})
            for i, s in enumerate(sizes)
        ]
        message = calls[0]
        if len(calls) > 1:
            message = Message.assistant(None, tool_calls=[c.tool_calls[0] for c in calls])
        replies.append(message)
    return [*replies, "done"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.sampled_from([1_000, 1_100, 1_200, 1_400, 1_600]))
def test_a_small_window_session_fits_every_request_or_raises_the_typed_error(
    rounds: list[list[int]], window: int
) -> None:
    model = ScriptedModel(script(rounds), model="gpt-4o", window=window)
    with tempfile.TemporaryDirectory() as folder:
        agent = HarnessAgent(
            model=model,
            system_prompt="You are helpful.",
            tools=[dump],
            workspace=folder,
            max_rounds=len(rounds) + 5,
        )
        try:
            answer = anyio.run(agent.call, "dump the rows", RuntimeContext(session_id="s"))
        except ContextBudgetExceeded:
            answer = None
        for request in model.requests:
            exact = estimate_request(request, EXACT)
            assert exact <= request.input_limit, (
                f"a {request.ids.purpose} request of {exact} tokens was sent "
                f"against a limit of {request.input_limit}"
            )
            if request.ids.purpose == "agent":
                assert pairs_valid(request.history)
        if answer is not None:
            assert answer.text == "done"
        kinds = {t.kind for r in model.requests for t in r.transforms}
        event("refused" if answer is None else "completed")
        event("newest offloaded" if "newest_result_offload" in kinds else "no newest offload")
