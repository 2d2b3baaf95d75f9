"""Against a provider: our estimate vs the provider's count, our time vs its latency.

``python -m benchmarks providers --model MODEL [--api-base URL]`` replays the start of a
recorded session through a `HarnessAgent` with ``middleware.default_stack()`` and
``ContextPolicy(calibrate=True)`` whose client is `providers.LiteLLMClient`. Every request really goes to the provider; the agent then
continues with the recording's next assistant message (`workloads.ReplayClient`), so the
session unfolds as recorded and a real provider costs only the input of a few dozen
requests (input capped by ``max_input_tokens``, output by ``max_tokens``).

Per request it reports our estimate (calibrated) and the raw estimate against the
provider-reported prompt tokens (error %), the calibration factor in use, the stack's
preparation time (a timing middleware outside the stack → the manifest observer) against
the provider's latency, and any overflow the provider reported and what happened next
(``OverflowRetry`` compacts and retries once).

The provider's key must be in the environment (``litellm.validate_environment`` names
it); when it is missing the benchmark refuses with a message naming the variable. With no
``--model`` (or ``--model local``) it runs offline against the local OpenAI-compatible
test server from ``tests/integration/openai_server.py`` — reached through litellm and HTTP,
counting usage with a real tokenizer — whose window is set a little *below* the budget the
agent is given, so that once calibration has corrected our (deliberately conservative)
estimate, overflows happen and their handling is exercised too.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.peers import PrepClock, our_stack
from benchmarks.workloads import (
    FIXED_SUMMARY,
    ReplayClient,
    Session,
    make_session,
    replay,
    replay_tools,
    request_ready,
    stack_tool_names,
)
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.manifest import ContextManifest
from harness.policy import ContextPolicy

MESSAGES = {"full": 90, "quick": 40, "smoke": 24}
"""Recorded messages replayed (about half of them are model requests)."""
REAL_MAX_INPUT = 16_000
"""The input budget against a real provider (keeps the cost of a run small)."""
REAL_MAX_OUTPUT = 32
LOCAL_MODEL = "openai/gpt-4o-local"  # an o200k name: the local server counts with o200k_base
LOCAL_WINDOW = {"full": 9_000, "quick": 7_000, "smoke": 3_600}
"""The local server rejects requests over this many tokens (its real count)."""
LOCAL_BUDGET_MARGIN = 1.04
"""The agent's budget is this much above the local window (as if the window were misreported)."""


class ProviderKeyMissing(RuntimeError):
    """Raised when the provider's API key is not in the environment."""


class ProviderRunFailed(RuntimeError):
    """Raised when the provider could not be used: unreachable, or failing calls.

    The runner then exits non-zero and keeps the last good results.
    """


def check_outcome(outcome: dict[str, Any], target: str) -> None:
    """Refuse a run in which the provider failed (an overflow handled by retry is fine).

    Raises:
        ProviderRunFailed: when a call failed for another reason than an overflow, or no
            request was answered at all.
    """
    failures = [f for f in outcome["failures"] if not f.startswith("ContextOverflowError")]
    answered = [r for r in outcome["rows"] if r["error"] is None]
    if failures or not answered:
        first = failures[0] if failures else "no request was answered"
        raise ProviderRunFailed(
            f"the run against {target} failed: {len(failures)} of {outcome['calls']} calls "
            f"failed, {len(answered)} requests answered (first error: {first}). Check that the "
            "model name, --api-base and the key are right and the provider is reachable, then "
            "run again; the last good results were kept"
        )


def check_key(model: str, api_base: str | None) -> list[str]:
    """Return the environment variables ``model`` needs and that are not set.

    Uses ``litellm.validate_environment``; an OpenAI-compatible server given by
    ``api_base`` may need no key, so with ``api_base`` nothing is required.
    """
    if api_base:
        return []
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.utils import validate_environment

    found = validate_environment(model=model)
    return [str(k) for k in found.get("missing_keys") or []]


def _local_server(window: int) -> Any:
    """Start the local test server that rejects inputs over ``window`` tokens."""
    from tests.integration import openai_server as srv

    def answer(body: dict[str, Any]) -> Any:
        if srv.count_prompt_tokens(body) > window:
            return srv.context_length_exceeded()
        messages = body.get("messages") or []
        last = str(messages[-1].get("content") or "") if messages else ""
        if "compacting the conversation" in last or "summar" in last[:400].lower():
            return srv.Reply(text=FIXED_SUMMARY)
        return srv.Reply(text="ok")

    return srv.OpenAIServer(default=answer).start()


