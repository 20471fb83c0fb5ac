"""Security headers on every public page (issue 24 finding 8; docs/security.md "Headers"):
a Content-Security-Policy whose scripts come from this site or carry the response's
nonce, no inline script without it, Secure cookies and HSTS in the services profile."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from demo.synthetic import make_published_result

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
# What anyone may read without signing in: the leaderboard's pages and answers, the
# ladders' public pages, the embeds and images, the API's docs and the login page.
PUBLIC = re.compile(
    r"^($|models/|hardware/|results/|compare/|history/|methodology/|data/|ladders/|"
    r"api/v1/public/|api/v1/schema/|api/schema|api/docs/|llms\.txt|\.well-known/|embed/|"
    r"accounts/login/)"
)
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)([^>]*)>", re.IGNORECASE)
DATA_TYPES = ("application/json", "application/ld+json")


def _routes(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        elif isinstance(entry, URLPattern) and not route.startswith("^"):
            yield route, entry.name


def _public_paths(values: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for route, name in _routes(get_resolver()):
        if PUBLIC.match(route):
            path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m[1], "1"), route)
            out.append((path, name or ""))
    return out


def _directives(header: str) -> dict[str, list[str]]:
    parts = (p.strip().split() for p in header.split(";") if p.strip())
    return {p[0]: p[1:] for p in parts}


def _script_problems(html: str, nonce: str | None) -> list[str]:
    """Inline scripts a browser would run without the response's nonce."""
    problems = []
    for match in INLINE_SCRIPT.finditer(html):
        attrs = match.group(1)
        kind = re.search(r'type="([^"]+)"', attrs)
        if kind and kind.group(1) in DATA_TYPES:
            continue  # a data block: never executed
        if nonce is None or f'nonce="{nonce}"' not in attrs:
            problems.append(match.group(0))
    if re.search(r"\son[a-z]+\s*=", html.split("<body", 1)[-1]):
        problems.append("an inline event handler (on...=)")
    return problems


def test_every_public_page_sends_a_strict_policy_and_no_unlisted_inline_script(client):
    result = make_published_result()
    values = {
        "slug": result.model.slug,
        "model_slug": result.model.slug,
        "hardware_slug": result.hardware.slug,
        "pk": str(result.pk),
        "fmt": "svg",
        "name": "manifest.json",
    }
    client.raise_request_exception = False
    checked, pages, wrong = 0, 0, []
    for path, name in _public_paths(values):
        response = client.get(path, secure=True)
        checked += 1
        header = response.get("Content-Security-Policy", "")
        policy = _directives(header)
        script = policy.get("script-src", policy.get("default-src", []))
        problems = []
        if not header:
            problems.append("no Content-Security-Policy")
        if "'unsafe-inline'" in script or "'unsafe-eval'" in script or "*" in script:
            problems.append(f"script-src {script}")
        objects = policy.get("object-src", policy.get("default-src"))
        if objects not in (["'none'"], ["'self'"]):
            problems.append(f"object-src {objects}")
        framed = name == "embed-model"  # the one page other sites may frame
        if policy.get("frame-ancestors") != (["*"] if framed else ["'none'"]):
            problems.append(f"frame-ancestors {policy.get('frame-ancestors')}")
        if response.get("X-Content-Type-Options") != "nosniff":
            problems.append("no nosniff")
        if "max-age=" not in response.get("Strict-Transport-Security", ""):
            problems.append("no HSTS")
        if response.get("Content-Type", "").startswith("text/html"):
            pages += response.status_code == 200
            nonces = [v[7:-1] for v in script if v.startswith("'nonce-")]
            html = response.content.decode()
            problems += _script_problems(html, nonces[0] if nonces else None)
        if problems:
            wrong.append(f"{path} ({name}) {response.status_code}: {problems}")
    assert not wrong, "\n".join(wrong)
    assert checked > 25 and pages >= 10
    # a repeated anonymous read is answered from the shared cache: the policy is still sent
    for _ in range(2):
        assert "script-src 'self'" in client.get("/", secure=True)["Content-Security-Policy"]


def test_the_login_page_and_a_session_set_secure_http_only_cookies(client, cast):
    page = client.get("/accounts/login/", secure=True)
    csrf = page.cookies["csrftoken"]
    assert csrf["secure"] is True
    token = csrf.value
    response = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "alice-password-123", "csrfmiddlewaretoken": token},
        secure=True,
    )
    assert response.status_code == 302
    session = response.cookies["sessionid"]
    assert session["secure"] is True and session["httponly"] is True


@pytest.mark.parametrize(
    ("env", "secure", "hsts"),
    [
        ({"DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/x"}, True, 31536000),
        ({"DATABASE_URL": "sqlite:///tmp/x.sqlite3"}, False, 0),
        ({"DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/x", "HTTPS": "false"}, False, 0),
        ({"DATABASE_URL": "sqlite:///tmp/x.sqlite3", "HTTPS": "true"}, True, 31536000),
    ],
)
def test_secure_cookies_and_hsts_follow_the_profile(env, secure, hsts, tmp_path):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "HTTPS")}
    clean.update(env, DJANGO_SETTINGS_MODULE="config.settings", AGENTPERF_VAR_DIR=str(tmp_path))
    code = (
        "import json; from django.conf import settings as s; print(json.dumps("
        "[s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=clean, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [secure, secure, hsts]
