"""Token estimation: invariants of the approximate estimator, family choice, exact loading."""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import ConfigurationError
from harness.messages import Message, ToolCall
from harness.tokens import (
    FAMILY_COEFFICIENTS,
    FULL_ASCII,
    MESSAGE_OVERHEAD,
    ApproximateEstimator,
    CachedEstimator,
    Coefficients,
    ExactEstimator,
    approximate,
    estimator_for,
    exact_for_family,
    family_for,
    sample_text,
)

FAMILIES = ("o200k", "cl100k", "deepseek", "anthropic")
HARNESS_DIR = Path(__file__).resolve().parent.parent / "harness"

messages = st.builds(
    lambda text, role: Message(role=role, content=text),
    st.text(max_size=400),
    st.sampled_from(["system", "user", "assistant", "tool"]),
)


@given(text=st.text(max_size=3000), family=st.sampled_from(FAMILIES))
def test_counts_are_never_negative(text: str, family: str) -> None:
    count = approximate(family).count(text)
    assert count >= 0
    assert (count == 0) == (text == "")


@given(text=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=5000))
@settings(max_examples=50)
def test_long_and_odd_texts_are_counted(text: str) -> None:
    assert approximate().count(text * 3) >= 1


@given(first=st.lists(messages, max_size=6), second=st.lists(messages, max_size=6))
def test_counts_add_up_over_concatenated_messages(
    first: list[Message], second: list[Message]
) -> None:
    est = approximate()
    separate = est.count_messages(first) + est.count_messages(second)
    assert approximate().count_messages(first + second) == separate
    assert est.count_messages(first + second) == separate
    for message in first + second:
        assert est.count_message(message) >= MESSAGE_OVERHEAD


# ------------------------------------------------- a mixed corpus, built right here
_ZH = [
    "上下文管理就是在这个过程中，持续为模型准备足以继续工作的输入。",
    "每次决定下一步之前，模型都需要知道用户要什么、已经做过什么、刚才的工具返回了什么。",
    "任务越长，这些信息越多；把全部内容一直放进请求，既增加开销，也可能超出模型的上下文窗口。",
    "插件让开发者可以像操作文本文件一样查看、修改、裁剪、禁用、重排发送给模型的上下文片段。",
    "如果你也在用 Agent 跑长任务，建议先实现最基础的片段列表和编辑能力，跑通后再逐步加入裁剪。",
]
_WORDS = str.split(
    "the agent reads the file and runs the tests before it changes anything in the "
    "repository because a failing build costs more than a careful plan request response "
    "budget history compaction summary middleware estimator tokenizer configuration"
)


def _mixed_corpus() -> list[Message]:
    rng = random.Random(7)
    out: list[Message] = []
    for path in sorted(HARNESS_DIR.glob("*.py")):
        out.append(Message.tool("call_src", path.read_text("utf-8")[:6000], name="read_file"))
    for _ in range(30):
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 40)))
        out.append(Message.user(sentence.capitalize() + "."))
        args = json.dumps({"path": f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py"})
        out.append(
            Message.assistant(
                "Let me look.", tool_calls=[ToolCall(id="c", name="read_file", arguments=args)]
            )
        )
        frames = "\n".join(
            f'  File "/usr/lib/python3.11/{rng.choice(_WORDS)}.py", line {rng.randint(1, 999)}'
            f", in {rng.choice(_WORDS)}\n    {rng.choice(_WORDS)}({rng.randint(0, 99)})"
            for _ in range(rng.randint(1, 6))
        )
        out.append(
            Message.tool("c", f"Traceback (most recent call last):\n{frames}\nKeyError: 'x'")
        )
        listing = "\n".join(
            f"-rw-r--r-- 1 dev dev {rng.randint(10, 99999):>6} {rng.choice(_WORDS)}.py"
            for _ in range(rng.randint(2, 12))
        )
        out.append(Message.tool("c", listing))
        out.append(Message.user("".join(rng.sample(_ZH, rng.randint(1, len(_ZH))))))
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(40))
        out.append(Message.tool("c", f"commit {sha}\nAuthor: dev <dev@example.com>\n"))
    return out


def test_approximate_does_not_under_count_a_mixed_corpus() -> None:
    corpus = _mixed_corpus()
    estimated = approximate("o200k").count_messages(corpus)
    exact = exact_for_family("o200k").count_messages(corpus)
    assert estimated >= 0.97 * exact, (estimated, exact)
    assert estimated <= 1.15 * exact, (estimated, exact)


def test_long_texts_are_sampled_and_still_close() -> None:
    source = (HARNESS_DIR / "messages.py").read_text("utf-8")
    assert len(source) > FULL_ASCII
    sample, scale = sample_text(source)
    assert len(sample) <= FULL_ASCII and scale > 1
    estimated = approximate().count(source)
    exact = exact_for_family("o200k").count(source)
    assert 0.85 * exact <= estimated <= 1.2 * exact, (estimated, exact)


def test_cjk_costs_more_per_character_than_ascii() -> None:
    est = approximate()
    zh = "".join(_ZH)
    english = " ".join(_WORDS)[: len(zh)]
    assert est.count(zh) / len(zh) > est.count(english) / len(english)


# ------------------------------------------------------------------ families
@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "o200k"),
        ("gpt-4o-mini", "o200k"),
        ("openai/gpt-4.1", "o200k"),
        ("gpt-4", "cl100k"),
        ("gpt-3.5-turbo", "cl100k"),
        ("claude-sonnet-4-5", "anthropic"),
        ("anthropic/claude-3-haiku", "anthropic"),
        ("deepseek/deepseek-chat", "deepseek"),
        ("deepseek-reasoner", "deepseek"),
        ("some-unknown-model", "o200k"),
    ],
)
def test_estimator_for_picks_the_family(model: str, family: str) -> None:
    assert family_for(model) == family
    est = estimator_for(model)
    assert isinstance(est, ApproximateEstimator)
    assert est.method == f"approximate:{family}"
    assert not est.exact


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_estimators_load_offline_from_litellm_files(family: str) -> None:
    est = exact_for_family(family)
    assert isinstance(est, ExactEstimator) and est.exact
    assert est.count("") == 0
    assert 1 <= est.count("Hello, world! 你好") <= 12
    model = {"o200k": "gpt-4o", "cl100k": "gpt-4", "deepseek": "deepseek-chat"}.get(
        family, "claude-3-5-sonnet"
    )
    assert estimator_for(model, exact=True).method == est.method


