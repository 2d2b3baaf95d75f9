"""The proxy hook's cost inside a real litellm proxy, at 1, 8 and 32 concurrent clients.

Two litellm proxy processes start side by side from ``examples/proxy/config.yaml`` (the
config a team would use): one with the harness hook (``callbacks:`` and
``callback_settings: harness:``, a SQLite session store in a temp folder), one from the same
file with the hook's two sections removed. Both use the same ``custom_auth``
(``team_auth.py``), one worker each, and forward to the same local OpenAI-compatible server
(``tests/integration/openai_server.py``, which answers at once).

The workload, at each level of concurrency (`LEVELS`: 1, 8 and 32 clients): every client
has its own key's session (``x-harness-session-id``) and replays a session of the shared
SWE-agent runs when ``../shared/data`` is present, else generated runs
(`benchmarks.workloads.history`): client *i* starts at its own request point of that
session and sends growing requests, the whole conversation each time (system, user,
assistant tool calls, tool results), as a plain OpenAI client does — about
`REQUESTS_PER_WAVE` requests a wave whatever the level (one client sends them all in turn;
32 send a few each). Each request is timed end to end at the client (HTTP round trip), and
the proxy's own ``x-litellm-overhead-duration-ms`` header (its time outside the upstream
call, the pre-call hook included) is collected too.

Waves alternate between the two proxies (the order rotated each repetition), so drift of a
busy machine hits both alike; the first wave of each level on each proxy warms it up and is
not counted. Per level: p50 and p99 with and without the hook, the hook's added p99, and
throughput (requests ÷ the waves' wall time) with the hook as a ratio of the plain proxy's,
all from the same run. The goals (issue 26): ≥ 0.9× the plain proxy's throughput, and at most
+50 ms at p99 with 32 clients.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import anyio
import httpx

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.workloads import history, request_points

LEVELS: dict[Mode, tuple[int, ...]] = {"full": (1, 8, 32), "quick": (1, 8, 32), "smoke": (1, 4)}
"""Concurrent clients per wave, one level after the other."""
REQUESTS_PER_WAVE: dict[Mode, int] = {"full": 192, "quick": 96, "smoke": 8}
"""About how many requests one wave sends, at every level (clients × rounds)."""
REPEATS: dict[Mode, int] = {"full": 4, "quick": 2, "smoke": 1}
"""Measured waves per proxy (after one warm-up wave each)."""
SESSION_MESSAGES: dict[Mode, int] = {"full": 160, "quick": 120, "smoke": 60}
"""Messages of the replayed session the clients' conversations are cut from."""
MODEL = "team-model"
"""The model name of the example config's ``model_list``."""
OVERHEAD_HEADER = "x-litellm-overhead-duration-ms"
"""The proxy's own measure of the time it spent on a request outside the upstream call."""


def _configs(folder: Path) -> tuple[Path, Path]:
    """Return the example config (with the hook) and a copy without the hook's sections."""
    import yaml  # type: ignore[import-untyped]

    from tests.integration.litellm_proxy import EXAMPLE_CONFIG

    plain_dir = folder / "without-hook"
    shutil.copytree(EXAMPLE_CONFIG.parent, plain_dir)
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config.pop("callback_settings", None)
    config.get("litellm_settings", {}).pop("callbacks", None)
    plain = plain_dir / "config.yaml"
    plain.write_text(yaml.safe_dump(config))
    return EXAMPLE_CONFIG, plain


