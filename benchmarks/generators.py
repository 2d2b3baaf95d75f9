"""Generated text and agent runs: every synthetic workload of the benchmarks and the estimator fit.

Each text class is a generator ``(rng, target_chars) -> str``, deterministic for a seed
(`GENERATORS`): English prose from a frequency-mixed vocabulary, Python code, tracebacks,
JSON, file listings, hex dumps, logs, Chinese prose (from a built-in list of common words),
Chinese mixed with code, other scripts, and structured text whose tokens split at
character-class changes (ids and hashes, numbers, tables, numbered lines, base64, short
repeated units).

An agent run interleaves them with tool calls (`gen_agent_session`); `synthetic_trajectory`
gives one as a `benchmarks.trajectories.Trajectory`, which is what the session benchmarks
replay when ``../shared`` is absent.

The wide evaluation set of `benchmarks.textgen` (every script and encoding) builds on the
prose, code and JSON generators here. Changing any generator changes the estimator's
training data (`benchmarks.fit_estimator`): refit after such a change.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

from benchmarks.trajectories import Trajectory
from harness.messages import Message, ToolCall

Generator = Callable[[random.Random, int], str]
"""A text class: ``(rng, target_chars) -> text`` of about ``target_chars`` characters."""


# ---------------------------------------------------------------- vocabulary
def _split(words: str) -> list[str]:
    return words.split()


_EN_COMMON = _split(
    "the of and to a in is it you that he was for on are with as I his they be at one have "
    "this from or had by not but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them would write "
    "like so these her long make thing see him two has look more day could go come did no "
    "most my over know than call first who may down side been now find any new work part "
    "take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form much great think say help low line "
    "before turn cause same mean differ move right boy old too does tell set three want air "
    "well also play small end put home read hand large add even here must big high such "
    "follow act why ask men change went light kind off need house try again point"
)
_EN_TECH = _split(
    "function value request response server client message token context budget history "
    "session agent model tool call result error exception timeout retry cache buffer stream "
    "parser config default option setting module package library import export version "
    "release branch commit merge rebase deploy build test fixture assertion coverage "
    "benchmark throughput latency memory allocation pointer reference argument parameter "
    "variable constant attribute property method class instance object interface protocol "
    "implementation dependency container cluster database query index transaction schema "
    "migration serialization deserialization validation authentication authorization "
    "encryption certificate middleware handler callback coroutine asynchronous synchronous "
    "concurrency thread process scheduler queue worker pipeline payload endpoint gateway "
    "repository directory filesystem permission ownership symlink checksum compression "
    "tokenizer embedding inference precision gradient tensor vector matrix estimator "
    "regression heuristic invariant idempotent deterministic monotonic"
)
_EN_RARE = _split(
    "marshmallow pydicom kubernetes nginx postgres sqlite msgspec anyio trio httpx pytest "
    "hypothesis numpy pandas matplotlib scikit tensorflow pytorch FastAPI Starlette Django "
    "Flask Celery Redis RabbitMQ Kafka Elasticsearch Prometheus Grafana OpenTelemetry "
    "webpack TypeScript JavaScript Rustacean Golang Kotlin Haskell Erlang OCaml Zig "
    "misconfiguration unparseable overcommitted underflowing reentrancy backpressure "
    "canonicalization internationalization disambiguation heterogeneous idiosyncratic "
    "Cholesky Levenshtein Dijkstra Byzantine Mersenne Fibonacci Kolmogorov"
)
_NAMES = _split(
    "user item data result value config path name count index size limit offset key text "
    "node parent child entry record event state status field schema table row column batch "
    "chunk page cursor token buffer handler client server request response message payload"
)
_EXCEPTIONS = _split(
    "ValueError TypeError KeyError IndexError AttributeError RuntimeError AssertionError "
    "FileNotFoundError PermissionError TimeoutError ConnectionResetError ImportError "
    "ModuleNotFoundError ZeroDivisionError UnicodeDecodeError JSONDecodeError "
    "ValidationError IntegrityError OperationalError NotImplementedError"
)
_EXTENSIONS = _split(
    "py txt md json yaml yml toml cfg ini rst html css js ts tsx go rs c h cpp java kt sh "
    "lock log csv sql png jpg svg gz zip whl so"
)

_ZH_WORDS = _split(
    "我们 你们 他们 这个 那个 什么 怎么 为什么 因为 所以 但是 如果 虽然 然后 已经 可以 "
    "需要 应该 可能 没有 不是 就是 还是 或者 以及 并且 而且 只是 一些 所有 每个 其他 "
    "问题 方法 系统 数据 信息 用户 时间 工作 技术 开发 功能 应用 服务 文件 代码 程序 "
    "模型 上下文 工具 调用 结果 请求 响应 消息 会话 历史 任务 状态 配置 参数 接口 插件 "
    "框架 版本 目录 路径 内容 片段 编辑 管理 压缩 预算 窗口 输入 输出 执行 运行 测试 "
    "错误 异常 日志 缓存 存储 数据库 索引 查询 网络 连接 超时 重试 并发 线程 进程 "
    "实现 设计 结构 策略 规则 机制 流程 步骤 过程 环境 平台 项目 团队 开发者 工程师 "
    "重要 简单 复杂 稳定 安全 快速 有效 明显 主要 基本 核心 默认 当前 最新 完整 具体 "
    "支持 提供 使用 处理 生成 创建 删除 修改 更新 保存 加载 读取 写入 发送 接收 返回 "
    "检查 验证 计算 估算 统计 分析 比较 选择 过滤 排序 合并 拆分 替换 恢复 回滚 "
    "理解 说明 描述 解释 讨论 总结 记录 显示 隐藏 打开 关闭 开始 结束 继续 停止 "
    "一次 多次 每次 之前 之后 同时 最后 首先 其次 另外 例如 比如 尤其 特别 通常 一般 "
    "经济 社会 文化 历史 教育 科学 研究 发展 国家 政府 市场 企业 公司 产品 价格 "
    "城市 地方 世界 中国 北京 上海 生活 朋友 家庭 孩子 学生 老师 学校 医院 银行 "
    "今天 明天 昨天 现在 以后 以前 早上 晚上 春天 夏天 秋天 冬天 天气 温度 "
    "非常 比较 更加 十分 完全 总是 经常 已经 正在 马上 立刻 终于 突然 逐渐"
)
_ZH_CHARS = "的了是在和有也就都而及与对把被让给从向到为以于之其这那个些中上下里外"


def _gb2312_level1() -> str:
    """Return the 3,755 most common Chinese characters (GB2312 level 1, from the codec)."""
    chars = []
    for row in range(0xB0, 0xD8):
        for cell in range(0xA1, 0xFF):
            try:
                chars.append(bytes((row, cell)).decode("gb2312"))
            except UnicodeDecodeError:
                continue
    return "".join(chars)


ZH_COMMON = _gb2312_level1()
"""The 3,755 common Chinese characters of GB2312 level 1."""
_OTHER_SCRIPTS = _split(
    "Привет мир это пример текста на русском языке с ошибкой в файле конфигурации "
    "Größe Straße übermäßig Äpfel Öffnung für müssen Bücher schön "
    "café déjà naïve élève français garçon hôpital où été "
    "español niño año mañana corazón información "
    "Ελληνικά γλώσσα παράδειγμα κείμενο "
    "こんにちは 世界 ファイル を 開く テスト 失敗 しました "
    "안녕하세요 파일 을 열 수 없습니다 "
    "✅ ❌ ⚠️ 🚀 🔥 📦 🐍 ✨ 👍 → ← ↑ ↓ … — – • · « » ° ± × ÷ ≤ ≥ ≠ ∞ √ € £ ¥ © ®"
)
_ZH_PUNCT_MID = "，，，，、；："
_ZH_PUNCT_END = "。。。。！？"
_ZH_TERMS = _split(
    "Agent token API JSON Harness ReAct LLM prompt DeepSeek SQLite Python TypeScript "
    "HTTP GPU system user assistant tool_call"
)


def length_sampler(rng: random.Random) -> Callable[[], int]:
    """Return a sampler of message lengths: log-normal, 40 to 24,000 characters."""

    def sample() -> int:
        return max(40, min(24_000, int(math.exp(rng.gauss(6.3, 1.2)))))

    return sample


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _word(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.55:
        return rng.choice(_EN_COMMON)
    if r < 0.92:
        return rng.choice(_EN_TECH)
    return rng.choice(_EN_RARE)


def _ident(rng: random.Random, style: str = "snake") -> str:
    parts = [rng.choice(_NAMES)] + [
        rng.choice(_NAMES + _EN_TECH[:40]) for _ in range(rng.randint(0, 2))
    ]
    if style == "camel":
        return "".join(p.capitalize() for p in parts)
    return "_".join(parts)


def _number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return str(rng.randint(0, 100))
    if r < 0.8:
        return str(rng.randint(100, 100_000))
    return f"{rng.uniform(0, 1000):.{rng.randint(1, 4)}f}"


def _sentence(rng: random.Random) -> str:
    words = [_word(rng) for _ in range(rng.randint(5, 24))]
    for i in range(len(words)):
        r = rng.random()
        if r < 0.04:
            words[i] = _number(rng)
        elif r < 0.07:
            words[i] = f"`{_ident(rng)}`"
        elif r < 0.10:
            words[i] += ","
    words[0] = words[0].capitalize()
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), f"({_word(rng)} {_word(rng)})")
    return " ".join(words) + rng.choice("....?!:")


def fill(rng: random.Random, target: int, part: Callable[[], str], sep: str = "\n") -> str:
    """Join pieces from ``part()`` with ``sep`` until there are ``target`` characters."""
    out: list[str] = []
    size = 0
    while size < target:
        piece = part()
        out.append(piece)
        size += len(piece) + len(sep)
    return sep.join(out)


def gen_prose(rng: random.Random, target: int) -> str:
    """English prose: paragraphs, sometimes a heading or a bullet list."""

    def paragraph() -> str:
        r = rng.random()
        if r < 0.1:
            return "## " + " ".join(_word(rng) for _ in range(rng.randint(2, 5))).title()
        if r < 0.25:
            return "\n".join("- " + _sentence(rng) for _ in range(rng.randint(2, 5)))
        return " ".join(_sentence(rng) for _ in range(rng.randint(1, 6)))

    return fill(rng, target, paragraph, "\n\n")


def _expr(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return _ident(rng)
    if r < 0.5:
        return _number(rng)
    if r < 0.65:
        return repr(" ".join(_word(rng) for _ in range(rng.randint(1, 5))))
    if r < 0.8:
        args = ", ".join(_ident(rng) for _ in range(rng.randint(0, 3)))
        return f"{_ident(rng)}.{_ident(rng)}({args})"
    if r < 0.9:
        return f"{_ident(rng)}[{_ident(rng)!r}]"
    return f'f"{_word(rng)} {{{_ident(rng)}}} {_word(rng)}"'


def _block(rng: random.Random, indent: int, depth: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.15 and depth < 3:
            cond = f"{_ident(rng)} {rng.choice(['==', '!=', '>', '<=', 'is', 'in'])} {_expr(rng)}"
            lines.append(f"{pad}{rng.choice(['if', 'while', 'elif'])} {cond}:")
            lines += _block(rng, indent + 4, depth + 1)
        elif r < 0.25 and depth < 3:
            lines.append(f"{pad}for {_ident(rng)} in {_expr(rng)}:")
            lines += _block(rng, indent + 4, depth + 1)
        elif r < 0.35:
            lines.append(f"{pad}# {_sentence(rng)}")
        elif r < 0.45:
            lines.append(f"{pad}return {_expr(rng)}")
        elif r < 0.5:
            lines.append("")
        else:
            lines.append(f"{pad}{_ident(rng)} = {_expr(rng)}")
    return lines


def gen_code(rng: random.Random, target: int) -> str:
    """Python code: imports, functions and classes with nested blocks and docstrings."""

    def unit() -> str:
        r = rng.random()
        if r < 0.15:
            mod = rng.choice(_NAMES)
            return f"from {mod}.{_ident(rng)} import {_ident(rng, 'camel')}, {_ident(rng)}"
        args = ", ".join(
            f"{_ident(rng)}: {rng.choice(['int', 'str', 'float', 'bool', 'list[str]', 'Any'])}"
            for _ in range(rng.randint(0, 4))
        )
        head = (
            f"def {_ident(rng)}({args}) -> {rng.choice(['None', 'int', 'str', 'dict[str, Any]'])}:"
        )
        body = [f'    """{_sentence(rng)}"""', *_block(rng, 4, 0)]
        if r < 0.35:
            method = [("    " + line) if line else line for line in [head, *body]]
            return "\n".join([f"class {_ident(rng, 'camel')}:", *method])
        return "\n".join([head, *body])

    return fill(rng, target, unit, "\n\n")


def _path(rng: random.Random, absolute: bool = True) -> str:
    parts = [rng.choice(["src", "lib", "tests", "app", "pkg", "usr", "home", "opt", "var"])]
    parts += [_ident(rng) for _ in range(rng.randint(1, 4))]
    name = f"{_ident(rng)}.{rng.choice(_EXTENSIONS)}"
    return ("/" if absolute else "") + "/".join([*parts, name])


def gen_traceback(rng: random.Random, target: int) -> str:
    """Python tracebacks and pytest failure summaries."""

    def one() -> str:
        if rng.random() < 0.3:
            test = f"tests/test_{_ident(rng)}.py::test_{_ident(rng)}"
            return f"FAILED {test} - {rng.choice(_EXCEPTIONS)}: assert {_expr(rng)} == {_expr(rng)}"
        lines = ["Traceback (most recent call last):"]
        for _ in range(rng.randint(1, 8)):
            lines.append(f'  File "{_path(rng)}", line {rng.randint(1, 2000)}, in {_ident(rng)}')
            code = f"{_ident(rng)} = {_expr(rng)}"
            lines.append(f"    {code}")
            if rng.random() < 0.3:
                lines.append("    " + " " * rng.randint(0, 8) + "^" * rng.randint(3, 20))
        lines.append(f"{rng.choice(_EXCEPTIONS)}: {_sentence(rng)}")
        return "\n".join(lines)

    return fill(rng, target, one, "\n\n")


def _json_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth < 3 and r < 0.15:
        return {
            _ident(rng, rng.choice(["snake", "camel"])): _json_value(rng, depth + 1)
            for _ in range(rng.randint(1, 6))
        }
    if depth < 3 and r < 0.25:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    if r < 0.4:
        return rng.randint(-1000, 10 ** rng.randint(1, 9))
    if r < 0.45:
        return round(rng.uniform(-100, 100), rng.randint(1, 6))
    if r < 0.5:
        return rng.choice([True, False, None])
    if r < 0.56:
        return f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"
    if r < 0.62:
        return (
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
        )
    if r < 0.68:
        return f"https://{_ident(rng).replace('_', '-')}.example.com{_path(rng)}"
    if r < 0.72:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(16, 64)))
    if r < 0.85:
        return " ".join(_word(rng) for _ in range(rng.randint(1, 4)))
    return _sentence(rng)


def gen_json(rng: random.Random, target: int) -> str:
    """JSON documents: API responses and tool arguments, compact or indented."""

    def doc() -> str:
        value = {_ident(rng): _json_value(rng, 1) for _ in range(rng.randint(2, 8))}
        if rng.random() < 0.5:
            return json.dumps(value, indent=rng.choice([2, 4]))
        return json.dumps(value, separators=(",", ":") if rng.random() < 0.5 else None)

    return fill(rng, target, doc)


def gen_paths(rng: random.Random, target: int) -> str:
    """File listings: ``ls -la``, ``find``, ``git status`` and ``tree`` output."""
    kind = rng.random()

    def line() -> str:
        if kind < 0.3:
            mode = rng.choice(["-rw-r--r--", "drwxr-xr-x", "-rwxr-xr-x", "lrwxrwxrwx"])
            month = rng.choice(_split("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec"))
            name = f"{_ident(rng)}.{rng.choice(_EXTENSIONS)}"
            return (
                f"{mode} {rng.randint(1, 9):>2} {rng.choice(['root', 'user', 'dev'])} staff "
                f"{rng.randint(0, 10**7):>8} {month} {rng.randint(1, 28):>2} "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} {name}"
            )
        if kind < 0.6:
            return "./" + _path(rng, absolute=False)
        if kind < 0.8:
            state = rng.choice(["modified:", "new file:", "deleted:", "renamed:"])
            return f"\t{state}   {_path(rng, absolute=False)}"
        depth = rng.randint(0, 4)
        branch = rng.choice(["├── ", "└── "])
        name = _ident(rng) + (f".{rng.choice(_EXTENSIONS)}" if rng.random() < 0.7 else "/")
        return "│   " * depth + branch + name

    return fill(rng, target, line)


def gen_hexdump(rng: random.Random, target: int) -> str:
    """Hex dumps (``xxd``, ``hexdump -C``), hashes and ``git log --oneline``."""
    kind = rng.random()
    state = {"offset": rng.randrange(0, 1 << 20, 16)}

    def line() -> str:
        data = bytes(
            rng.randrange(32, 127) if rng.random() < 0.5 else rng.randrange(256) for _ in range(16)
        )
        ascii_col = "".join(chr(b) if 32 <= b < 127 else "." for b in data)
        offset = state["offset"]
        state["offset"] += 16
        if kind < 0.35:
            groups = " ".join(data[i : i + 2].hex() for i in range(0, 16, 2))
            return f"{offset:08x}: {groups}  {ascii_col}"
        if kind < 0.7:
            left = " ".join(f"{b:02x}" for b in data[:8])
            right = " ".join(f"{b:02x}" for b in data[8:])
            return f"{offset:08x}  {left}  {right}  |{ascii_col}|"
        if kind < 0.85:
            return f"{_hex(rng, 64)}  {_path(rng, absolute=False)}"
        return f"{_hex(rng, 7)} {_sentence(rng)}"

    return fill(rng, target, line)


def gen_logs(rng: random.Random, target: int) -> str:
    """Server and build logs: timestamps, levels, key=value pairs, ids, addresses."""

    def line() -> str:
        ts = (
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            f".{rng.randint(0, 999):03d}"
        )
        level = rng.choice(["DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR"])
        who = f"{rng.choice(_NAMES)}.{_ident(rng)}"
        r = rng.random()
        if r < 0.4:
            method = rng.choice(["GET", "POST", "PUT", "DELETE"])
            ip = ".".join(str(rng.randint(1, 254)) for _ in range(4))
            msg = (
                f"{ip} {method} /api/v{rng.randint(1, 3)}/{_ident(rng)}/{rng.randint(1, 99999)} "
                f"{rng.choice([200, 201, 204, 400, 404, 500])} {rng.uniform(0.1, 900):.1f}ms "
                f"request_id={_hex(rng, 16)}"
            )
        elif r < 0.7:
            pairs = " ".join(f"{_ident(rng)}={_number(rng)}" for _ in range(rng.randint(1, 5)))
            msg = f"{_sentence(rng)} {pairs}"
        else:
            msg = _sentence(rng)
        return f"{ts} {level:<7} [{who}] {msg}"

    return fill(rng, target, line)


def _zh_sentence(rng: random.Random) -> str:
    out: list[str] = []
    for _ in range(rng.randint(4, 22)):
        r = rng.random()
        if r < 0.62:
            out.append(rng.choice(_ZH_WORDS))
        elif r < 0.79:
            out.append(rng.choice(_ZH_CHARS))
        elif r < 0.85:
            # Characters outside the word list, so that not every pair is a common word.
            out.append("".join(rng.choice(ZH_COMMON) for _ in range(rng.randint(1, 2))))
        elif r < 0.92:
            out.append(rng.choice(_ZH_PUNCT_MID))
        elif r < 0.97:
            term = rng.choice(_ZH_TERMS)
            out.append(f"`{term}`" if rng.random() < 0.3 else f" {term} ")
        else:
            out.append(_number(rng) + rng.choice(["", "个", "次", "年", "%", " 个"]))
    text = "".join(out).strip()
    if rng.random() < 0.08:
        text = f"“{text}”"
    return text + rng.choice(_ZH_PUNCT_END)


def gen_zh(rng: random.Random, target: int) -> str:
    """Chinese prose from common words, with headings, lists and embedded English terms."""

    def paragraph() -> str:
        r = rng.random()
        if r < 0.1:
            return "## " + "".join(rng.choice(_ZH_WORDS) for _ in range(rng.randint(2, 5)))
        if r < 0.2:
            return "\n".join(f"{i + 1}. " + _zh_sentence(rng) for i in range(rng.randint(2, 5)))
        return "".join(_zh_sentence(rng) for _ in range(rng.randint(1, 7)))

    return fill(rng, target, paragraph, "\n\n")


def gen_zh_code(rng: random.Random, target: int) -> str:
    """Chinese explanations with fenced code blocks (Python, JSON, shell)."""

    def part() -> str:
        r = rng.random()
        if r < 0.5:
            return "".join(_zh_sentence(rng) for _ in range(rng.randint(1, 4)))
        if r < 0.75:
            lines = gen_code(rng, rng.randint(80, 600)).splitlines()
            lines = [
                f"{line}  # {_zh_sentence(rng)}" if line.strip() and rng.random() < 0.2 else line
                for line in lines
            ]
            return "```python\n" + "\n".join(lines) + "\n```"
        if r < 0.9:
            value = {
                _ident(rng): _zh_sentence(rng) if rng.random() < 0.5 else _json_value(rng, 2)
                for _ in range(rng.randint(1, 5))
            }
            return "```json\n" + json.dumps(value, ensure_ascii=False, indent=2) + "\n```"
        return f"```bash\n$ {_ident(rng)} --{_ident(rng).replace('_', '-')} {_path(rng)}\n```"

    return fill(rng, target, part, "\n\n")


def gen_other_scripts(rng: random.Random, target: int) -> str:
    """Other scripts and symbols: Cyrillic, accented Latin, Greek, kana, Hangul, emoji."""

    def line() -> str:
        words = [
            rng.choice(_OTHER_SCRIPTS) if rng.random() < 0.6 else _word(rng)
            for _ in range(rng.randint(3, 16))
        ]
        return " ".join(words) + rng.choice([".", "", "!", ":"])

    return fill(rng, target, line)


# ------------------------------------------------- structured and adversarial text
# Text whose tokens are split by character-class alternations (letter/digit, digit/punct),
# which a per-byte model under-counts unless it sees the alternations: hashes, ids,
# numbers, tables, base64 and short repeated patterns. Common in agent transcripts.
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64URL = _B64[:62] + "-_"
_ALNUM = _B64[:62]


def _uuid(rng: random.Random) -> str:
    return f"{_hex(rng, 8)}-{_hex(rng, 4)}-4{_hex(rng, 3)}-{_hex(rng, 4)}-{_hex(rng, 12)}"


def _b64(rng: random.Random, n: int, alphabet: str = _B64) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _timestamp(rng: random.Random) -> str:
    date = f"20{rng.randint(19, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    r = rng.random()
    if r < 0.3:
        return f"{date}T{clock}Z"
    if r < 0.5:
        return f"{date}T{clock}.{rng.randint(0, 999999):06d}+00:00"
    if r < 0.7:
        return f"{date} {clock},{rng.randint(0, 999):03d}"
    if r < 0.85:
        return str(rng.randint(1_500_000_000, 1_800_000_000) * (1000 if rng.random() < 0.4 else 1))
    return f"{clock}.{rng.randint(0, 999):03d}"


def _separated_number(rng: random.Random) -> str:
    value = rng.randint(1000, 10 ** rng.randint(4, 12))
    r = rng.random()
    if r < 0.4:
        return f"{value:,}"
    if r < 0.6:
        return f"{value:_}"
    if r < 0.75:
        return f"{value:,}".replace(",", ".")
    if r < 0.9:
        return f"{value / 10 ** rng.randint(1, 6):,.{rng.randint(1, 4)}f}"
    return (
        f"{rng.uniform(0.1, 9.9):.{rng.randint(1, 3)}f}e{rng.choice('+-')}{rng.randint(1, 30):02d}"
    )


def _short_id(rng: random.Random) -> str:
    prefix = rng.choice(["req_", "call_", "msg_", "run_", "cus_", "evt_", "tok_", ""])
    return prefix + _b64(rng, rng.choice([12, 16, 24, 27]), _ALNUM)


def gen_ids(rng: random.Random, target: int) -> str:
    """Hex ids and hashes: git log, sha lists, sha256sum, UUID lists, docker ps, id maps."""
    kind = rng.randrange(7)

    def line() -> str:
        if kind == 0:
            return f"{_hex(rng, rng.choice([7, 8, 9, 10, 12]))} {_sentence(rng)}"
        if kind == 1:
            return _hex(rng, 40)
        if kind == 2:
            return f"{_hex(rng, rng.choice([32, 40, 64]))}  {_path(rng, absolute=False)}"
        if kind == 3:
            return _uuid(rng) if rng.random() < 0.7 else f'  "{_uuid(rng)}",'
        if kind == 4:
            image = f"{_ident(rng).replace('_', '-')}:{rng.randint(1, 9)}.{rng.randint(0, 20)}"
            return (
                f'{_hex(rng, 12)}   {image:<28} "{_ident(rng)}"   {rng.randint(2, 59)} minutes ago'
                f"   Up {rng.randint(2, 59)} minutes   0.0.0.0:{rng.randint(1024, 65535)}->80/tcp"
            )
        if kind == 5:
            key = rng.choice(["id", "commit", "sha", "request_id", "trace_id", "object", "parent"])
            value = rng.choice([_uuid(rng), _hex(rng, 40), _hex(rng, 16), _short_id(rng)])
            return f"{key}: {value}" if rng.random() < 0.5 else f'"{key}": "{value}",'
        return f"commit {_hex(rng, 40)}\nMerge: {_hex(rng, 7)} {_hex(rng, 7)}\n    {_sentence(rng)}"

    return fill(rng, target, line)


def gen_numeric(rng: random.Random, target: int) -> str:
    """Numbers: key=value metrics, separated thousands, timestamps, versions, addresses."""

    def value() -> str:
        r = rng.random()
        if r < 0.25:
            return str(rng.randint(0, 10 ** rng.randint(1, 6)))
        if r < 0.45:
            return f"{rng.uniform(0, 10 ** rng.randint(0, 4)):.{rng.randint(1, 6)}f}"
        if r < 0.6:
            return _separated_number(rng)
        if r < 0.7:
            return f"{rng.uniform(0.1, 999):.1f}{rng.choice(['ms', 's', 'MB', 'GiB', '%', 'x'])}"
        if r < 0.8:
            return f"{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 200)}"
        if r < 0.9:
            return (
                ".".join(str(rng.randint(0, 255)) for _ in range(4)) + f":{rng.randint(1, 65535)}"
            )
        return _timestamp(rng)

    def line() -> str:
        r = rng.random()
        if r < 0.45:
            keys = rng.sample(
                [
                    "step",
                    "epoch",
                    "loss",
                    "lr",
                    "grad_norm",
                    "tokens",
                    "elapsed",
                    "mem",
                    "rss",
                    "batch",
                    "acc",
                    "p50",
                    "p99",
                    "qps",
                    "errors",
                    "retries",
                    "bytes",
                    "count",
                ],
                rng.randint(2, 7),
            )
            pairs = (f"{k}={value()}" for k in keys)
            return f"{_timestamp(rng)} " * (rng.random() < 0.6) + " ".join(pairs)
        if r < 0.65:
            return ", ".join(value() for _ in range(rng.randint(3, 12)))
        if r < 0.85:
            return f"{_sentence(rng)[:-1]} {value()} {rng.choice(_EN_TECH)} ({value()})."
        return f"{_timestamp(rng)} {rng.choice(['INFO', 'WARN', 'DEBUG'])} {_sentence(rng)}"

    return fill(rng, target, line)


def gen_tables(rng: random.Random, target: int) -> str:
    """Tables: markdown and CSV with numbers, ps aux, df -h, pytest --durations."""
    kind = rng.randrange(5)
    columns = [_ident(rng) for _ in range(rng.randint(3, 7))]
    if kind == 0:
        head = "| " + " | ".join(columns) + " |\n|" + "|".join("---" for _ in columns) + "|"
    elif kind == 1:
        head = ",".join(columns)
    elif kind == 2:
        head = "USER       PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"
    elif kind == 3:
        head = "Filesystem      Size  Used Avail Use% Mounted on"
    else:
        head = "============================= slowest 20 durations ============================="

    def cell() -> str:
        r = rng.random()
        if r < 0.5:
            return str(rng.randint(0, 10 ** rng.randint(1, 7)))
        if r < 0.75:
            return f"{rng.uniform(0, 100):.{rng.randint(1, 4)}f}"
        return rng.choice([_word(rng), _ident(rng), _hex(rng, 8)])

    def row() -> str:
        if kind == 0:
            return "| " + " | ".join(cell() for _ in columns) + " |"
        if kind == 1:
            return ",".join(cell() for _ in columns)
        if kind == 2:
            return (
                f"{rng.choice(['root', 'dev', 'www-data']):<10}{rng.randint(1, 99999):>6} "
                f"{rng.uniform(0, 99):4.1f} {rng.uniform(0, 30):4.1f} {rng.randint(0, 9**7):>6} "
                f"{rng.randint(0, 9**6):>5} pts/{rng.randint(0, 9)}    S    "
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}   {rng.randint(0, 9)}:"
                f"{rng.randint(0, 59):02d} {_path(rng)}"
            )
        if kind == 3:
            size = rng.randint(1, 999)
            return (
                f"/dev/{rng.choice(['sda', 'nvme0n1p', 'vdb'])}{rng.randint(1, 9):<8}"
                f"{size:>4}G {rng.randint(0, size):>4}G {rng.randint(0, size):>4}G "
                f"{rng.randint(0, 100):>3}% /{_ident(rng)}"
            )
        return (
            f"{rng.uniform(0, 30):.2f}s {rng.choice(['call', 'setup', 'teardown']):<8} "
            f"tests/test_{_ident(rng)}.py::test_{_ident(rng)}"
        )

    return head + "\n" + fill(rng, target, row)


def gen_numbered(rng: random.Random, target: int) -> str:
    """Numbered lines: lists, steps, cat -n listings, grep -n matches, diff hunks."""
    kind = rng.randrange(5)
    state = {"n": rng.randint(1, 500)}

    def line() -> str:
        state["n"] += 1 if rng.random() < 0.9 else rng.randint(2, 40)
        n = state["n"]
        if kind == 0:
            return f"{n}. {_sentence(rng)}"
        if kind == 1:
            return f"{rng.choice(['Step', 'step', 'Task', 'Round'])} {n}: {_sentence(rng)}"
        if kind == 2:
            code = rng.choice(gen_code(rng, 40).splitlines() or [""])
            return f"{n:>6}\t{code}"
        if kind == 3:
            return f"{_path(rng, absolute=False)}:{n}:{rng.randint(1, 80)}: {_expr(rng)}"
        a, b = rng.randint(1, 900), rng.randint(1, 30)
        return (
            f"@@ -{a},{b} +{a + rng.randint(-3, 3)},{b + rng.randint(-2, 2)} @@ def {_ident(rng)}"
        )

    return fill(rng, target, line)


def gen_base64(rng: random.Random, target: int) -> str:
    """Base64: wrapped blobs, data URIs, JWTs, PEM blocks, integrity hashes."""
    kind = rng.randrange(5)
    if kind == 0:
        body = _b64(rng, target)
        return "\n".join(body[i : i + 76] for i in range(0, len(body), 76))
    if kind == 1:
        mime = rng.choice(["image/png", "image/jpeg", "application/pdf", "font/woff2"])
        return f'<img src="data:{mime};base64,{_b64(rng, target)}=">'
    if kind == 2:

        def jwt() -> str:
            parts = (_b64(rng, rng.randint(20, 60), _B64URL) for _ in range(3))
            return "Authorization: Bearer eyJ" + ".".join(parts)

        return fill(rng, target, jwt)
    if kind == 3:
        body = _b64(rng, target)
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----"

    def entry() -> str:
        return f'"integrity": "sha512-{_b64(rng, 86)}==",'

    return fill(rng, target, entry)


_REPEAT_UNITS = (
    "ab ",
    "step 1 ",
    "0 ",
    "1, ",
    "a1 ",
    "x ",
    "ok\n",
    "null, ",
    "0x00, ",
    "-1 ",
    "..",
    "| ",
    "=-",
    "ha",
    "a1b2",
    "1.0 ",
    "[0] ",
    "{}, ",
    "aa ",
    "AB ",
    "Ab ",
    "id ",
    "10 ",
)


def gen_repeats(rng: random.Random, target: int) -> str:
    """Short units repeated many times, fixed or random (a stress test of split-heavy text)."""
    r = rng.random()
    if r < 0.5:
        unit = rng.choice(_REPEAT_UNITS)
    else:
        pool = rng.choice([_ALNUM, "abcdef0123456789", "0123456789", "abcdefghij", _B64 + " .,"])
        unit = _b64(rng, rng.randint(1, 5), pool) + rng.choice([" ", "", ", ", "\n"])
    if rng.random() < 0.3:
        unit = unit.replace("1", str(rng.randint(0, 9)))
    return unit * max(1, target // len(unit))


GENERATORS: dict[str, tuple[Generator, str]] = {
    "prose-en": (gen_prose, "English prose from a frequency-mixed vocabulary"),
    "code-py": (gen_code, "generated Python functions and classes"),
    "tracebacks": (gen_traceback, "Python tracebacks and pytest failures"),
    "json": (gen_json, "JSON documents, compact and indented, with ids and timestamps"),
    "paths": (gen_paths, "ls -la, find, git status and tree listings"),
    "hexdump": (gen_hexdump, "xxd / hexdump -C output, sha256 lines, git log"),
    "logs": (gen_logs, "timestamped log lines with key=value pairs and request ids"),
    "zh-prose": (gen_zh, "Chinese prose from a built-in list of common words"),
    "zh-code": (gen_zh_code, "Chinese explanations mixed with code and JSON blocks"),
    "other-scripts": (gen_other_scripts, "Cyrillic, accented Latin, Greek, kana, Hangul, emoji"),
    "ids-hashes": (gen_ids, "git shas, sha256 sums, UUID lists, docker ids, id fields"),
    "numeric": (gen_numeric, "key=value metrics, separated numbers, timestamps, versions"),
    "tables": (gen_tables, "markdown and CSV tables, ps aux, df -h, test durations"),
    "numbered": (gen_numbered, "numbered lists and steps, cat -n, grep -n, diff hunks"),
    "base64": (gen_base64, "base64 blobs, data URIs, JWTs, PEM blocks, integrity hashes"),
    "repeats": (gen_repeats, "short units repeated ('ab ', 'step 1 ', random 1-5 chars)"),
}

_TOOL_OUTPUTS = ("code-py", "tracebacks", "json", "paths", "hexdump", "logs", "prose-en")


def gen_agent_session(rng: random.Random, rounds: int) -> list[Message]:
    """An agent session: system prompt, a task, then rounds of tool calls and results."""
    lengths = length_sampler(rng)
    messages = [Message.system(gen_prose(rng, rng.randint(400, 3000)))]
    task = gen_zh(rng, lengths()) if rng.random() < 0.3 else gen_prose(rng, lengths())
    messages.append(Message.user(task))
    for i in range(rounds):
        thought = " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))
        name = rng.choice(
            ["bash", "view_file", "edit_file", "search", "open"]
        )  # not read_file: the stack offers its own
        if name == "bash":
            args = {"command": f"{rng.choice(['ls', 'cat', 'grep -rn', 'pytest'])} {_path(rng)}"}
        elif name == "edit_file":
            args = {"path": _path(rng), "old": gen_code(rng, 120), "new": gen_code(rng, 150)}
        else:
            args = {"path": _path(rng), "query": _sentence(rng)}
        call = ToolCall(id=f"call_{_hex(rng, 24)}", name=name, arguments=json.dumps(args))
        messages.append(Message.assistant(thought, tool_calls=[call]))
        generator = GENERATORS[rng.choice(_TOOL_OUTPUTS)][0]
        messages.append(Message.tool(call.id, generator(rng, lengths()), name=name))
        if i % 7 == 6:
            messages.append(Message.user(_sentence(rng)))
    return messages


def synthetic_trajectory(rng: random.Random, index: int, *, rounds: int = 14) -> Trajectory:
    """Return one generated agent run: its system prompt split off, like a recorded one."""
    system, *messages = gen_agent_session(rng, rounds)
    return Trajectory(f"synthetic-{index}", system.text, tuple(messages))


def synthetic_trajectories(*, seed: int = 0, count: int = 8) -> list[Trajectory]:
    """Return ``count`` generated runs, deterministic for ``seed``."""
    rng = random.Random(seed)
    return [synthetic_trajectory(rng, i) for i in range(count)]
