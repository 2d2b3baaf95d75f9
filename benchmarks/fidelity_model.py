"""The fidelity benchmark with a real model: its summaries, fact questions and recall.

``python -m benchmarks fidelity --model MODEL [--api-base URL]`` replays the same sessions,
but every summary — ours (through Compaction, in place or as a transcript) and LangChain's
(its own prompt) — is written by ``MODEL``; agent requests are still answered from the
recording, so only summaries and questions are paid for. Fact questions come from each run
(`questions`: planted facts, exceptions observations reported, files the agent created, with
their answers) and are asked after the default stack's compactions (`POINTS` request points
a window, `PER_POINT` questions each, the oldest facts of the run first) of every strategy's
request there, of the full history and of no history: recall is the share answered right.
Every answer is saved under its prompt's hash in `CACHE_DIR`: a run that stopped resumes
where it stopped, asking only what it had not asked; progress is printed per answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._report import RESULTS_DIR, Progress
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse
from harness.types import ModelClient
from providers.scripted import ScriptedModel

CACHE_DIR = RESULTS_DIR / "fidelity_model_cache"
"""Where the model's summaries are kept, one JSON file per model."""


class SummaryCache:
    """The model's answers by prompt hash, in one JSON file, written after every new answer."""

    def __init__(self, model: str, folder: Path | None = None) -> None:
        folder = folder or CACHE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in model)
        self.path = folder / f"{safe}.json"
        self.answers: dict[str, str] = (
            json.loads(self.path.read_text("utf-8")) if self.path.exists() else {}
        )
        self.asked = 0
        """Answers asked of the model in this run (the rest came from the file)."""

    @staticmethod
    def key(payload: Any) -> str:
        """Return the hash a prompt is kept under."""
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> str | None:
        """Return the kept answer, or None."""
        return self.answers.get(key)

    def put(self, key: str, text: str) -> None:
        """Keep an answer (the file is rewritten at once: a crash loses at most this one)."""
        self.answers[key] = text
        self.asked += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.answers, ensure_ascii=False), "utf-8")
        os.replace(tmp, self.path)


class ModelSummaries:
    """A model client: summary requests go to the real model (or the cache), the rest scripted.

    Summary requests are appended to ``scripted.requests`` too, so the benchmark counts and
    bills them as it does offline.
    """

    def __init__(
        self, scripted: ScriptedModel, real: ModelClient, cache: SummaryCache, progress: Progress
    ) -> None:
        self.scripted = scripted
        self.real = real
        self.cache = cache
        self.progress = progress
        self.model = scripted.model

    def context_window(self, model: str | None = None) -> int | None:
        """Return the scripted window (the one every strategy is measured at)."""
        return self.scripted.context_window(model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer a summary request with the real model's summary, anything else scripted."""
        if request.ids.purpose != "summary":
            return await self.scripted.complete(request)
        self.scripted.requests.append(request)
        key = self.cache.key([m.to_openai() for m in request.render()])
        text = self.cache.get(key)
        if text is None:
            response = await self.real.complete(request.replace(model=self.real.model))
            text = response.message.text
            self.cache.put(key, text)
            self.progress(f"summary {self.cache.asked} from {self.real.model}")
        return ModelResponse(message=Message.assistant(text), model=self.real.model)


def langchain_summarizer(
    model: str, api_base: str | None, cache: SummaryCache, progress: Progress
) -> Callable[[str], str]:
    """Return a function that asks ``model`` LangChain's summary prompt (cached)."""

    def ask(prompt: str) -> str:
        key = cache.key(["langchain", prompt])
        text = cache.get(key)
        if text is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            answer = litellm.completion(
                model=model, api_base=api_base, messages=[{"role": "user", "content": prompt}]
            )
            text = str(answer.choices[0].message.content or "")
            cache.put(key, text)
            progress(f"summary {cache.asked} from {model} (LangChain's prompt)")
        return text

    return ask


# ---------------------------------------------------------------------------- recall
@dataclass(frozen=True)
class Question:
    """A fact question about a run, with its answer, askable once the fact has appeared."""

    run: int
    after: int
    """The index of the message that shows the fact (asked only at later requests)."""
    text: str
    answer: str


_PLANTED = re.compile(r"planted: (\S+) at (\w+) \(build (\d+)\)")
_ERROR = re.compile(r"^(\w+(?:Error|Exception)):", re.MULTILINE)
ASK = "Answer from the conversation above only, in a few words (no tool call): {question}"
PER_POINT = 3
"""Questions asked at one request point (the oldest facts of its run first)."""
POINTS = 6
"""Request points questions are asked at, per window: after the default stack's compactions."""


def questions(messages: Sequence[Message], runs: Sequence[int]) -> list[Question]:
    """Return fact questions with their answers: planted facts, errors seen, files created.

    - a planted fact line (generated runs): the build number recorded with its file;
    - an exception an observation reported: which one, after which action;
    - a file the agent created (``create`` / ``write_file`` calls): its name.
    """
    out: list[Question] = []
    last_action = ""
    for i, message in enumerate(messages):
        if message.role == "assistant":
            last_action = (message.tool_calls[0].arguments if message.tool_calls else message.text)[
                :120
            ]
            for call in message.tool_calls:
                if call.name in ("create", "write_file"):
                    name = _file_argument(call.arguments)
                    if name:
                        out.append(
                            Question(runs[i], i, "Which new file did the agent create?", name)
                        )
            continue
        text = message.text
        for match in _PLANTED.finditer(text):
            out.append(
                Question(
                    runs[i],
                    i,
                    f"What build number was recorded with {match.group(1)}?",
                    match.group(3),
                )
            )
        error = _ERROR.search(text)
        if error and message.role in ("tool", "user") and i > 0:
            out.append(
                Question(
                    runs[i],
                    i,
                    f"Which exception did the output after the action {last_action!r} report?",
                    error.group(1),
                )
            )
    return out


def _file_argument(arguments: str) -> str | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    for key in ("filename", "path", "file_path"):
        if isinstance(value.get(key), str):
            return str(value[key])
    return None


def correct(answer: str, expected: str) -> bool:
    """Return whether a model's answer gives the expected one (case-insensitive, in it)."""
    return expected.lower() in answer.lower()


def asked_at(point: int, runs: Sequence[int], pool: Sequence[Question]) -> list[Question]:
    """Return the questions asked at ``point``: its run's facts shown before it, oldest first."""
    return [q for q in pool if q.run == runs[point] and q.after < point][:PER_POINT]


def recall_asker(
    model: str, api_base: str | None, cache: SummaryCache, progress: Progress
) -> Callable[[Sequence[Message], Question], bool]:
    """Return a function that asks ``model`` a question after some messages; True if right."""

    def ask(messages: Sequence[Message], question: Question) -> bool:
        sent = [m.to_openai() for m in messages]
        sent.append({"role": "user", "content": ASK.format(question=question.text)})
        key = cache.key(["recall", sent])
        text = cache.get(key)
        if text is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            answer = litellm.completion(model=model, api_base=api_base, messages=sent)
            text = str(answer.choices[0].message.content or "")
            cache.put(key, text)
            progress(f"answer {cache.asked} from {model}")
        return correct(text, question.answer)

    return ask