async def run_session(
    client: Any, session: Session, *, max_input: int, settings: dict[str, Any], progress: Progress
) -> dict[str, Any]:
    """Replay ``session`` through an agent on ``client``; return the per-request rows."""
    clock = PrepClock()
    manifests: list[tuple[ContextManifest, float | None]] = []

    def observe(manifest: ContextManifest) -> None:
        before = len(clock.samples)
        clock.observe(manifest)
        if manifest.purpose == "agent":
            # A retried round has no fresh start stamp, so its preparation is not timed.
            prep = clock.samples[-1] if len(clock.samples) > before else None
            manifests.append((manifest, prep))

    replaying = ReplayClient(client, session.messages)
    stack = our_stack()
    with tempfile.TemporaryDirectory(prefix="bench-providers-") as workspace:
        agent = HarnessAgent(
            model=replaying,
            system_prompt=session.system_prompt,
            tools=replay_tools(session.messages, skip=stack_tool_names(stack)),
            stack=[clock, *stack],
            policy=ContextPolicy(max_input_tokens=max_input, calibrate=True, observer=observe),
            workspace=workspace,
            max_rounds=10_000,
            settings=settings or None,
        )
        ctx = RuntimeContext(user_id="bench", session_id="providers")
        outcome = await replay(
            agent,
            session,
            ctx,
            replaying,
            progress=lambda done, total: progress(f"  {done}/{total} messages"),
        )
        factor = agent.state(ctx).calibration.get(agent.model, 1.0)
    rows = []
    for index, ((manifest, prep), sent) in enumerate(zip(manifests, replaying.log, strict=False)):
        reported = sent.get("prompt_tokens")
        estimate = manifest.estimated_input_tokens
        raw = round(estimate / manifest.calibration) if manifest.calibration else estimate
        latency = sent["latency_s"]
        rows.append(
            {
                "request": index + 1,
                "estimate": estimate,
                "raw_estimate": raw,
                "reported": reported,
                "error_pct": (estimate - reported) / reported * 100 if reported else None,
                "raw_error_pct": (raw - reported) / reported * 100 if reported else None,
                "calibration": manifest.calibration,
                "stack_s": prep,
                "latency_s": latency,
                "stack_over_latency": prep / latency if prep is not None and latency else None,
                "overflow": sent["error"] == "ContextOverflowError",
                "error": sent["error"],
                "transforms": [t for t in manifest.transforms if not t.startswith("memory_record")],
            }
        )
    for row, following in itertools.pairwise(rows):
        if row["overflow"]:
            row["handled"] = (
                "retried after forced compaction: ok"
                if following["error"] is None
                and any("compaction" in t for t in following["transforms"])
                else f"retried: {following['error'] or 'ok'}"
            )
    if rows and rows[-1]["overflow"]:
        rows[-1]["handled"] = "not retried (the call failed)"
    return {"rows": rows, "failures": outcome.failures, "factor": factor, "calls": outcome.calls}


async def measure(
    mode: Mode, progress: Progress, *, model: str | None = None, api_base: str | None = None
) -> dict[str, Any]:
    """Replay the start of a session against ``model`` (default: the local test server).

    Raises:
        ProviderKeyMissing: when ``model`` needs an API key that is not in the environment.
    """
    from providers.litellm_client import LiteLLMClient

    local = model in (None, "", "local")
    full = make_session(MESSAGES[mode])
    session = Session(
        full.name,
        full.source,
        f"the first {MESSAGES[mode]} messages of {full.description}",
        full.system_prompt,
        request_ready(full.messages, MESSAGES[mode]),
    )
    server = None
    if local:
        window = LOCAL_WINDOW[mode]
        try:
            server = _local_server(window)
        except ImportError as exc:
            return {
                "status": "not available",
                "error": "the local test server (tests/integration/openai_server.py) "
                f"cannot be imported: {exc}",
            }
        client = LiteLLMClient(
            LOCAL_MODEL, api_base=server.base_url, api_key="sk-local-test", timeout=30
        )
        max_input = round(window * LOCAL_BUDGET_MARGIN)
        settings: dict[str, Any] = {}
        target = (
            f"the local OpenAI-compatible test server at {server.base_url} "
            f"(window {window:,} tokens, counted with o200k_base)"
        )
        model_name = LOCAL_MODEL
    else:
        assert model is not None
        missing = check_key(model, api_base)
        if missing:
            raise ProviderKeyMissing(
                f"{model} needs {' and '.join(missing)} in the environment, and it is not set. "
                f"Set it (export {missing[0]}=...) and run again, or run without --model to use "
                "the local test server."
            )
        client = LiteLLMClient(model, api_base=api_base, timeout=120)
        window_known = client.context_window()
        max_input = min(REAL_MAX_INPUT, window_known) if window_known else REAL_MAX_INPUT
        settings = {"max_tokens": REAL_MAX_OUTPUT}
        target = (
            f"{model}"
            + (f" at {api_base}" if api_base else "")
            + f" (input capped at {max_input:,} tokens)"
        )
        model_name = model
    progress(f"target: {target}; {session.label}")
    try:
        outcome = await run_session(
            client, session, max_input=max_input, settings=settings, progress=progress
        )
    finally:
        if server is not None:
            server.stop()
    check_outcome(outcome, target)
    return _result(mode, session, target, model_name, local, outcome)