def _conversations(mode: Mode, clients: int) -> tuple[str, list[list[list[dict[str, Any]]]]]:
    """Return the level's label and, per client, its growing requests (one wave's)."""
    session = history(SESSION_MESSAGES[mode])
    system = {"role": "system", "content": session.system_prompt}
    messages = [m.to_openai() for m in session.messages]
    points = [p for p in request_points(session.messages) if p > 0]
    rounds = max(1, REQUESTS_PER_WAVE[mode] // clients)
    per_client: list[list[list[dict[str, Any]]]] = []
    for client in range(clients):
        start = (client * 7) % max(1, len(points) - 1)
        tag = {"role": "user", "content": f"[client {client}] Work on the task below."}
        # Growing requests from the client's point; past the session's end it starts again
        # (a new conversation, so a new session: `_wave` names sessions by their opening).
        requests = []
        for r in range(rounds):
            at = (start + r) % len(points)
            requests.append([system, tag, *messages[: points[at]]])
        per_client.append(requests)
    sizes = [len(r) for c in per_client for r in c]
    label = (
        f"{clients} client(s), {rounds} growing requests each a wave "
        f"({min(sizes)}–{max(sizes)} messages a request)"
    )
    return label, per_client


async def _wave(
    base_url: str,
    conversations: Sequence[list[list[dict[str, Any]]]],
    wave: str,
    keys: Sequence[str],
) -> tuple[list[float], list[float]]:
    """Run every client's requests (clients concurrent, rounds in order).

    Returns the round trips and the proxy's reported overheads, in seconds.
    """
    latencies: list[float] = []
    overheads: list[float] = []
    failures: list[str] = []
    limits = httpx.Limits(max_connections=len(conversations), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=300, limits=limits) as http:

        async def client(index: int, requests: list[list[dict[str, Any]]]) -> None:
            passes, before = 0, 0
            for body in requests:
                if len(body) < before:  # the replay started again: a new conversation
                    passes += 1
                before = len(body)
                headers = {
                    "Authorization": f"Bearer {keys[index]}",
                    "x-harness-session-id": f"{wave}-client-{index}-{passes}",
                }
                started = time.perf_counter()
                answer = await http.post(
                    "/v1/chat/completions",
                    json={"model": MODEL, "messages": body},
                    headers=headers,
                )
                latencies.append(time.perf_counter() - started)
                reported = answer.headers.get(OVERHEAD_HEADER)
                if reported:
                    overheads.append(float(reported) / 1000)
                if answer.status_code != 200:
                    failures.append(f"{answer.status_code}: {answer.text[:300]}")

        async with anyio.create_task_group() as group:
            for index, requests in enumerate(conversations):
                group.start_soon(client, index, requests)
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed in wave {wave}: {failures[0]}")
    return latencies, overheads


async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Start both proxies, run alternating waves at each level, return the figures."""
    from tests.integration.litellm_proxy import ProxyProcess, start_proxies
    from tests.integration.openai_server import OpenAIServer

    levels = LEVELS[mode]
    workloads = {n: _conversations(mode, n) for n in levels}
    for n in levels:
        progress(f"workload: {workloads[n][0]}")
    keys = [f"sk-bench-{i}" for i in range(max(levels))]
    folder = Path(tempfile.mkdtemp(prefix="harness-bench-proxy-"))
    try:
        with OpenAIServer() as server:
            with_hook, without_hook = _configs(folder)
            env = {
                "HARNESS_UPSTREAM_MODEL": f"openai/{server.model}",
                "HARNESS_UPSTREAM_BASE": server.base_url,
                "HARNESS_UPSTREAM_KEY": "sk-upstream-bench",
                "HARNESS_PROXY_KEYS": ",".join(f"{k}=user-{i}" for i, k in enumerate(keys)),
                "HARNESS_STORE": f"sqlite:///{folder}/sessions.db",
            }
            proxies = {
                "hook": ProxyProcess(with_hook, env=env, name="proxy-hook"),
                "plain": ProxyProcess(without_hook, env=env, name="proxy-plain"),
            }
            with _report.heartbeat(progress, "starting two litellm proxies"):
                await anyio.to_thread.run_sync(start_proxies, list(proxies.values()))
            try:
                samples = {
                    n: await _run_waves(proxies, workloads[n][1], keys, mode, progress, n)
                    for n in levels
                }
            finally:
                for proxy in proxies.values():
                    proxy.stop()
            upstream = len(server.requests)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    label = f"{history(SESSION_MESSAGES[mode]).label}; " + "; ".join(
        workloads[n][0] for n in levels
    )
    return _result(mode, label, samples, upstream)


async def _run_waves(
    proxies: dict[str, Any],
    conversations: list[list[list[dict[str, Any]]]],
    keys: list[str],
    mode: Mode,
    progress: Progress,
    clients: int,
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"hook": [], "plain": [], "hook_in": [], "plain_in": []}
    samples |= {"hook_wall": [], "plain_wall": []}  # one wall time per measured wave
    order = ["plain", "hook"]
    bar = _report.ProgressBar(progress, f"waves at {clients}", 2 * (REPEATS[mode] + 1))
    for repeat in range(REPEATS[mode] + 1):  # wave 0 warms each proxy up
        for name in order:
            wave = f"c{clients}-r{repeat}-{name}"
            started = time.perf_counter()
            latencies, overheads = await _wave(proxies[name].base_url, conversations, wave, keys)
            wall = time.perf_counter() - started
            if repeat:
                samples[f"{name}_wall"].append(wall)
                samples[name].extend(latencies)
                samples[f"{name}_in"].extend(overheads)
            bar.step(f"{wave}: p50 {_report.fmt_time(statistics.median(latencies))}")
        order.reverse()
    return samples


def _signed(seconds: float) -> str:
    """Return a time difference, its sign kept (a noisy run can measure the hook as faster)."""
    return ("−" if seconds < 0 else "") + _report.fmt_time(abs(seconds))


THROUGHPUT_GOAL: Final = 0.9
"""The hook keeps at least this share of a plain proxy's throughput (issue 26)."""
P99_GOAL_S: Final = 0.050
"""… and adds at most this much at p99 with 32 clients."""


def _level(samples: dict[str, list[float]]) -> dict[str, float]:
    """Return one level's figures: p50/p99 per proxy and measure, throughputs, their ratio."""
    out: dict[str, float] = {}
    for name in ("hook", "plain", "hook_in", "plain_in"):
        values = samples[name]
        for q in (50, 99):
            out[f"{name}_p{q}"] = _report.percentile(values, q) if values else float("nan")
    for name in ("hook", "plain"):
        wall = sum(samples[f"{name}_wall"])
        out[f"{name}_per_s"] = len(samples[name]) / wall if wall else 0.0
    out["throughput_ratio"] = (
        out["hook_per_s"] / out["plain_per_s"] if out["plain_per_s"] else float("nan")
    )
    out["added_p50"] = out["hook_p50"] - out["plain_p50"]
    out["added_p99"] = out["hook_p99"] - out["plain_p99"]
    out["added_in_p99"] = out["hook_in_p99"] - out["plain_in_p99"]
    requests = len(samples["plain"]) or 1
    out["added_busy_per_request"] = (
        sum(samples["hook_wall"]) - sum(samples["plain_wall"])
    ) / requests
    out["requests"] = float(len(samples["hook"]))
    return out


def _result(
    mode: Mode, label: str, samples: dict[int, dict[str, list[float]]], upstream: int
) -> dict[str, Any]:
    figures = {n: _level(s) for n, s in samples.items()}
    fmt = _report.fmt_time
    rows: list[list[Any]] = []
    for n, f in figures.items():
        rows.append([
            n, int(f["requests"]), fmt(f["plain_p50"]), fmt(f["hook_p50"]), fmt(f["plain_p99"]),
            fmt(f["hook_p99"]), _signed(f["added_p99"]),
            f"{f['plain_per_s']:.1f}", f"{f['hook_per_s']:.1f}", f"{f['throughput_ratio']:.2f}×",
        ])  # fmt: skip
    top = max(figures)
    worst = min(f["throughput_ratio"] for f in figures.values())
    headline = [
        f"With the hook a proxy worker keeps {worst:.2f}× (lowest of "
        f"{', '.join(str(n) for n in figures)} clients) a plain proxy's throughput",
        f"At {top} concurrent clients the hook adds {_signed(figures[top]['added_p99'])} at p99 "
        f"({_signed(figures[top]['added_p50'])} at p50)",
    ]
    goals = [
        {
            "goal": f"throughput with the hook ≥ {THROUGHPUT_GOAL}× a plain proxy's (every level)",
            "met": worst >= THROUGHPUT_GOAL,
            "detail": f"{worst:.2f}×",
        },
        {
            "goal": f"p99 added by the hook ≤ {fmt(P99_GOAL_S)} at {top} clients",
            "met": figures[top]["added_p99"] <= P99_GOAL_S,
            "detail": _signed(figures[top]["added_p99"]),
        },
    ]
    return {
        "title": "litellm proxy hook: throughput and latency at 1, 8 and 32 clients",
        "workload": label,
        "measured": "each chat request's round trip at the client, and the proxy's own "
        f"{OVERHEAD_HEADER} header, through a litellm proxy process with the harness hook "
        "(default stack, SQLite session store, one session per client) and through the same "
        "config without it, in alternating waves (warm-up wave excluded), at each level of "
        "concurrency; upstream: the local OpenAI-compatible server (answers at once)",
        "headline": headline,
        "goals": goals,
        "tables": [
            {
                "title": "Round trip and throughput by concurrent clients",
                "columns": [
                    "clients",
                    "requests",
                    "p50 plain",
                    "p50 hook",
                    "p99 plain",
                    "p99 hook",
                    "p99 added",
                    "req/s plain",
                    "req/s hook",
                    "throughput ratio",
                ],
                "rows": rows,
                "note": "Both proxies run one worker, the same custom_auth and the same "
                "upstream, one wave at a time on the same machine; ratios are hook ÷ plain "
                "from the same run.",
            }
        ],
        "notes": [
            f"Upstream requests (agent and summary): {upstream:,}.",
            "The hook's cost includes loading and committing the session in SQLite and any "
            "compaction's summary request to the upstream.",
        ],
        "data": {"levels": {str(n): f for n, f in figures.items()}},
    }
