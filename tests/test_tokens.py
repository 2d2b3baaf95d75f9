"""Token estimation: the approximate estimator's invariants and bounds, families, caches, images."""

from __future__ import annotations

import base64
import json
import math
import os
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.shapes import SHAPES, shape_texts
from benchmarks.textgen import WIDE_CLASSES
from harness import ContextPolicy, ModelRequest
from harness.accounting import counted_near_limit, estimate_request
from harness.errors import ConfigurationError
from harness.messages import ContentPart, Message, ToolCall
from harness.tokens import (
    _STRIDE,
    FAMILIES,
    FAMILY_COEFFICIENTS,
    FAMILY_FLOOR,
    IMAGE_BOUND,
    MESSAGE_OVERHEAD,
    PERIOD_MAX,
    RUN_BLOCK,
    RUN_CHARS,
    RUN_LONG,
    TOOL_CALL_OVERHEAD,
    ApproximateEstimator,
    BoundEstimator,
    CachedEstimator,
    Coefficients,
    ExactEstimator,
    _run_savings,
    anthropic_image_tokens,
    approximate,
    estimator_for,
    exact_for_family,
    family_for,
    image_size,
    image_tokens,
    openai_image_tokens,
    period,
    shared_exact,
)
from harness.tokens._text_shapes import _letter_runs_in, _may_hold_letter_run, _short_run
from tests._texts import KINDS
from tests._texts import generate as budget_text

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


@given(text=st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=2000))
@settings(max_examples=50)
def test_more_text_never_counts_less(text: str) -> None:
    est = approximate()
    assert est.count(text * 3) >= est.count(text) >= 1


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


# ------------------------------------------------------- no negative weights, no aliasing
@pytest.mark.parametrize("family", FAMILIES)
def test_every_weight_is_non_negative_and_long_runs_of_any_byte_grow(family: str) -> None:
    coefficients = FAMILY_COEFFICIENTS[family]
    assert min(coefficients.unit, coefficients.page_unit, coefficients.rare_cjk) >= 0
    assert coefficients.fixed >= 0
    assert all(a >= 0 and b >= 0 for _, a, b in coefficients.runs)
    est = approximate(family)
    for char in ["\r", "\ufeff", "\x00", "é", "\uffff", "a", " ", "="]:
        short, long = est.count(char * 1000), est.count(char * 50_000)
        assert long >= short >= 1, (char, short, long)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "text",
    ["\r" * 50_000, "abcd " * 1000, " " * 5000, "=" * 1000, "0" * 3000, "\n" * 2000, "ab" * 3000],
)
def test_runs_and_periodic_text_stay_within_the_bound(family: str, text: str) -> None:
    exact = shared_exact(family).count(text)
    estimate = approximate(family).count(text)
    assert FAMILY_FLOOR[family] * exact <= estimate, (estimate, exact)
    # Runs of one character are a handful of tokens: allow a few tokens of slack.
    assert estimate <= 2 * exact + 8, (estimate, exact)


def test_periodic_text_is_read_whole_not_sampled() -> None:
    exact = shared_exact("o200k")
    for unit in ["abcd ", "0x00, ", "| a | b |\n", "ab"]:
        for repeats in (200, 1000, 3001):
            text = unit * repeats
            ratio = approximate().count(text) / exact.count(text)
            assert FAMILY_FLOOR["o200k"] <= ratio <= 2, (unit, repeats, ratio)


# ---------------------------------------------------------------- per class, every family
KNOWN_GAPS = {(family, "whitespace-runs") for family in FAMILIES} | {("anthropic", "fullwidth")}
"""Known misses, reported by the benchmark: mixed whitespace patterns (``"  \n" * n``,
``"\r\n" * n``) are not single-character runs; their ratio ranges about 0.5–2.5. Full-width
forms share their page (U+FF00) with half-width katakana, which Anthropic's tokenizer charges
far more: the page is priced for katakana and full-width text counts about 2.0× (over, on the
safe side)."""


@pytest.mark.parametrize("family", FAMILIES)
@given(seed=st.integers(0, 2**32 - 1))
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the upper 2× is a target, measured on fixed samples (no CI flakes)
)
def test_every_text_class_lies_between_the_floor_and_twice_exact(family: str, seed: int) -> None:
    est, exact = approximate(family), shared_exact(family)
    failures = []
    for name, generate in WIDE_CLASSES.items():
        if (family, name) in KNOWN_GAPS:
            continue
        if name == "periodic":
            # One short unit repeated is one sample, not a class: a per-character model
            # can go far under on one unit ("ucoi " × n); see the periodic tests above.
            continue
        rng = random.Random(f"{seed}:{name}")
        texts = [generate(rng, rng.randint(300, 1500)) for _ in range(3)]
        ratio = sum(map(est.count, texts)) / sum(map(exact.count, texts))
        if not est.floor <= ratio <= 2.0:
            failures.append((name, round(ratio, 3)))
    assert not failures, failures