def _result(
    mode: str, session: Session, target: str, model: str, local: bool, outcome: dict[str, Any]
) -> dict[str, Any]:
    rows = outcome["rows"]
    measured = [r for r in rows if r["error_pct"] is not None]
    errors = [abs(r["error_pct"]) for r in measured]
    raw_errors = [abs(r["raw_error_pct"]) for r in measured]
    half = measured[len(measured) // 2 :]
    late = [abs(r["error_pct"]) for r in half]
    stack = [r["stack_s"] for r in rows if r["stack_s"] is not None]
    latency = [r["latency_s"] for r in rows if r["error"] is None]
    ratio = _report.ratio_stats(
        [r["stack_s"] for r in rows if r["stack_s"] is not None and r["error"] is None],
        [r["latency_s"] for r in rows if r["stack_s"] is not None and r["error"] is None],
    )
    overflows = [r for r in rows if r["overflow"]]
    handled = [r for r in overflows if str(r.get("handled", "")).endswith("ok")]
    headline = [
        f"{len(rows)} requests to {target}",
        f"estimate vs provider: median |error| {statistics.median(errors):.1f}% calibrated "
        f"(second half {statistics.median(late):.1f}%), {statistics.median(raw_errors):.1f}% raw; "
        f"final calibration factor {outcome['factor']:.3f}"
        if measured
        else "no request reported usage",
        f"stack time / provider latency: {_report.fmt_ratio(ratio)} "
        f"(stack p50 {_report.fmt_time(_report.percentile(stack, 50))}, "
        f"latency p50 {_report.fmt_time(_report.percentile(latency, 50))})",
        f"overflows reported by the provider: {len(overflows)}, handled by retry: {len(handled)}",
    ]
    table_rows = [
        [
            r["request"],
            r["estimate"],
            r["raw_estimate"],
            r["reported"],
            f"{r['error_pct']:+.1f}%" if r["error_pct"] is not None else "–",
            f"{r['calibration']:.3f}",
            _report.fmt_time(r["stack_s"]),
            _report.fmt_time(r["latency_s"]),
            (r.get("handled") or "overflow") if r["overflow"] else (r["error"] or ""),
            ", ".join(r["transforms"]) or "",
        ]
        for r in rows
    ]
    notes = [f"call failed: {f}" for f in outcome["failures"][:5]]
    if local:
        notes.append(
            "offline run: the local server's window is set 4% below the agent's budget, so "
            "overflows appear once calibration has removed our estimate's safety bias"
        )
    return {
        "title": "Against a provider: estimate error, stack time vs latency, overflows",
        "mode": mode,
        "workload": session.label,
        "measured": (
            "per request: our manifest estimate (calibrated, and raw = estimate / factor) vs the "
            "prompt tokens the provider reported; the stack's preparation time (timing middleware "
            "outside the default stack → manifest observer) vs the client's measured latency; "
            "overflow errors from the provider and the next request after them."
        ),
        "headline": headline,
        "tables": [
            {
                "title": f"Per request ({model})",
                "columns": [
                    "#",
                    "estimate",
                    "raw estimate",
                    "provider",
                    "error",
                    "factor",
                    "stack",
                    "latency",
                    "overflow / error",
                    "transforms",
                ],
                "rows": table_rows,
                "note": "error = (estimate − provider) / provider; positive means we "
                "over-count (safe).",
            }
        ],
        "charts": [
            {
                "file": "providers_error.png",
                "title": "Estimate error per request (calibration on)",
                "x_label": "request",
                "y_label": "error vs provider (%)",
                "series": {
                    "calibrated": [[r["request"], r["error_pct"]] for r in measured],
                    "raw": [[r["request"], r["raw_error_pct"]] for r in measured],
                },
            }
        ],
        "notes": notes,
        "data": {"rows": rows, "factor": outcome["factor"], "target": target, "local": local},
    }