def test_unknown_family_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        approximate("nope")
    with pytest.raises(ConfigurationError):
        exact_for_family("nope")


def test_coefficients_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        Coefficients(table="zz", unit=0.1, base=0.0)
    with pytest.raises(ConfigurationError):
        Coefficients(table="ff" * 256, unit=0.1, base=0.0)
    flat = Coefficients(table="00" * 256, unit=0.1, base=0.25, fixed=0.0)
    assert flat.tokens_per_byte(ord("a")) == 0.25
    assert ApproximateEstimator("custom", flat).count("a" * 40) == 10
    assert set(FAMILY_COEFFICIENTS) == set(FAMILIES)


# --------------------------------------------------------------------- cache
@pytest.mark.parametrize("make", [approximate, lambda: exact_for_family("o200k")])
def test_message_cache_returns_cached_count_and_recounts_changed_content(
    make: Callable[[], CachedEstimator],
) -> None:
    est = make()
    text = "short text about tokens"
    message = Message.user(text)
    first = est.count_message(message)
    assert est.count_message(message) == first
    assert est._messages[message.id] & 0xFFFF_FFFF == first  # served from the cache
    # Same id and same length but other text: the fingerprint differs, so it is recounted.
    same_length = message.replace(content="上" * len(text))
    assert est.count_message(same_length) == make().count_message(same_length) > first
    # Same id, different length: recounted.
    longer = message.replace(content=text * 50)
    assert est.count_message(longer) == make().count_message(longer) > first


def test_lone_surrogates_and_control_bytes_are_counted() -> None:
    for family in FAMILIES:
        assert approximate(family).count("\ud800 lone surrogate \x00\x07") >= 1


@pytest.mark.parametrize(
    "text",
    ["def f(x):\n    return x + 1\n", "上下文" * 100, "🚀" * 300, "déjà vu " * 400, "x" * 5000],
)
def test_count_is_the_per_byte_sum_of_the_coefficients(text: str) -> None:
    coefficients = FAMILY_COEFFICIENTS["o200k"]
    sample, scale = sample_text(text)
    expected = coefficients.fixed + scale * sum(
        coefficients.tokens_per_byte(b) for b in sample.encode("utf-8", "surrogatepass")
    )
    assert approximate("o200k").count(text) == max(1, math.ceil(expected - 1e-9))


def test_exact_o200k_loads_from_litellms_files_even_with_another_cache_dir_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness.tokens import _tiktoken_len, tiktoken_encoding

    _tiktoken_len.cache_clear()
    tiktoken_encoding.cache_clear()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: would force a download
    assert _tiktoken_len("o200k_base")("hello world") == 2
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path)
    assert list(tmp_path.iterdir()) == []