@pytest.mark.parametrize("family", FAMILIES)
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_text_class_goes_under_the_floor(family: str, seed: int) -> None:
    """The safety half, on random samples: the budget relies on estimate ≥ floor × exact."""
    est, exact = approximate(family), shared_exact(family)
    for name, generate in WIDE_CLASSES.items():
        if name == "periodic":
            continue  # one unit repeated is one sample, tested on its own above
        rng = random.Random(f"{seed}:{name}")
        texts = [generate(rng, rng.randint(300, 1500)) for _ in range(3)]
        ratio = sum(map(est.count, texts)) / sum(map(exact.count, texts))
        assert ratio >= est.floor, (name, round(ratio, 3))


@pytest.mark.parametrize("name", sorted(WIDE_CLASSES))
def test_the_bound_is_over_every_known_family(name: str) -> None:
    bound = estimator_for("gemini-2.0-flash")
    rng = random.Random(name)
    texts = [WIDE_CLASSES[name](rng, rng.randint(200, 2000)) for _ in range(3)]
    estimate = sum(map(bound.count, texts))
    for family in FAMILIES:
        assert estimate >= sum(map(shared_exact(family).count, texts)), family


# ------------------------------------------------------------------------ families
@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "o200k"),
        ("gpt-4o-mini", "o200k"),
        ("openai/gpt-4.1", "o200k"),
        ("o3-mini", "o200k"),
        ("chatgpt-4o-latest", "o200k"),
        ("gpt-4", "cl100k"),
        ("gpt-3.5-turbo", "cl100k"),
        ("claude-sonnet-4-5", "anthropic"),
        ("anthropic/claude-3-haiku", "anthropic"),
        ("deepseek/deepseek-chat", "deepseek"),
        ("deepseek-reasoner", "deepseek"),
    ],
)
def test_estimator_for_picks_the_family(model: str, family: str) -> None:
    assert family_for(model) == family
    est = estimator_for(model)
    assert isinstance(est, ApproximateEstimator)
    assert est.method == f"approximate:{family}"
    assert not est.exact
    assert 0 < est.floor < 1
    assert est.exact_counter is shared_exact(family)
    assert est.exact_counter is estimator_for(model).exact_counter  # one per process


