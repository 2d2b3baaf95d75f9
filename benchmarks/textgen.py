"""The wide evaluation set: generated text of every class the estimator must hold for.

    python -m benchmarks.textgen      # print the classes and a sample of each

Each class is a generator ``(rng, target_chars) -> str``, deterministic for a seed. Scripts
(Hangul, Thai, Devanagari, Arabic, Cyrillic, Greek, Hebrew, kana, common and random CJK,
CJK extensions, emoji, full-width forms, half-width katakana, private use, accented Latin)
are random words from the script's letters — harder than real text, which has common words
the tokenizers merge; encodings and machine output (base64, hex, ``hexdump -C``, numbers,
UUIDs, minified JSON, ANSI-coloured logs, CRLF text), runs (whitespace, punctuation, one
letter, zeros), periodic text (a short unit repeated, ``"abcd " * n``), random printable
ASCII, and code mixed with other scripts. English prose, Python code and JSON come from
`benchmarks.generators`. `wide_workloads` turns every class into a `benchmarks.corpus.Workload`.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable

from benchmarks.corpus import Workload
from benchmarks.generators import ZH_COMMON, Generator, fill, gen_code, gen_json, gen_prose
from harness.messages import Message


def _chars(*ranges: tuple[int, int]) -> str:
    return "".join(chr(c) for lo, hi in ranges for c in range(lo, hi + 1))


def _words(alphabet: str, sizes: tuple[int, int], sep: str = " ", punct: str = ".,") -> Generator:
    def generate(rng: random.Random, target: int) -> str:
        out: list[str] = []
        size = 0
        while size < target:
            word = "".join(rng.choice(alphabet) for _ in range(rng.randint(*sizes)))
            if rng.random() < 0.1:
                word += rng.choice(punct)
            out.append(word)
            size += len(word) + len(sep)
        return sep.join(out)

    return generate


def _fill(part: Callable[[random.Random], str], sep: str = "\n") -> Generator:
    def generate(rng: random.Random, target: int) -> str:
        return fill(rng, target, lambda: part(rng), sep)

    return generate


_HANGUL = _chars((0xAC00, 0xD7A3))
_THAI = _chars((0x0E01, 0x0E3A), (0x0E40, 0x0E4E))
_DEVANAGARI = _chars((0x0905, 0x0939), (0x093E, 0x094D))
_ARABIC = _chars((0x0621, 0x064A))
_CYRILLIC = _chars((0x0410, 0x044F))
_GREEK = _chars((0x0391, 0x03A9), (0x03B1, 0x03C9))
_HEBREW = _chars((0x05D0, 0x05EA))
_KANA = _chars((0x3041, 0x3096), (0x30A1, 0x30FA))
_CJK = _chars((0x4E00, 0x9FFF))
_CJK_EXT = _chars((0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0xF900, 0xFAFF))
_EMOJI = _chars((0x1F300, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF))
_FULLWIDTH = _chars((0xFF01, 0xFF5E))
_HALFWIDTH_KATAKANA = _chars((0xFF61, 0xFF9F))
_PRIVATE_USE = _chars((0xE000, 0xF8FF))
_LATIN_ACCENTED = (
    string.ascii_lowercase * 3 + "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿāăąćčďđēęěğīıłńňőœřśşšťūůűźżž"
)
_B64 = string.ascii_letters + string.digits + "+/"
_PRINTABLE = string.printable[:94]


def gen_base64(rng: random.Random, target: int) -> str:
    """Random bytes, base64-encoded, in 76-column lines or one long line."""
    text = "".join(rng.choice(_B64) for _ in range(target))
    if rng.random() < 0.5:
        return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    return text + "=="


def gen_hex(rng: random.Random, target: int) -> str:
    """Hex strings: digests, keys, ``0x`` words, one per line or space-separated."""
    return _fill(
        lambda r: (
            r.choice(["", "0x"])
            + "".join(r.choice("0123456789abcdef") for _ in range(r.choice([8, 16, 32, 40, 64])))
        ),
        sep=rng.choice(["\n", " "]),
    )(rng, target)


def gen_hexdump_c(rng: random.Random, target: int) -> str:
    """``hexdump -C`` of random and text-like bytes."""
    offset = rng.randrange(0, 1 << 16) * 16

    def line(r: random.Random) -> str:
        nonlocal offset
        data = bytes(
            r.randrange(32, 127) if r.random() < 0.4 else r.randrange(256) for _ in range(16)
        )
        left = " ".join(f"{b:02x}" for b in data[:8])
        right = " ".join(f"{b:02x}" for b in data[8:])
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
        offset += 16
        return f"{offset - 16:08x}  {left}  {right}  |{shown}|"

    return _fill(line)(rng, target)


def gen_numbers(rng: random.Random, target: int) -> str:
    """Integers, floats, long digit strings, CSV rows of numbers."""

    def value(r: random.Random) -> str:
        k = r.random()
        if k < 0.3:
            return str(r.randint(0, 10 ** r.randint(1, 12)))
        if k < 0.6:
            return f"{r.uniform(-1e4, 1e4):.{r.randint(1, 8)}f}"
        if k < 0.8:
            return "".join(r.choice(string.digits) for _ in range(r.randint(12, 60)))
        return ",".join(str(r.randint(0, 999)) for _ in range(r.randint(2, 10)))

    return _fill(value, sep=rng.choice([" ", "\n", ", "]))(rng, target)


def gen_uuids(rng: random.Random, target: int) -> str:
    """UUIDs, one per line or in a JSON list."""
    return _fill(lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)))(rng, target)


def gen_minified_json(rng: random.Random, target: int) -> str:
    """JSON with no whitespace: records with ids, numbers, nested lists."""
    text = gen_json(rng, target)
    return text.replace("\n", "").replace("  ", "").replace(": ", ":").replace(", ", ",")


def gen_ansi_logs(rng: random.Random, target: int) -> str:
    """Log lines coloured with ANSI escape codes."""
    colours = ["\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[1;34m", "\x1b[0;36m", "\x1b[90m"]

    def line(r: random.Random) -> str:
        level = r.choice(["INFO", "WARN", "ERROR", "DEBUG"])
        return (
            f"{r.choice(colours)}{level}\x1b[0m "
            f"\x1b[2m2024-05-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}\x1b[0m "
            f"{gen_prose(r, r.randint(20, 80)).splitlines()[0][:80]} "
            f"\x1b[1m{r.choice(['id', 'pid', 'ms'])}={r.randint(0, 99999)}\x1b[0m"
        )

    return _fill(line)(rng, target)


def gen_periodic(rng: random.Random, target: int) -> str:
    """A short unit repeated: ``"abcd "``, random letters, words, table borders."""
    unit = rng.choice(
        [
            "abcd ",
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 6))) + " ",
            "".join(rng.choice(_B64) for _ in range(rng.randint(1, 8))),
            "+-----" * rng.randint(1, 3) + "+\n",
            "the cat ",
            f"{rng.randint(0, 99)}, ",
            "ab",
        ]
    )
    return unit * max(1, target // len(unit))


def gen_whitespace(rng: random.Random, target: int) -> str:
    """Runs of spaces, tabs and newlines, alone or around words."""
    run = rng.choice([" ", "\t", "\n", "\r\n", "  \n"]) * rng.randint(8, max(9, target))
    if rng.random() < 0.5:
        return run[:target]
    return _fill(
        lambda r: r.choice(["x", "end", "}"]) + rng.choice([" ", "\n", "\t"]) * r.randint(8, 200),
        sep="",
    )(rng, target)


def gen_punct_runs(rng: random.Random, target: int) -> str:
    """Separator lines and runs of one punctuation mark (``====``, ``----``, ``####``)."""
    mark = rng.choice("=-_*#.~/+|<>:")
    if rng.random() < 0.5:
        return mark * target
    return _fill(lambda r: mark * r.randint(8, 120) + "\n" + gen_prose(r, 60).splitlines()[0][:60])(
        rng, target
    )


def gen_letter_runs(rng: random.Random, target: int) -> str:
    """One letter or digit repeated (``aaaa…``, ``0000…``)."""
    return rng.choice("ax0Z9") * target


def gen_random_ascii(rng: random.Random, target: int) -> str:
    """Random printable ASCII: passwords, fuzz input, line noise."""
    return "".join(rng.choice(_PRINTABLE) for _ in range(target))


def gen_crlf(rng: random.Random, target: int) -> str:
    """English prose with Windows line endings."""
    return gen_prose(rng, target).replace("\n", "\r\n")


def gen_mixed_code(rng: random.Random, target: int) -> str:
    """Code whose comments and strings are in other scripts."""
    scripts = [_CJK[:3000], _HANGUL[:2000], _CYRILLIC, _ARABIC, _EMOJI]
    code = gen_code(rng, target).splitlines()
    out = []
    for line in code:
        out.append(line)
        if rng.random() < 0.3:
            alphabet = rng.choice(scripts)
            out.append("    # " + "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 30))))
    return "\n".join(out)


def gen_cjk_common(rng: random.Random, target: int) -> str:
    """Common Chinese characters (GB2312 level 1) with Chinese punctuation."""
    return _words(ZH_COMMON, (4, 20), sep="", punct="，。、；")(rng, target)


WIDE_CLASSES: dict[str, Generator] = {
    "hangul": _words(_HANGUL, (1, 5)),
    "thai": _words(_THAI, (3, 12)),
    "devanagari": _words(_DEVANAGARI, (2, 7)),
    "arabic": _words(_ARABIC, (2, 8)),
    "cyrillic": _words(_CYRILLIC, (2, 10)),
    "greek": _words(_GREEK, (2, 10)),
    "hebrew": _words(_HEBREW, (2, 7)),
    "kana": _words(_KANA, (2, 10), sep="", punct="、。"),
    "cjk-common": gen_cjk_common,
    "cjk-random": _words(_CJK, (1, 12), sep="", punct="，。"),
    "cjk-ext": _words(_CJK_EXT, (1, 8), sep=""),
    "emoji": _words(_EMOJI, (1, 4)),
    "fullwidth": _words(_FULLWIDTH, (2, 10)),
    "halfwidth-katakana": _words(_HALFWIDTH_KATAKANA, (2, 10)),
    "private-use": _words(_PRIVATE_USE, (1, 8)),
    "latin-accented": _words(_LATIN_ACCENTED, (2, 10)),
    "base64-raw": gen_base64,
    "hex": gen_hex,
    "hexdump-c": gen_hexdump_c,
    "numbers": gen_numbers,
    "uuids": gen_uuids,
    "json-minified": gen_minified_json,
    "ansi-logs": gen_ansi_logs,
    "periodic": gen_periodic,
    "whitespace-runs": gen_whitespace,
    "punct-runs": gen_punct_runs,
    "letter-runs": gen_letter_runs,
    "random-ascii": gen_random_ascii,
    "crlf-prose": gen_crlf,
    "mixed-code": gen_mixed_code,
    "prose": gen_prose,
    "code": gen_code,
}
"""Every class of the wide evaluation set, by name."""


def wide_workloads(*, seed: int = 0, count: int = 24, max_chars: int = 6000) -> list[Workload]:
    """Return one workload per class: ``count`` texts of 40 to ``max_chars`` characters."""
    out = []
    for name, generate in WIDE_CLASSES.items():
        rng = random.Random(f"wide:{seed}:{name}")
        texts = []
        for _ in range(count):
            target = int(min(max_chars, max(40, 10 ** rng.uniform(1.6, 3.8))))
            texts.append(generate(rng, target))
        out.append(
            Workload(
                name,
                "synthetic",
                (generate.__doc__ or name).strip().splitlines()[0],
                tuple(Message.tool("c", t) for t in texts),
            )
        )
    return out


if __name__ == "__main__":
    for workload in wide_workloads(count=4):
        sample = workload.messages[0].text[:60]
        print(f"{workload.name:20s} {workload.chars:8,d} chars  {sample!r}")
