"""Keys to users for a litellm proxy without a key database: ``custom_auth`` in config.yaml.

The proxy's virtual keys need its Prisma database. A team that only wants "each person has a
key, and the harness keeps each person's sessions apart" can map keys to user ids here;
the hook files every session under the user id this returns, so one key never reaches
another key's sessions. The map comes from ``HARNESS_PROXY_KEYS``: ``key=user`` pairs
separated by commas (``sk-alice-1=alice,sk-bob-1=bob``). Replace it with your own lookup
(an SSO header, a file, a secret manager) — the contract is one async function.
"""

from __future__ import annotations

import hmac
import os

from fastapi import Request
from litellm.proxy._types import ProxyErrorTypes, ProxyException, UserAPIKeyAuth

KEYS_VARIABLE = "HARNESS_PROXY_KEYS"
"""The environment variable holding the ``key=user`` pairs."""


def _keys() -> dict[str, str]:
    pairs = (p.strip() for p in os.environ.get(KEYS_VARIABLE, "").split(","))
    found = dict(p.split("=", 1) for p in pairs if "=" in p)
    return {
        key.strip(): user.strip() for key, user in found.items() if key.strip() and user.strip()
    }


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    """Return the auth of ``api_key`` with its user id; refuse a key that is not listed.

    Raises:
        ProxyException: the key is not in ``HARNESS_PROXY_KEYS`` (the proxy answers 401).
    """
    key = api_key.removeprefix("Bearer ").strip()
    for known, user in _keys().items():
        if hmac.compare_digest(known.encode(), key.encode()):
            return UserAPIKeyAuth(api_key=key, user_id=user)
    raise ProxyException(
        message=f"unknown API key; add it to {KEYS_VARIABLE} as key=user",
        type=ProxyErrorTypes.auth_error,
        param="api_key",
        code=401,
    )
