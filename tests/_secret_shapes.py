"""Secret shapes for the redaction tests: tokens and passwords in the surroundings agents write.

`CASES` pairs each text with the secret it holds (several hundred: vendor tokens bare and in
CJK text, full-width punctuation, quotes and code blocks; passwords assigned to secret-named
keys in env, YAML, JSON, TOML, Python and shell; credentials inside URLs). Values are made
with a seeded generator, so the set is the same on every run.
"""

from __future__ import annotations

import base64
import json
import random
import string

_RNG = random.Random(21)
_ALNUM = string.ascii_letters + string.digits
_URLSAFE = _ALNUM + "-_"
_UPPER = string.ascii_uppercase + string.digits
_HEX = "0123456789abcdef"


def _r(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _digits(n: int) -> str:
    return _r(string.digits, n)


def _jwt() -> str:
    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    header = part({"alg": "HS256", "typ": "JWT"})
    return f"{header}.{part({'sub': _digits(8), 'exp': 1_900_000_000})}.{_r(_URLSAFE, 43)}"


TOKENS: dict[str, str] = {
    "aws access key id": "AKIA" + _r(_UPPER, 16),
    "aws session key id": "ASIA" + _r(_UPPER, 16),
    "slack bot": f"xoxb-{_digits(12)}-{_digits(13)}-{_r(_ALNUM, 24)}",
    "slack user": f"xoxp-{_digits(12)}-{_digits(12)}-{_digits(13)}-{_r(_HEX, 32)}",
    "slack webhook": f"https://hooks.slack.com/services/T{_r(_UPPER, 8)}/B{_r(_UPPER, 10)}/"
    + _r(_ALNUM, 24),
    "stripe live": "sk_live_" + _r(_ALNUM, 99),
    "stripe restricted": "rk_live_" + _r(_ALNUM, 24),
    "stripe test": "sk_test_" + _r(_ALNUM, 24),
    "github classic": "ghp_" + _r(_ALNUM, 36),
    "github oauth": "gho_" + _r(_ALNUM, 36),
    "github fine-grained": "github_pat_" + _r(_UPPER, 22) + "_" + _r(_ALNUM, 59),
    "gitlab": "glpat-" + _r(_URLSAFE, 20),
    "google api key": "AIza" + _r(_URLSAFE, 35),
    "google oauth": "ya29." + _r(_URLSAFE, 60),
    "jwt": _jwt(),
    "openai project": "sk-proj-" + _r(_URLSAFE, 48),
    "openai legacy": "sk-" + _r(_ALNUM, 20) + "T3BlbkFJ" + _r(_ALNUM, 20),
    "anthropic": "sk-ant-api03-" + _r(_URLSAFE, 80),
    "sendgrid": f"SG.{_r(_URLSAFE, 22)}.{_r(_URLSAFE, 43)}",
    "npm": "npm_" + _r(_ALNUM, 36),
    "pypi": "pypi-AgEIcHlwaS5vcmc" + _r(_URLSAFE, 80),
    "twilio": "SK" + _r(_HEX, 32),
    "square": "sq0csp-" + _r(_URLSAFE, 43),
    "mailchimp": _r(_HEX, 32) + "-us6",
    "huggingface": "hf_" + _r(_ALNUM, 34),
    "azure storage": "AccountKey=" + _r(_ALNUM + "+/", 86) + "==",
}
"""Vendor tokens, each as the vendor issues it."""

PASSWORDS = (
    "hunter2",
    "Tr0ub4dor3",
    "s3cr3t-P4ss!",
    "pa55w0rd.xyz",
    "Zq7xK2pL9wE4mN8v",
    _r(_ALNUM + "/+", 40),
)
"""Values assigned to secret-named keys (the last one shaped like an AWS secret access key)."""

KEYS = (
    "DB_PASSWORD",
    "client_secret",
    "id_token",
    "access_token",
    "refresh_token",
    "AWS_SECRET_ACCESS_KEY",
    "SECRET_KEY",
    "api_key",
    "x-api-key",
    "apiKey",
    "clientSecret",
    "password",
    "Password",
    "PASSWORD",
    "passwd",
    "pwd",
    "auth_token",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "private_key",
    "credentials",
    "密码",
    "令牌",
)
"""Names whose value is a secret."""

KEYED = (
    "{k}={v}",
    "export {k}={v}",
    "{k}: {v}",
    '{k}: "{v}"',
    '"{k}": "{v}"',
    '{{"{k}":"{v}","user":"ann"}}',
    "{k} = '{v}'",
    "[database]\n{k} = \"{v}\"\nhost = 'db'",
    "{{'{k}': '{v}'}}",
    "配置{k}={v}请保管",
    "{k}：{v}，请保管",
    "{k}＝{v}",
    "```env\n{k}={v}\n```",
    "- {k}: {v}\n- host: db",
    '{k}="{v}" ./deploy.sh',
    "run with {k}={v} and retry",
)
"""Where an assignment of a secret is written: env, shell, YAML, JSON, TOML, Python, CJK text."""

BARE = (
    "{t}",
    "密钥是{t}请勿外传",
    "the key {t}.",
    '"{t}"',
    "`{t}`",
    "（{t}）",
    "令牌：{t}",
    "Authorization: Bearer {t}",
    "```\n{t}\n```",
    "export TOKEN={t}",
    '{{"value": "{t}"}}',
    "# 标题 {t}",
)
"""Where a token stands on its own: bare, after Chinese text with no space, in quotes,
full-width brackets, markdown code, JSON, a heading."""

URLS = (
    "postgres://app:{v}@db.internal:5432/app",
    "https://deploy:{v}@github.com/org/repo.git",
    "redis://:{v}@cache:6379/0",
    "mongodb+srv://admin:{v}@cluster0.example.net/test",
    "连接串postgresql://app:{v}@db/app请勿外传",
)
"""Credentials inside URLs."""


def cases() -> list[tuple[str, str]]:
    """Every (text, secret) pair: tokens × `BARE`, keys × `KEYED`, passwords × `URLS`."""
    out = [(form.format(t=token), token) for token in TOKENS.values() for form in BARE]
    values = iter(PASSWORDS * len(KEYS) * len(KEYED))
    out += [(form.format(k=key, v=(v := next(values))), v) for key in KEYS for form in KEYED]
    out += [(form.format(v=password), password) for password in PASSWORDS[:5] for form in URLS]
    return out


CASES = cases()
