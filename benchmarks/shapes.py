"""Generated text in the shapes real agents send: source code, config, markup, data, logs.

    python -m benchmarks.shapes      # print each shape and a sample

Each shape is a generator ``(rng, target_chars) -> str``, deterministic for a seed, built
from templates with random identifiers, numbers and strings (so no two texts repeat a file
the tokenizers might have merged whole). It covers every common programming and config
language (C, C++, Rust, Go, Java, JavaScript/TypeScript, minified JavaScript, Python, SQL,
shell, YAML, TOML, JSON, XML/HTML, CSS, Markdown tables), machine output (logs, unified
diffs, stack traces, CSV, URLs, base64, hex) and natural language in many scripts. The
estimator's floor is declared on one half of the seeds and reported on the other
(`benchmarks.bench_estimation`'s ``floor`` section): nothing here is fitted.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable

Shape = Callable[[random.Random, int], str]

_WORDS = [
    "user",
    "id",
    "name",
    "value",
    "count",
    "index",
    "buffer",
    "size",
    "len",
    "data",
    "item",
    "node",
    "list",
    "map",
    "key",
    "config",
    "state",
    "result",
    "error",
    "path",
    "file",
    "line",
    "offset",
    "start",
    "end",
    "next",
    "prev",
    "head",
    "tail",
    "parent",
    "child",
    "request",
    "response",
    "client",
    "server",
    "token",
    "limit",
    "cache",
    "entry",
    "table",
    "row",
    "column",
    "query",
    "field",
    "handler",
    "callback",
    "event",
    "queue",
    "task",
    "worker",
    "thread",
    "lock",
    "mutex",
    "timer",
    "stream",
    "reader",
    "writer",
]
_TYPES_C = ["int", "size_t", "uint8_t", "uint32_t", "char *", "const char *", "void *", "double"]


def _ident(rng: random.Random, style: str = "snake") -> str:
    parts = [rng.choice(_WORDS) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        parts.append(str(rng.randint(0, 99)))
    if style == "camel":
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style == "pascal":
        return "".join(p.capitalize() for p in parts)
    if style == "upper":
        return "_".join(parts).upper()
    return "_".join(parts)


def _num(rng: random.Random) -> str:
    return rng.choice([str(rng.randint(0, 9)), str(rng.randint(0, 4096)), hex(rng.getrandbits(16))])


def _string(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 5)))


def _fill(part: Callable[[random.Random], str], sep: str = "\n") -> Shape:
    def generate(rng: random.Random, target: int) -> str:
        out: list[str] = []
        size = 0
        while size < target:
            piece = part(rng)
            out.append(piece)
            size += len(piece) + len(sep)
        return sep.join(out)

    return generate


def _c(rng: random.Random) -> str:
    a, b, n = _ident(rng), _ident(rng), _ident(rng)
    t = rng.choice(_TYPES_C)
    return rng.choice(
        [
            f"static {t} {a}(struct {b} *{n}, size_t len) {{\n"
            f"    if (!{n} || len == 0) return {_num(rng)};\n"
            f"    for (size_t i = 0; i < len; ++i) {{\n        {n}->{a}[i] = {n}->{b}[i] ^ {_num(rng)};\n    }}\n"
            f"    return {n}->{b}[len - 1];\n}}",
            f"#define {_ident(rng, 'upper')} ({_num(rng)}u << {rng.randint(1, 31)})",
            f"#include <{rng.choice(['stdio', 'stdlib', 'string', 'stdint', 'errno'])}.h>",
            f"typedef struct {{ {t} {a}; uint32_t {b}[{_num(rng)}]; }} {n}_t;",
            f"while(*p&&*p!='\\n'){{*q++=*p++;}}if(q-{a}>={_num(rng)}){{errno=EINVAL;return -1;}}",
            f'    fprintf(stderr, "%s:%d: {_string(rng)}\\n", __FILE__, __LINE__);',
        ]
    )


def _cpp(rng: random.Random) -> str:
    a, b, cls = _ident(rng, "camel"), _ident(rng, "camel"), _ident(rng, "pascal")
    return rng.choice(
        [
            f"template <typename T>\nstd::vector<T> {cls}::{a}(const std::map<std::string, T>& {b}) const {{\n"
            f"  std::vector<T> out;\n  for (const auto& [k, v] : {b}) out.push_back(v);\n  return out;\n}}",
            f"auto {a} = std::make_unique<{cls}>(std::move({b}));",
            f"namespace {_ident(rng)} {{ class {cls} final : public Base<{cls}> {{ public: explicit {cls}(int {a}); }}; }}",
        ]
    )


def _rust(rng: random.Random) -> str:
    a, b, s = _ident(rng), _ident(rng), _ident(rng, "pascal")
    return rng.choice(
        [
            f"pub fn {a}(&mut self, {b}: &[u8]) -> Result<Option<{s}>, Error> {{\n"
            f"    let n = {b}.iter().map(|x| *x as usize).sum::<usize>();\n"
            f"    self.{a}.insert(n, {s}::default());\n    Ok(self.{b}.get(&n).cloned())\n}}",
            f"#[derive(Debug, Clone, PartialEq)]\npub struct {s} {{ pub {a}: Vec<u32>, {b}: Option<Box<dyn Fn() -> u8>> }}",
            f"impl<'a> From<&'a str> for {s} {{ fn from(s: &'a str) -> Self {{ Self::new(s.len() as u64) }} }}",
        ]
    )


def _go(rng: random.Random) -> str:
    a, b, s = _ident(rng, "camel"), _ident(rng, "camel"), _ident(rng, "pascal")
    return rng.choice(
        [
            f"func (s *{s}) {a.capitalize()}(ctx context.Context, {b} []byte) (int, error) {{\n"
            f'\tif err := s.{a}(ctx); err != nil {{\n\t\treturn 0, fmt.Errorf("{_string(rng)}: %w", err)\n\t}}\n'
            f"\treturn len({b}), nil\n}}",
            f'type {s} struct {{\n\t{a.capitalize()} int `json:"{a}"`\n\t{b.capitalize()} map[string]*{s}\n}}',
        ]
    )


def _java(rng: random.Random) -> str:
    a, b, c = _ident(rng, "camel"), _ident(rng, "camel"), _ident(rng, "pascal")
    return (
        f"    @Override\n    public List<{c}> {a}(final Map<String, {c}> {b}) throws IOException {{\n"
        f"        return {b}.values().stream().filter(Objects::nonNull).collect(Collectors.toList());\n    }}"
    )


def _js(rng: random.Random) -> str:
    a, b = _ident(rng, "camel"), _ident(rng, "camel")
    return rng.choice(
        [
            f"export async function {a}({b}: Record<string, number>): Promise<{_ident(rng, 'pascal')}[]> {{\n"
            f"  const res = await fetch(`/api/{b}/${{{b}.id}}`);\n  return (await res.json()).filter((x) => x.{a} > {_num(rng)});\n}}",
            f"const {a} = ({b}) => {b}?.map(({{ id, ...rest }}) => ({{ ...rest, id: String(id) }})) ?? [];",
            f"import {{ {a}, {b} }} from '../{_ident(rng)}';",
        ]
    )


def _minified_js(rng: random.Random, target: int) -> str:
    out: list[str] = []
    size = 0
    while size < target:
        v = [
            rng.choice(string.ascii_letters) + rng.choice("" + string.ascii_letters)
            for _ in range(3)
        ]
        piece = rng.choice(
            [
                f"function {v[0]}({v[1]},{v[2]}){{return {v[1]}&&{v[1]}[{v[2]}]||{_num(rng)}}}",
                f"var {v[0]}={v[1]}.{rng.choice(_WORDS)}({v[2]}),{v[1]}=!0;",
                f"{v[0]}.prototype.{rng.choice(_WORDS)}=function(){{this.{v[1]}=[];}};",
                f'if({v[0]}==="{rng.choice(_WORDS)}"){{{v[1]}({v[2]},{_num(rng)})}}',
            ]
        )
        out.append(piece)
        size += len(piece)
    return "".join(out)


def _python(rng: random.Random) -> str:
    a, b = _ident(rng), _ident(rng)
    return (
        f"def {a}(self, {b}: dict[str, int] | None = None) -> list[str]:\n"
        f'    """{_string(rng).capitalize()}."""\n'
        f'    if {b} is None:\n        raise ValueError(f"{{{b}!r}} is missing")\n'
        f"    return [k for k, v in sorted({b}.items()) if v > {_num(rng)}]\n"
    )


def _sql(rng: random.Random) -> str:
    t, a, b = _ident(rng), _ident(rng), _ident(rng)
    return rng.choice(
        [
            f"SELECT t.{a}, COUNT(*) AS n FROM {t} t LEFT JOIN {b} u ON u.id = t.{b}_id "
            f"WHERE t.{a} > {_num(rng)} AND u.name LIKE '%{rng.choice(_WORDS)}%' GROUP BY t.{a} ORDER BY n DESC;",
            f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, {a} VARCHAR({rng.randint(8, 255)}) NOT NULL, {b} TIMESTAMP);",
            f"INSERT INTO {t} ({a}, {b}) VALUES ({_num(rng)}, '{_string(rng)}');",
        ]
    )


def _shell(rng: random.Random) -> str:
    a, b = _ident(rng), _ident(rng)
    return rng.choice(
        [
            f'for f in $(find ./{a} -name "*.{rng.choice(["py", "c", "log"])}"); do grep -n "{b}" "$f" | head -{rng.randint(1, 20)}; done',
            f'export {_ident(rng, "upper")}="${{{_ident(rng, "upper")}:-/usr/local/{a}}}" && cd "$HOME/{b}" || exit 1',
            f"curl -fsSL -X POST -H 'Content-Type: application/json' -d '{{\"{a}\":{_num(rng)}}}' https://{b}.example.com/v1/{a} | jq .{b}",
        ]
    )


def _yaml(rng: random.Random) -> str:
    a, b = _ident(rng), _ident(rng)
    return (
        f"{a}:\n  {b}: {_num(rng)}\n  enabled: {rng.choice(['true', 'false'])}\n"
        f"  image: registry.example.com/{a}:{rng.randint(0, 9)}.{rng.randint(0, 30)}\n"
        f'  - name: {_ident(rng)}\n    value: "{_string(rng)}"\n  ports: [{_num(rng)}, {_num(rng)}]'
    )


def _toml(rng: random.Random) -> str:
    return (
        f'[{_ident(rng)}.{_ident(rng)}]\n{_ident(rng)} = "{_string(rng)}"\n'
        f'{_ident(rng)} = {_num(rng)}\n{_ident(rng)} = ["{rng.choice(_WORDS)}", "{rng.choice(_WORDS)}"]'
    )


def _json(rng: random.Random) -> str:
    return (
        f'{{"{_ident(rng, "camel")}": {_num(rng)}, "{_ident(rng, "camel")}": "{_string(rng)}", '
        f'"{_ident(rng)}": [{_num(rng)}, {rng.random():.6f}, null, true], "id": "{rng.getrandbits(64):016x}"}}'
    )


def _xml(rng: random.Random) -> str:
    tag, attr = _ident(rng, "camel"), _ident(rng)
    return rng.choice(
        [
            f'<{tag} {attr}="{_num(rng)}" class="{rng.choice(_WORDS)}-{rng.choice(_WORDS)}">{_string(rng)}</{tag}>',
            f'<div class="col-{rng.randint(1, 12)} {rng.choice(_WORDS)}"><a href="/{attr}/{_num(rng)}">{_string(rng)}</a></div>',
            f"  <dependency><groupId>org.{attr}</groupId><artifactId>{tag}</artifactId><version>{rng.randint(1, 9)}.{rng.randint(0, 20)}</version></dependency>",
        ]
    )


def _css(rng: random.Random) -> str:
    return (
        f".{_ident(rng)}-{rng.choice(_WORDS)} > .{rng.choice(_WORDS)}:hover {{ margin: {rng.randint(0, 40)}px "
        f"{rng.randint(0, 40)}px; color: #{rng.getrandbits(24):06x}; font: {rng.randint(8, 30)}px/1.{rng.randint(1, 9)} sans-serif; }}"
    )


def _markdown_table(rng: random.Random) -> str:
    return f"| {_ident(rng)} | {_num(rng)} | {_string(rng)} | {rng.random():.3f} |"


def _log(rng: random.Random) -> str:
    return (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z {rng.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} "
        f"[{_ident(rng)}-{rng.randint(1, 16)}] {_ident(rng, 'pascal')}: {_string(rng)} id={rng.getrandbits(32):08x} "
        f"took={rng.randint(0, 5000)}ms"
    )


def _diff(rng: random.Random) -> str:
    a = _ident(rng)
    lines = [
        f"diff --git a/src/{a}.py b/src/{a}.py",
        f"@@ -{rng.randint(1, 900)},7 +{rng.randint(1, 900)},8 @@",
    ]
    for _ in range(rng.randint(3, 8)):
        lines.append(rng.choice("+- ") + _python(rng).splitlines()[rng.randint(0, 3)])
    return "\n".join(lines)


def _traceback(rng: random.Random) -> str:
    return (
        f'  File "/usr/lib/python3.11/site-packages/{_ident(rng)}/{_ident(rng)}.py", line {rng.randint(1, 3000)}, '
        f"in {_ident(rng)}\n    {_ident(rng)} = self.{_ident(rng)}({_ident(rng)})"
    )


def _csv(rng: random.Random) -> str:
    return ",".join(
        [
            str(rng.randint(0, 10**6)),
            _ident(rng),
            f"{rng.uniform(-1e3, 1e3):.4f}",
            rng.choice(_WORDS),
            f"{rng.getrandbits(20)}",
        ]
    )


def _url(rng: random.Random) -> str:
    return (
        f"https://{rng.choice(_WORDS)}.{rng.choice(['com', 'io', 'org', 'dev'])}/{_ident(rng)}/{rng.getrandbits(40):x}"
        f"?{rng.choice(_WORDS)}={_num(rng)}&utm_source={rng.choice(_WORDS)}&sig={base64.urlsafe_b64encode(rng.randbytes(12)).decode()}"
    )


def _base64(rng: random.Random, target: int) -> str:
    text = base64.b64encode(rng.randbytes(target * 3 // 4 + 3)).decode()[:target]
    return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))


def _hex(rng: random.Random, target: int) -> str:
    return rng.randbytes(target // 2 + 1).hex()[:target]


def _script_words(alphabet: str, sizes: tuple[int, int] = (2, 8)) -> Shape:
    def generate(rng: random.Random, target: int) -> str:
        out: list[str] = []
        size = 0
        while size < target:
            word = "".join(rng.choice(alphabet) for _ in range(rng.randint(*sizes)))
            out.append(word + (rng.choice(".,") if rng.random() < 0.1 else ""))
            size += len(out[-1]) + 1
        return " ".join(out)

    return generate


def _range(lo: int, hi: int) -> str:
    return "".join(chr(c) for c in range(lo, hi + 1))


SHAPES: dict[str, Shape] = {
    "c": _fill(_c),
    "cpp": _fill(_cpp),
    "rust": _fill(_rust),
    "go": _fill(_go),
    "java": _fill(_java),
    "js-ts": _fill(_js),
    "minified-js": _minified_js,
    "python": _fill(_python),
    "sql": _fill(_sql),
    "shell": _fill(_shell),
    "yaml": _fill(_yaml),
    "toml": _fill(_toml, "\n\n"),
    "json": _fill(_json, ",\n"),
    "xml-html": _fill(_xml),
    "css": _fill(_css),
    "markdown-table": _fill(_markdown_table),
    "logs": _fill(_log),
    "diff": _fill(_diff),
    "traceback": _fill(_traceback),
    "csv": _fill(_csv),
    "urls": _fill(_url),
    "base64": _base64,
    "hex": _hex,
    "latin": _script_words(string.ascii_lowercase + "àáâäçèéêëíîïñóôöúûüßœ"),
    "cyrillic": _script_words(_range(0x0430, 0x044F)),
    "greek": _script_words(_range(0x03B1, 0x03C9)),
    "arabic": _script_words(_range(0x0621, 0x064A)),
    "hebrew": _script_words(_range(0x05D0, 0x05EA)),
    "devanagari": _script_words(_range(0x0905, 0x0939)),
    "thai": _script_words(_range(0x0E01, 0x0E30), (3, 10)),
    "hangul": _script_words(_range(0xAC00, 0xD7A3), (1, 4)),
    "cjk": _script_words(_range(0x4E00, 0x9FFF), (1, 6)),
    "kana": _script_words(_range(0x3041, 0x3096) + _range(0x30A1, 0x30FA)),
    "emoji": _script_words(_range(0x1F300, 0x1F64F), (1, 3)),
}
"""Every shape, by name."""


def shape_texts(
    seed: int, *, count: int = 6, sizes: tuple[int, ...] = (300, 3_000, 20_000)
) -> dict[str, list[str]]:
    """Return ``count`` texts per shape and size for ``seed`` (another seed: other texts)."""
    out: dict[str, list[str]] = {}
    for name, generate in SHAPES.items():
        rng = random.Random(f"shapes:{seed}:{name}")
        out[name] = [generate(rng, size) for size in sizes for _ in range(count)]
    return out


if __name__ == "__main__":
    for name, generate in SHAPES.items():
        print(f"{name:16s} {generate(random.Random(0), 80)[:70]!r}")
