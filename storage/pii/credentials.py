"""Secrets: API keys with well-known prefixes, JWTs, PEM private keys, passwords in URLs.

Entity names: ``API_KEY``, ``JWT``, ``PRIVATE_KEY``, ``PASSWORD``. Prefixes follow the
providers' published token formats (OpenAI ``sk-``, Anthropic ``sk-ant-``, GitHub ``ghp_``
and ``github_pat_``, GitLab ``glpat-``, Slack ``xox?-``, AWS access key ids ``AKIA``,
Google ``AIza``, Stripe ``sk_live_``, Hugging Face ``hf_``, npm, PyPI, SendGrid, Shopify,
DigitalOcean, Groq, Replicate, ...); tool-call ids such as ``call_abc123`` or ``toolu_01..``
match none of them. Every pattern starts at a literal prefix behind a negative lookbehind
and consumes its body possessively, so matching stays linear.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from storage.pii.protected import TextView

__all__ = ["find_api_keys", "find_jwts", "find_private_keys", "find_url_passwords"]

_API_KEY_RE: Final = re.compile(
    r"""
    (?=[AGSdghnprsx])(?<![\w\-])
    (?:sk-(?:proj-|ant-(?:api\d\d-)?|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}+
      |(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}+
      |gh[pousr]_[A-Za-z0-9]{30,}+
      |github_pat_[A-Za-z0-9_]{40,}+
      |glpat-[A-Za-z0-9_\-]{20,}+
      |xox[abeoprs]-[A-Za-z0-9\-]{10,}+
      |xapp-[A-Za-z0-9\-]{10,}+
      |(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}
      |AIza[0-9A-Za-z_\-]{35}
      |hf_[A-Za-z0-9]{30,}+
      |npm_[A-Za-z0-9]{36}
      |pypi-[A-Za-z0-9_\-]{50,}+
      |SG\.[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+
      |shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}
      |dop_v1_[a-f0-9]{64}
      |gsk_[A-Za-z0-9]{40,}+
      |r8_[A-Za-z0-9]{30,}+
      |(?:pplx|xai)-[A-Za-z0-9]{40,}+
    )
    (?![\w\-])
    """,
    re.VERBOSE,
)
_QUERY_TOKEN_RE: Final = re.compile(
    r"[?&](?i:access_token|api_key|apikey|token|secret|client_secret)=([^&\s#]++)"
)
_JWT_RE: Final = re.compile(
    r"(?<![\w\-])eyJ[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]*+"
)
_PEM_RE: Final = re.compile(
    r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----(?:[A-Za-z0-9+/=\s:,.]|-(?!----))*+"
    r"(?:-----END[A-Z ]{0,40}PRIVATE KEY-----)?"
)
_URL_PASSWORD_RE: Final = re.compile(r"(?<=://)[^\s:/@?#]*+:([^\s/?#]+)@")
_QUERY_PASSWORD_RE: Final = re.compile(r"[?&](?i:password|passwd|pwd|pass)=([^&\s#]++)")


def find_api_keys(view: TextView) -> Iterator[tuple[int, int]]:
    """API keys and tokens with a known prefix, and ``token=``/``api_key=`` URL parameters."""
    text = view.text
    for m in _API_KEY_RE.finditer(text):
        yield m.span()
    if "=" in text:
        for m in _QUERY_TOKEN_RE.finditer(text):
            yield m.span(1)


def find_jwts(view: TextView) -> Iterator[tuple[int, int]]:
    """JSON Web Tokens: two base64url segments that decode to JSON objects, and a signature."""
    if "eyJ" in view.text:
        for m in _JWT_RE.finditer(view.text):
            yield m.span()


def find_private_keys(view: TextView) -> Iterator[tuple[int, int]]:
    """PEM private-key blocks, from ``-----BEGIN ... PRIVATE KEY-----`` through the END line
    (or through the end of the base64 body when the block is cut off)."""
    if "PRIVATE KEY-----" in view.text:
        for m in _PEM_RE.finditer(view.text):
            yield m.span()


def find_url_passwords(view: TextView) -> Iterator[tuple[int, int]]:
    """The password of ``scheme://user:password@host`` and of ``?password=`` parameters
    (only the password: the user and host stay readable)."""
    text = view.text
    if "://" in text:
        for m in _URL_PASSWORD_RE.finditer(text):
            yield m.span(1)
    if "=" in text:
        for m in _QUERY_PASSWORD_RE.finditer(text):
            yield m.span(1)
