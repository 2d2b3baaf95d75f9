"""The proxy hook's added latency per request inside a real litellm proxy, at 100 clients.

Two litellm proxy processes start side by side from ``examples/proxy/config.yaml`` (the
config a team would use): one with the harness hook (``callbacks:`` and
``callback_settings: harness:``, a SQLite session store in a temp folder), one from the same
file with the hook's two sections removed. Both use the same ``custom_auth``
(``team_auth.py``), one worker each, and forward to the same local OpenAI-compatible server
(``tests/integration/openai_server.py``, which answers at once).

The workload: ``CLIENTS`` concurrent clients (100; 5 in smoke mode), each with its own key's
session (``x-harness-session-id``), replay a session of the shared SWE-agent runs when
``../shared/data`` is present, else generated runs (`benchmarks.workloads.history`): client
*i* starts at its own request point of that session and sends ``ROUNDS`` growing requests,
the whole conversation each time (system, user, assistant tool calls, tool results), as a
plain OpenAI client does. Each request is timed end to end at the client (HTTP round trip),
and the proxy's own ``x-litellm-overhead-duration-ms`` header (its time outside the upstream
call, the pre-call hook included) is collected too: at 100 clients one proxy worker queues
requests, so the round trip includes waiting behind others; the header shows the work.

Waves alternate between the two proxies (the order rotated each repetition), so drift of a
busy machine hits both alike. The hook's added latency is p50 (p99) with the hook minus
p50 (p99) without it, and their ratio, for both measures; the waves' wall times give each
proxy's throughput and the hook's added busy time per request (wall difference ÷
requests). The first wave on each proxy warms it up and is not counted. No goal is
checked: the figure is for the README (the hook runs the whole default stack and commits a
session round to SQLite per request).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.workloads import history, request_points

CLIENTS: dict[Mode, int] = {"full": 100, "quick": 100, "smoke": 5}
"""Concurrent clients per wave."""
ROUNDS: dict[Mode, int] = {"full": 5, "quick": 3, "smoke": 2}
"""Requests each client sends per wave (its conversation grows between them)."""
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


def _conversations(mode: Mode) -> tuple[str, list[list[list[dict[str, Any]]]]]:
    """Return the workload's label and, per client, its ``ROUNDS`` growing requests."""
    session = history(SESSION_MESSAGES[mode])
    system = {"role": "system", "content": session.system_prompt}
    messages = [m.to_openai() for m in session.messages]
    points = [p for p in request_points(session.messages) if p > 0]
    rounds = ROUNDS[mode]
    usable = max(1, len(points) - rounds)
    per_client: list[list[list[dict[str, Any]]]] = []
    for client in range(CLIENTS[mode]):
        start = (client * 7) % usable
        tag = {"role": "user", "content": f"[client {client}] Work on the task below."}
        per_client.append([[system, tag, *messages[: points[start + r]]] for r in range(rounds)])
    sizes = [len(r) for c in per_client for r in c]
    label = (
        f"{session.label}; each client replays {rounds} growing requests from its own point "
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
            headers = {
                "Authorization": f"Bearer {keys[index]}",
                "x-harness-session-id": f"{wave}-client-{index}",
            }
            for body in requests:
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
    """Start both proxies, run alternating waves, return the latency figures."""
    from tests.integration.litellm_proxy import ProxyProcess, start_proxies
    from tests.integration.openai_server import OpenAIServer

    label, conversations = _conversations(mode)
    progress(f"workload: {label}")
    keys = [f"sk-bench-{i}" for i in range(len(conversations))]
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
                samples = await _run_waves(proxies, conversations, keys, mode, progress)
            finally:
                for proxy in proxies.values():
                    proxy.stop()
            upstream = len(server.requests)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _result(mode, label, samples, upstream, len(conversations))


async def _run_waves(
    proxies: dict[str, Any],
    conversations: list[list[list[dict[str, Any]]]],
    keys: list[str],
    mode: Mode,
    progress: Progress,
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"hook": [], "plain": [], "hook_in": [], "plain_in": []}
    samples |= {"hook_wall": [], "plain_wall": []}  # one wall time per measured wave
    order = ["plain", "hook"]
    bar = _report.ProgressBar(progress, "waves", 2 * (REPEATS[mode] + 1))
    for repeat in range(REPEATS[mode] + 1):  # wave 0 warms each proxy up
        for name in order:
            wave = f"r{repeat}-{name}"
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


def _result(
    mode: Mode, label: str, samples: dict[str, list[float]], upstream: int, clients: int
) -> dict[str, Any]:
    p = {
        (name, q): _report.percentile(values, q) if values else float("nan")
        for name, values in samples.items()
        for q in (50, 99)
    }
    added = {
        (kind, q): p[f"hook{kind}", q] - p[f"plain{kind}", q]
        for kind in ("", "_in")
        for q in (50, 99)
    }

    requests = len(samples["plain"]) or 1
    walls = {name: sum(samples[f"{name}_wall"]) for name in ("hook", "plain")}
    throughput = {name: len(samples[name]) / walls[name] if walls[name] else 0.0 for name in walls}
    service = (walls["hook"] - walls["plain"]) / requests  # added busy time per request

    def ratio(kind: str) -> str:
        base = p[f"plain{kind}", 50]
        return f"{p[f'hook{kind}', 50] / base:.2f}×" if base > 0 else "n/a"

    rows: list[list[Any]] = []
    for kind, what in (("", "round trip at the client"), ("_in", "proxy's own overhead")):
        rows += [
            [what, "without the hook", len(samples[f"plain{kind}"]),
             _report.fmt_time(p[f"plain{kind}", 50]), _report.fmt_time(p[f"plain{kind}", 99]), "1.00×"],
            [what, "with the hook", len(samples[f"hook{kind}"]),
             _report.fmt_time(p[f"hook{kind}", 50]), _report.fmt_time(p[f"hook{kind}", 99]), ratio(kind)],
            [what, "added by the hook", "",
             _signed(added[kind, 50]), _signed(added[kind, 99]), ""],
        ]  # fmt: skip
    per_s = f"{throughput['plain']:.1f} → {throughput['hook']:.1f} requests/s"
    headline = [  # busy time first: at 100 clients one worker queues, so round trips mostly wait
        f"Throughput of one proxy worker {per_s}: the hook adds "
        f"{_signed(service)} of busy time per request",
        f"At {clients} concurrent clients (one worker, requests queue) the hook adds "
        f"{_signed(added['', 50])} at p50 and {_signed(added['', 99])} at p99 to a request's "
        f"round trip ({ratio('')} the proxy's own p50)",
        f"The proxy's reported overhead (x-litellm-overhead-duration-ms) grows by "
        f"{_signed(added['_in', 50])} at p50, {_signed(added['_in', 99])} at p99",
    ]
    return {
        "title": "litellm proxy hook: added latency per request",
        "workload": label,
        "measured": "each chat request's round trip at the client, and the proxy's own "
        f"{OVERHEAD_HEADER} header, through a litellm proxy process with the harness hook "
        "(default stack, SQLite session store, one session per client) and through the same "
        "config without it, in alternating waves (warm-up wave excluded); upstream: the local "
        "OpenAI-compatible server (answers at once)",
        "headline": headline,
        "goals": [],
        "tables": [
            {
                "title": f"Request latency at {clients} concurrent clients",
                "columns": ["measure", "proxy", "requests", "p50", "p99", "p50 ratio"],
                "rows": rows,
                "note": "Both proxies run one worker, the same custom_auth and the same "
                "upstream, one wave at a time on the same machine. At 100 clients the proxy "
                "queues requests, so round trips include waiting for requests ahead of it.",
            }
        ],
        "notes": [
            f"Upstream requests (agent and summary): {upstream:,}.",
            "The hook's cost includes loading and committing the session in SQLite and any "
            "compaction's summary request to the upstream.",
        ],
        "data": {
            "p50_s": {name: p[name, 50] for name in samples if "wall" not in name},
            "p99_s": {name: p[name, 99] for name in samples if "wall" not in name},
            "added_p50_s": added["", 50],
            "added_p99_s": added["", 99],
            "added_overhead_p50_s": added["_in", 50],
            "added_overhead_p99_s": added["_in", 99],
            "requests": {name: len(samples[name]) for name in ("hook", "plain")},
            "wave_walls_s": {name: samples[f"{name}_wall"] for name in ("hook", "plain")},
            "requests_per_s": throughput,
            "added_busy_s_per_request": service,
            "clients": clients,
        },
    }
