"""The fidelity benchmark with a real model: summaries come from it, kept on disk to resume.

``python -m benchmarks fidelity --model MODEL [--api-base URL]`` replays the same sessions,
but every summary — ours (through Compaction, in place or as a transcript) and LangChain's
(its own prompt) — is written by ``MODEL``; agent requests are still answered from the
recording, so only summaries are paid for. Every answer is saved under its prompt's hash in
`CACHE_DIR`: a run that stopped resumes where it stopped, asking only what it had not asked.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
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
