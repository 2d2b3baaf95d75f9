"""The ``harness`` command: run the demo session, read the session store.

harness run                      the demo agent session (offline, ScriptedModel)
HARNESS_MODEL=gpt-4o harness run the same session on a real model through litellm
harness sessions list|show|search|purge   the recorded sessions (see `harness.cli.sessions`)
harness manifests show --session ID       a session's context_build manifests
harness fragments list|show|add|edit|rm|disable|enable|move|revert|search --session ID
                                          a session's context fragments (`harness.fragments.editing`)
harness context show --session ID [--call ID] [--html FILE]
                                          what the model received in one round

The benchmarks are not a sub-command (nothing in `harness` imports them): from a source
checkout, ``python -m benchmarks providers --model M [--api-base URL]`` or ``make bench``.

``--json`` prints JSON lines and nothing else on stdout, for every command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import anyio

from harness.cli import context as context_cli
from harness.cli import fragments as fragments_cli
from harness.cli import sessions as sessions_cli
from harness.errors import HarnessError


def _positive_int(text: str) -> int:
    """Parse a positive int for argparse (which turns the error into a usage message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive; give at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="context-harness: per-request context preparation for LLM agents.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the demo agent session and print every round's manifest")
    run.add_argument(
        "--model",
        default=os.environ.get("HARNESS_MODEL"),
        help="a litellm model name (default: $HARNESS_MODEL; unset = the offline ScriptedModel)",
    )
    run.add_argument(
        "--api-base",
        default=os.environ.get("HARNESS_API_BASE"),
        help="provider base URL (default: $HARNESS_API_BASE)",
    )
    run.add_argument(
        "--api-key",
        default=os.environ.get("HARNESS_API_KEY"),
        help="API key (default: $HARNESS_API_KEY, else the provider's usual variable)",
    )
    run.add_argument(
        "--workspace",
        default=None,
        help="a new or empty folder to keep the demo's files in (default: a temporary folder, "
        "removed at the end); a folder with files the demo did not create is refused",
    )
    run.add_argument(
        "--max-input-tokens",
        type=_positive_int,
        default=None,
        help="input budget (default: the demo's small budget offline)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print manifests as JSON lines on stdout (the rest goes to stderr)",
    )
    sessions_cli.add_commands(sub)
    fragments_cli.add_commands(sub)
    context_cli.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            from harness.cli.demo import run_demo

            return anyio.run(
                lambda: run_demo(
                    model=args.model,
                    api_base=args.api_base,
                    api_key=args.api_key,
                    workspace=args.workspace,
                    max_input_tokens=args.max_input_tokens,
                    as_json=args.json,
                )
            )
        if args.command in ("sessions", "manifests"):
            status: int = anyio.run(sessions_cli.run, args)
            return status
        if args.command == "fragments":
            done: int = anyio.run(fragments_cli.run, args)
            return done
        if args.command == "context":
            shown: int = anyio.run(context_cli.run, args)
            return shown
    except HarnessError as exc:
        print(f"harness: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 1