@pytest.mark.parametrize(
    "model", ["gemini/gemini-1.5-pro", "ollama/llama3", "mistral-large", "qwen2.5", "scripted-v2"]
)
def test_models_without_an_offline_tokenizer_get_the_bound(model: str) -> None:
    est = estimator_for(model)
    assert isinstance(est, BoundEstimator)
    assert est.method == "bound:unknown"
    assert not est.exact and est.exact_counter is None
    assert estimator_for(model, exact=True).method == "bound:unknown"
    # the private modules' source (the token ones hold hex tables and packed CJK sets)
    text = "".join(p.read_text("utf-8") for p in sorted(HARNESS_DIR.glob("_*.py")))
    assert est.count(text) >= max(approximate(f).count(text) for f in FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_estimators_load_offline_from_litellm_files(family: str) -> None:
    est = exact_for_family(family)
    assert isinstance(est, ExactEstimator) and est.exact
    assert est.floor == 1.0 and est.exact_counter is None
    assert est.count("") == 0
    assert 1 <= est.count("Hello, world! 你好") <= 12
    model = {"o200k": "gpt-4o", "cl100k": "gpt-4", "deepseek": "deepseek-chat"}.get(
        family, "claude-3-5-sonnet"
    )
    assert estimator_for(model, exact=True).method == est.method


def test_unknown_family_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        ApproximateEstimator("nope")
    with pytest.raises(ConfigurationError):
        exact_for_family("nope")


def test_coefficients_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        Coefficients(table="zz", unit=0.1)
    with pytest.raises(ConfigurationError):
        Coefficients(table="ff" * 256, unit=0.1)
    with pytest.raises(ConfigurationError):
        Coefficients(table="00" * 256, unit=0.1, fixed=-1.0)
    with pytest.raises(ConfigurationError):
        Coefficients(table="00" * 256, unit=-0.1)
    flat = Coefficients(table="0a" * 256, unit=0.025)
    assert flat.char_tokens("a") == 0.25
    # a flat 0.25 a character (a text without runs: a run of one letter is counted as one)
    assert (
        ApproximateEstimator("custom", flat).count("Pack my box with five dozen liquor jugs!") == 10
    )
    assert set(FAMILY_COEFFICIENTS) == set(FAMILIES) == set(FAMILY_FLOOR)


@pytest.mark.parametrize(
    "text",
    ["def f(x):\n    return x + 1\n", "上下文" * 100, "🚀" * 300, "déjà vu " * 400],
)
def test_count_is_the_sum_of_the_character_weights_outside_runs(text: str) -> None:
    coefficients = FAMILY_COEFFICIENTS["o200k"]
    expected = coefficients.fixed + sum(coefficients.char_tokens(c) for c in text)
    assert approximate("o200k").count(text) == max(1, math.ceil(expected - 1e-6))


LETTER_RUN_TEXTS = [
    "key: " + "q" * 200,
    "data = " + "z" * 2000 + " end",
    "# " + "v" * 60 + " root",
    "x" * 5000,
    "AAAA" * 100 + "\n",
    # estimated at 0.2-0.3 a character, above the first gate (0.42-0.56x in some families)
    *("key: " + c * 200 for c in "NPpWktD"),
    "The quick brown fox " + "t" * 100 + " jumps",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_run_of_one_letter_or_digit_is_counted_as_a_run(family: str) -> None:
    # Its weights send such a text to the dense table, which priced the run near nothing
    # ("key: " + "q" * 200: 9 for 103): the run is counted by the exact tokenizer and the
    # rest of the text estimated; without a tokenizer, floor x its length.
    est, exact = approximate(family), shared_exact(family)
    custom = ApproximateEstimator("custom", FAMILY_COEFFICIENTS[family])
    for text in LETTER_RUN_TEXTS:
        assert est.count(text) >= est.floor * exact.count(text), text[:12]
        assert custom.count(text) >= custom.floor * exact.count(text), text[:12]
    # a run the weights price near nothing is counted, not guessed (it was 0.09x)
    assert est.count(LETTER_RUN_TEXTS[0]) <= 1.2 * exact.count(LETTER_RUN_TEXTS[0])


def test_letter_runs_are_scanned_for_only_in_texts_that_may_hold_one() -> None:
    # The scan costs ~45 us a kilobyte; a sampled check (a few C passes) rules out real prose
    # and code, and never a text that holds a run of a block.
    prose = "The missing colon has been added; the tests pass now. " * 20
    ordinary = [t for t in [*ORDINARY_SHORT, prose] if len(t) >= RUN_BLOCK]
    assert ordinary
    for text in ordinary:
        assert not _may_hold_letter_run(text.encode()), text
    for offset in range(16):
        for length in (RUN_BLOCK, RUN_BLOCK + 3, 5 * RUN_BLOCK):
            text = "ab, " * offset + "Q" * length + " and so on"
            assert _may_hold_letter_run(text.encode()), (offset, length)
    assert list(_letter_runs_in("ab" + "k" * 31 + "cd")) == []
    assert list(_letter_runs_in("ab" + "k" * 32 + "cd")) == [(2, 34)]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_letter_run_inside_other_scripts_is_counted_as_a_run(family: str) -> None:
    # Their weights raise the estimate past any gate, and priced the run as letters inside
    # words: "上下文管理" x 3 + "k" x 500 was 0.26x its count (o200k).
    est, exact = approximate(family), shared_exact(family)
    for run in ("k" * 500, "i" * 3000, "A" * 64):
        for text in ("上下文管理让代理保持工作。" * 3 + run, "Привет, " + run + " мир"):
            assert est.count(text) >= est.floor * exact.count(text), (family, text[:14])


def test_lone_surrogates_and_control_bytes_are_counted() -> None:
    for family in FAMILIES:
        assert approximate(family).count("\ud800 lone surrogate \x00\x07") >= 1


# ---------------------------------------------------------------------------- caches
@pytest.mark.parametrize("make", [approximate, lambda: exact_for_family("o200k")])
def test_message_cache_is_keyed_by_content(make: Callable[[], CachedEstimator]) -> None:
    est = make()
    text = "short text about tokens"
    message = Message.user(text)
    first = est.count_message(message)
    assert est.count_message(message) == first
    for changed in [
        message.replace(content="上" * len(text)),
        message.replace(content=text * 50),
        message.replace(reasoning_content="thinking " * 40),
        message.replace(name="a_long_participant_name_" * 4),
    ]:
        assert est.count_message(changed) == make().count_message(changed) > first


def test_two_messages_with_one_id_and_other_parts_get_their_own_counts() -> None:
    est = approximate()
    small = Message(role="user", id="same", content=(ContentPart(type="text", text="hi"),))
    large = Message(
        role="user", id="same", content=(ContentPart(type="text", text="你好世界" * 2000),)
    )
    assert est.count_message(small) < est.count_message(large)
    assert est.count_message(large) == approximate().count_message(large)
    calls = [ToolCall(id="c", name="run", arguments=json.dumps({"x": "y" * n})) for n in (1, 900)]
    short, long = (Message.assistant("", tool_calls=[c]).replace(id="same") for c in calls)
    assert est.count_message(short) < est.count_message(long)
    first = ToolCall(id="b", name="run", arguments="{}")
    short, long = (Message.assistant("", tool_calls=[first, c]).replace(id="two") for c in calls)
    assert est.count_message(short) < est.count_message(long)


def test_block_cache_is_keyed_by_text() -> None:
    from harness.blocks import ContextBlock

    est = approximate()
    one = ContextBlock(kind="reference", id="b", source_id="s", text="a b c", revision="r1")
    other = one.__class__(
        kind="reference", id="b", source_id="s", text="a b c " * 500, revision="r1"
    )
    assert est.count_block(one) < est.count_block(other)


# ---------------------------------------------------------------------------- images
def _png(width: int, height: int) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    ihdr = (
        struct.pack(">I", 13) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    )
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * 64


def _jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def _gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 8


def _webp(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    body += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def _image_part(data: bytes, kind: str = "png", detail: str | None = None) -> ContentPart:
    url = f"data:image/{kind};base64,{base64.b64encode(data).decode()}"
    image: dict[str, str] = {"url": url}
    if detail:
        image["detail"] = detail
    return ContentPart(type="image_url", data={"image_url": image})


@pytest.mark.parametrize("make", [_png, _jpeg, _gif, _webp])
def test_image_sizes_are_read_from_the_header(make: Callable[[int, int], bytes]) -> None:
    assert image_size(make(1024, 768)) == (1024, 768)
    assert image_size(make(31, 4000)) == (31, 4000)


def test_images_are_counted_by_the_providers_rule() -> None:
    assert openai_image_tokens(512, 512) == 85 + 170
    assert openai_image_tokens(1024, 1024) == 85 + 170 * 4  # scaled to 768 × 768
    assert openai_image_tokens(4096, 8192, "high") == 85 + 170 * 6  # 768 × 1536
    assert openai_image_tokens(4096, 4096, "low") == 85
    assert anthropic_image_tokens(750, 100) == 100
    assert anthropic_image_tokens(10_000, 10_000) == 1600
    big = _image_part(_png(2000, 1000))
    assert image_tokens(big, "openai") == openai_image_tokens(2000, 1000)
    assert image_tokens(big, "anthropic") == anthropic_image_tokens(2000, 1000)
    assert image_tokens(_image_part(_png(2000, 1000), detail="low"), "openai") == 85
    assert (
        image_tokens(ContentPart(type="image_url", data={"image_url": "https://x/y.png"}), "openai")
        == IMAGE_BOUND
    )
    assert image_tokens(ContentPart(type="input_audio", data={"x": 1}), "anthropic") == IMAGE_BOUND


def test_a_large_image_in_a_message_is_not_counted_as_85_tokens() -> None:
    part = _image_part(_jpeg(3000, 2000) + os.urandom(1_000_000), "jpeg")
    message = Message(role="user", content=(ContentPart(type="text", text="look"), part))
    assert approximate("o200k").count_message(message) >= openai_image_tokens(3000, 2000)
    assert approximate("deepseek").count_message(message) >= IMAGE_BOUND
    assert estimator_for("gemini-pro").count_message(message) >= IMAGE_BOUND


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


@given(
    parts=st.lists(
        st.tuples(
            st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
            st.sampled_from([*RUN_CHARS, "a", "P", "Ł"]),
            st.integers(0, 300),
        ),
        max_size=8,
    ),
    family=st.sampled_from(FAMILIES),
)
def test_runs_found_from_samples_are_every_run(
    parts: list[tuple[str, str, int]], family: str
) -> None:
    # The run check looks at every 4th code unit first; it must find what a full scan finds.
    text = "".join(prefix + char * n for prefix, char, n in parts)
    est = approximate(family)
    data = text.encode("utf-16-le", "surrogatepass")[0::2] if not text.isascii() else text.encode()
    runs = est._runs if not text.isascii() else est._ascii_runs
    expected = 0.0
    for byte_runs in runs.values():
        for block, saving, long_block, long_saving in byte_runs:
            blocks = text.count(block)
            expected += blocks * saving
            if blocks >= RUN_LONG // RUN_BLOCK:
                expected += text.count(long_block) * long_saving
    found = _run_savings(text, data[::_STRIDE], runs) if len(text) >= RUN_BLOCK else 0.0
    assert math.isclose(found, expected, abs_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["bash", "str_replace_editor", "x" * 70, "find_file"]),
            st.text(max_size=40),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_cached_names_count_as_counting_them_does(calls: list[tuple[str, str]]) -> None:
    """Tool and participant names come from a cache: each family's counts stay its own."""
    for est in (approximate("o200k"), approximate("cl100k")):
        for i, (name, arguments) in enumerate(calls):
            call = Message.assistant(
                id=f"a{i}", tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=arguments)]
            )
            result = Message.tool(f"c{i}", arguments, id=f"t{i}").replace(name=name)
            assert est.count_message(call) == (
                MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + est.count(name) + est.count(arguments)
            )
            assert est.count_message(result) == (
                MESSAGE_OVERHEAD + est.count(arguments) + 1 + est.count(name)
            )


# ------------------------------------------------------- periodic short words (the floor)
SHORT_GAPS = {"english"}
"""Under 400 characters, random letter words go under the floor on some seeds (0.46–0.56 at
60 characters): one sample of a few words, priced per character, not fixed here. (Base64 was
one too, until short random strings were counted exactly.)"""


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", KINDS)
def test_no_generated_text_of_the_budget_tests_goes_under_the_floor(family: str, kind: str) -> None:
    est, exact = approximate(family), shared_exact(family)
    sizes = [400, 3_000] if kind in SHORT_GAPS else [60, 400, 3_000]
    failures = []
    for seed in range(6):
        for n in sizes:
            text = budget_text(kind, n, seed)
            if est.count(text) < est.floor * exact.count(text):
                failures.append((seed, n, text[:20]))
    assert not failures, failures


@pytest.mark.parametrize("family", FAMILIES)
def test_periodic_short_words_stay_above_the_floor(family: str) -> None:
    # Over 300 seeds of this generator, 13 were under the floor (worst 0.24, 'aee aee …').
    est, exact = approximate(family), shared_exact(family)
    texts = [budget_text("periodic", 400, seed) for seed in range(300)]
    texts += [unit * 300 for unit in ["aee ", "a ", "ee ", "ok ", "x, ", "aeebaaee a "]]
    under = [
        (t[:12], round(est.count(t) / exact.count(t), 2))
        for t in texts
        if est.count(t) < est.floor * exact.count(t)
    ]
    assert not under, under


@pytest.mark.parametrize("family", FAMILIES)
def test_repeated_whitespace_units_stay_above_the_floor(family: str) -> None:
    # Anthropic's tokenizer gives "  \n" a token per unit where others merge units: the
    # weights priced it at 0.48x (13 of 200 seeds of the wide set's whitespace-runs under the
    # floor, which made test_no_text_class_goes_under_the_floor fail on some draws).
    est, exact = approximate(family), shared_exact(family)
    texts = [unit * 200 for unit in ["  \n", "\t\n", "\r\n", "  \n  \n\n", "\r\n\r\n"]]
    for seed in range(40):
        rng = random.Random(f"{seed}:whitespace-runs")
        texts.append(WIDE_CLASSES["whitespace-runs"](rng, rng.randint(300, 1500)))
    counts = [(t[:8], est.count(t), exact.count(t)) for t in texts]
    assert not [c for c in counts if c[1] < est.floor * c[2]], counts
    assert all(c[1] <= 2 * c[2] + 8 for c in counts if c[0].startswith(("  \n", "\t\n"))), counts


def test_the_periodic_text_the_budget_test_sent_over_its_limit_is_priced_above_the_floor() -> None:
    text = budget_text("periodic", 90_000, 12_735)
    assert text.startswith("aeebaaee a aeebaaee a ")
    for family in FAMILIES:
        est = approximate(family)
        assert est.count(text) >= est.floor * shared_exact(family).count(text), family


@pytest.mark.parametrize("name", ["prose", "code", "mixed-code", "json-minified", "crlf-prose"])
def test_ordinary_text_is_not_priced_as_periodic(name: str) -> None:
    # The periodic ceiling never reaches real text: its estimate keeps the normal error.
    rng = random.Random(name)
    for _ in range(20):
        text = WIDE_CLASSES[name](rng, rng.randint(100, 3000))
        assert period(text.encode()) == 0
        for family in FAMILIES:
            ratio = approximate(family).count(text) / shared_exact(family).count(text)
            assert FAMILY_FLOOR[family] <= ratio <= 2.0, (family, ratio)


def test_a_periodic_text_changed_anywhere_is_counted_again() -> None:
    # A unit repeated counts what the tokenizer charges (a few units counted, the rest
    # multiplied); a longer text follows, and once one repetition differs the text is
    # not periodic and is counted by its weights again.
    est, exact = approximate(), shared_exact("o200k")
    for unit in ["ok ", "aee ", "lorem ", "x, ", "aeebaaee a "]:
        for repeats in (40, 401, 3000):
            text = unit * repeats + unit[:2]
            tokens = exact.count(text)
            assert tokens <= est.count(text) <= 1.25 * tokens + 3, (unit, repeats)
    text = "ok " * 400
    changed = text[:600] + "no " + text[603:]
    assert period(changed.encode()) == 0
    assert est.count(changed) != est.count(text)


def test_without_a_tokenizer_a_periodic_text_costs_floor_times_its_bytes() -> None:
    custom = ApproximateEstimator("custom", FAMILY_COEFFICIENTS["o200k"], floor=0.5)
    assert custom.exact_counter is None
    assert custom.count("ok " * 400) == 600
    bound = estimator_for("gemini-2.0-flash")
    assert bound.count("ok " * 400) == 1200


def test_runs_and_units_without_a_word_start_are_not_priced_far_over() -> None:
    # Tokenizers merge these across units into long tokens: bytes x floor would be 5-50x over.
    # (Mixed whitespace units such as "\r\n" are a known gap of the weights, see KNOWN_GAPS.)
    for text in ["=" * 3000, "ab" * 3000, "x\n" * 10 + "=" * 3000]:
        for family in FAMILIES:
            exact = shared_exact(family).count(text)
            assert approximate(family).count(text) <= 2 * exact + 8, (family, text[:4])


@given(
    unit=st.binary(min_size=1, max_size=40).map(lambda b: b.translate(bytes(b"ab =" * 64))),
    run=st.integers(0, 50),
    n=st.integers(32, 400),
    change=st.none() | st.integers(0, 399),
)
def test_period_finds_every_unit_a_full_scan_finds(
    unit: bytes, run: int, n: int, change: int | None
) -> None:
    # The search is bounded and skips candidates inside a leading run: it must agree with
    # the definition (some unit of at most PERIOD_MAX bytes repeats to the end).
    text = bytearray((unit[:1] * run + unit) * (n // len(unit) + 2))[:n]
    if change is not None and change < n:
        text[change] = ord("x")
    low = bytes(text)
    units = [p for p in range(1, PERIOD_MAX + 1) if 2 * p <= n and low[p:] == low[:-p]]
    found = period(low)
    assert bool(found) == bool(units)
    if found:
        assert low[found:] == low[:-found]


# ------------------------------------------------------------- short texts (the floor)
SHORT_SHAPES = {
    "random-ascii": "nQ5'yuea%u!ym/5Hl@Ar#",
    "base64-raw": "oPojLBR2pxEHJ98IcrmbNhK7LtH82FHu9M8M3u67kEDXiioOeHyn+4G7gnallKdXpzGnCVlDmHgpwvtj==",
    "punct-runs": "<" * 26,
    "whitespace-runs": "end" + "\t" * 31,
    "letter-runs": "a" * 29,
    "latin-accented": "õćtñòu jáúxs cjìukę xjîõøìroůr",
}
"""One text per wide class that went under the floor when short (0.25–0.55 of exact in some
family), the class it stands for as key."""
ORDINARY_SHORT = [
    '{"command": "ls -F"}',
    '{"path":"tests/missing_colon.py"}',
    '{"file_name":"missing_colon.py"}',
    "/usr/local/lib/python3.11/site-packages/numpy/core/_multiarray_umath.py",
    "https://github.com/openai/tiktoken/blob/main/tiktoken/core.py",
    "get_user_by_id_and_session_token",
    "The missing colon has been added successfully.",
    "    def count(self, text: str) -> int:",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "550e8400-e29b-41d4-a716-446655440000",
    "Bonjour, ça va très bien, merci.",
]
"""Short texts of real agent traffic that the weights price near their tokens."""


def _short_samples(name: str, seeds: int) -> list[str]:
    """Return ``seeds`` texts of wide class ``name`` of 1–400 characters, most under 100."""
    texts = []
    for seed in range(seeds):
        rng = random.Random(f"{seed}:{name}:short")
        texts.append(WIDE_CLASSES[name](rng, rng.randint(1, rng.choice([40, 100, 400]))))
    return texts


class _RecordingExact(ApproximateEstimator):
    """The family's estimator, whose exact counter records every text it is asked to count."""

    def __init__(self, family: str) -> None:
        super().__init__(family)
        self.asked: list[str] = []
        shared = shared_exact(family)

        def count(text: str) -> int:
            self.asked.append(text)
            return shared.count(text)

        self._recording = ExactEstimator(f"recording:{family}", count)

    @property
    def exact_counter(self) -> ExactEstimator:
        """The recording exact estimator."""
        return self._recording


@pytest.mark.parametrize("family", FAMILIES)
def test_short_texts_stay_above_the_floor_per_text_and_per_message(family: str) -> None:
    # Short random strings, base64, runs shorter than a block and random accented words went
    # under the floor (worst 0.25, "<" * 26 for Anthropic; base64 of 97 characters 0.48):
    # as a tool result too (0.53-0.57), which is what the budget sums.
    est, exact = approximate(family), shared_exact(family)
    texts = [*SHORT_SHAPES.values(), "\t" * 15, "}" + "\t" * 21, "/" * 17, "  \n" * 6]
    for name in SHORT_SHAPES:
        texts += _short_samples(name, 40)
    under = []
    for text in texts:
        message = Message.tool("c1", text, name="bash")
        if len(text) >= 16 and est.count(text) < est.floor * exact.count(text):
            under.append(("text", text[:24], est.count(text), exact.count(text)))
        if est.count_message(message) < est.floor * exact.count_message(message):
            under.append(("message", text[:24], est.count_message(message), -1))
    assert not under, under


RUN_SHAPES = ("punct-runs", "whitespace-runs", "letter-runs")
"""The short shapes that are mostly runs: counted exactly (bytes would price them 5x over)."""


@pytest.mark.parametrize("family", FAMILIES)
def test_a_short_mispriced_text_is_priced_safely_and_a_change_is_priced_again(
    family: str,
) -> None:
    # Each change keeps the shape: a random string or random accented words cost floor x
    # their bytes (at least floor x exact, at most a token a byte), a text of runs its exact
    # count; per text and per message (cached), following the change.
    est, exact = approximate(family), shared_exact(family)
    framing = MESSAGE_OVERHEAD + 1 + est.count("bash")
    for name, text in SHORT_SHAPES.items():
        if name == "letter-runs":
            continue
        for version in (text, text[:3] + "Q" + text[4:], text + "x9", "nQ" + text):
            size = len(version.encode("utf-8"))
            expected = exact.count(version) if name in RUN_SHAPES else math.ceil(est.floor * size)
            assert est.count(version) == expected, (name, version[:12])
            assert est.floor * exact.count(version) <= est.count(version) <= size
            message = Message.tool("c1", version, name="bash")
            assert est.count_message(message) == framing + expected


@pytest.mark.parametrize("family", FAMILIES)
def test_only_short_texts_of_runs_ask_the_exact_tokenizer(family: str) -> None:
    # Far from the limit a tokenizer is loaded only for a short text that is mostly runs (a
    # load blocks the request 0.4-1.8 s): random strings are priced by their bytes, ordinary
    # short texts keep their weights' estimate.
    recording, plain = _RecordingExact(family), approximate(family)
    for text in ORDINARY_SHORT:
        assert recording.count(text) == plain.count(text)
    assert recording.asked == []
    for text in SHORT_SHAPES.values():
        recording.count(text)
    assert recording.asked == [SHORT_SHAPES[name] for name in SHORT_SHAPES if name in RUN_SHAPES]


def test_without_a_tokenizer_a_short_random_string_costs_floor_times_its_bytes() -> None:
    # A custom table has no exact tokenizer: the same bytes rule holds (0.75-1.1x exact on
    # random strings here), where its weights alone would say about half.
    custom = ApproximateEstimator("custom", FAMILY_COEFFICIENTS["o200k"])
    exact = shared_exact("o200k")
    assert custom.exact_counter is None
    for text in (SHORT_SHAPES["random-ascii"], SHORT_SHAPES["base64-raw"]):
        assert custom.count(text) >= custom.floor * exact.count(text) > approximate_weights(text)
        assert custom.count(text) == math.ceil(custom.floor * len(text))


def approximate_weights(text: str) -> float:
    """Return what o200k's weights alone say of ASCII ``text`` (no shape corrections)."""
    coefficients = FAMILY_COEFFICIENTS["o200k"]
    return sum(text.encode("ascii").translate(coefficients.weights)) * coefficients.unit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(alphabet=" \t\n=-_*#.~0/+|:<>aAbq9{}\"'", min_size=16, max_size=40).filter(
        lambda text: " " in text
    )
)
def test_a_spaced_short_text_skips_only_a_test_that_cannot_decide(text: str) -> None:
    # `count` tells `_short_run` the text holds a space (and 16 bytes or more), which then
    # skips its test for one repeated character: such a text is all spaces, which the run
    # marks find. Fails if space stops being a run character.
    low = text.encode("ascii")
    assert _short_run(low, spaced=True) == _short_run(low)
    assert _short_run(b" " * len(low), spaced=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_message_counts_its_text_calls_reasoning_and_name(family: str) -> None:
    # Each field of a message is counted once, whatever its shape: text (or none), tool
    # calls, reasoning and name; texts on both sides of the short-text path's edge (32).
    est = approximate(family)
    for size in (0, 7, 8, 15, 16, 31, 32, 33, 300):
        text = ('{"command": "step 5"} ' * 20)[:size]
        call = ToolCall(id="c1", name="bash", arguments=text or "{}")
        shapes = [
            (Message.tool("c1", text, name="bash"), est.count(text) + 1 + est.count("bash")),
            (
                Message(role="assistant", tool_calls=(call, call), reasoning_content=text or None),
                2 * (TOOL_CALL_OVERHEAD + est.count("bash") + est.count(call.arguments))
                + est.count(text),
            ),
            (
                Message(role="user", content=(ContentPart(type="text", text=text),)),
                est.count(text),
            ),
        ]
        for message, expected in shapes:
            assert est.count_message(message) == MESSAGE_OVERHEAD + expected, (size, message)
            assert est.count_message(message) == MESSAGE_OVERHEAD + expected  # cached


# The ceiling: what decides "fits for sure", by construction rather than by fitting.


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=1, max_size=400))
def test_the_ceiling_is_never_below_the_exact_count_of_any_text(family: str, text: str) -> None:
    exact = shared_exact(family)
    assert approximate(family).ceiling is exact.ceiling
    assert exact.ceiling.count(text) >= exact.count(text)


def test_the_anthropic_ceiling_counts_the_text_as_its_tokenizer_normalises_it() -> None:
    # NFKC makes "ﷺ" (3 bytes) 33 bytes: 200 of them are 600 bytes and 3,000 tokens.
    text = "\ufdfa" * 200
    exact = shared_exact("anthropic")
    assert len(text.encode()) < exact.count(text) <= exact.ceiling.count(text)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_ceiling_holds_on_every_generated_shape_and_its_messages(family: str) -> None:
    exact = shared_exact(family)
    ceiling = exact.ceiling
    for name, texts in shape_texts(3, count=1, sizes=(200, 4_000)).items():
        for text in texts:
            message = Message.tool("c1", text, name="shell")
            assert ceiling.count(text) >= exact.count(text), name
            assert ceiling.count_message(message) >= exact.count_message(message), name


def test_a_request_under_the_floor_but_over_its_ceiling_is_counted_exactly() -> None:
    # Random accented words: the estimate is 0.40x exact, under the 0.6 floor the old fast
    # path trusted, so 66,000 characters "fit for sure" in 32,000 tokens at 43,000.
    latin = SHAPES["latin"](random.Random(7), 66_000)
    request = ModelRequest(
        model="gpt-4o",
        history=(Message.user(latin),),
        policy=ContextPolicy().resolve("gpt-4o"),
        input_limit=32_000,
    )
    assert estimate_request(request) < 0.6 * 32_000
    counted, tokens = counted_near_limit(request)
    assert counted.estimator.exact
    assert tokens == estimate_request(request, shared_exact("o200k")) > 32_000


def test_a_repeated_unit_never_counts_less_than_the_unit() -> None:
    # Found by hypothesis: a 16-character unit is priced by the short shapes' floor (10),
    # three of it by the exact count of its repetitions (9).
    est = approximate()
    for unit in ("ServerTimeoutErr", "kQ9xZpL2vR7tYw3N", "abcdefghijklmnop"):
        for times in (2, 3, 5):
            assert est.count(unit * times) >= est.count(unit), (unit, times)


def _longest_in_vocabulary(method: str) -> int:
    """The UTF-8 bytes of ``method``'s longest token, read from its tokenizer's files."""
    import json

    from harness.tokens import litellm_tokenizer_dir, tiktoken_encoding

    if method.startswith("tiktoken:"):
        enc = tiktoken_encoding(method.removeprefix("tiktoken:"))
        specials = (len(s.encode()) for s in enc._special_tokens)
        return max(max(len(b) for b in enc._mergeable_ranks), *specials)
    name = method.removeprefix("tokenizers:")
    data = json.loads((litellm_tokenizer_dir() / f"{name}_tokenizer.json").read_text())
    # byte-level BPE: one vocabulary character per byte; added tokens are raw text
    vocab = max(len(t) for t in data["model"]["vocab"])
    added = max((len(a["content"].encode()) for a in data.get("added_tokens", [])), default=0)
    return max(vocab, added)


@pytest.mark.parametrize("family", ["o200k", "cl100k", "deepseek", "anthropic"])
def test_the_floor_divides_by_the_longest_token_of_the_vocabulary(family: str) -> None:
    """Issue 26: ``ByteFloor`` is sound only if no token is longer than `LONGEST_TOKEN` says."""
    from harness.tokens import LONGEST_TOKEN, ByteFloor, byte_floor

    method = exact_for_family(family).method
    assert LONGEST_TOKEN[method] >= _longest_in_vocabulary(method)
    lower = approximate(family).lower_bound
    assert isinstance(lower, ByteFloor) and lower is byte_floor(method, lower.images)


FLOOR_TEXTS = [
    *(budget_text(kind, n, seed) for kind in KINDS for n in (1, 700, 9_000) for seed in (1, 2)),
    " " * 5_000,
    "-" * 3_000,
    "ﬁ" * 2_000,  # NFKC shortens it (3 bytes to 2)
    "﷽" * 300,  # NFKC lengthens it
    "<EOT><META>" * 50,
    "a" * 20_000,
]


@pytest.mark.parametrize("family", ["o200k", "cl100k", "deepseek", "anthropic"])
def test_the_floor_is_never_above_the_exact_count(family: str) -> None:
    """Issue 26: the bytes over the longest token never exceed the exact count, on any text."""
    lower = approximate(family).lower_bound
    exact = exact_for_family(family)
    assert lower is not None
    for text in FLOOR_TEXTS:
        assert lower.count(text) <= exact.count(text), (family, text[:20])
        message = Message.user(text)
        assert lower.count_message(message) <= exact.count_message(message)
