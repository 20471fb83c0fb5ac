"""The one secret detector every string of a config goes through (docs/security.md
"Secrets in configs").

A config is public once its result is published, so a credential must never be in it. The
only way to pass one is by name: ``{secret: NAME}`` as a command argument, a launch argument
or an environment value; the runner host supplies the value of its own variable NAME.
Detection is defence in depth on top of that rule, not the rule itself:

1. every string is shell-split (``shlex``, with ``sh -c "…"`` payloads split again and
   ``;``/``&&``/``|`` separated), and the items of an argument list are read as one stream,
   so ``"--api-key X"`` in one item and ``["--api-key", "X"]`` are the same;
2. flag and variable spellings are normalised to name segments (``--authToken``,
   ``--auth_token``, ``AUTH-TOKEN`` and ``authtoken`` are all ``auth token``; ``-k`` is
   ``key``) and a name whose *last* segment is a credential word (``key``, ``token``,
   ``password``, …) carries a credential, unless the word before it says it is a size or a
   structure (``max-token``, ``cache-key``, ``eos-token``) or the name is a switch
   (``--enable-auth``): those name rules are ``agentperf.schema.secret_names``.
   ``--flag value``, ``--flag=value``, ``NAME=value`` (``env K=V cmd``, ``export``, a
   positional ``api_key=X``, a URL query ``?token=X``) and ``Name: value`` all pair a name
   with its value;
3. every token and every string goes through the `detect-secrets` plugins (keyword,
   high-entropy base64 and hex, basic-auth URLs, private keys and the known token formats)
   and this module's own rules where those fall short (each has a test in
   tests/submissions/test_secret_rules.py): more token prefixes, ``Basic``/``Bearer``
   header values, a password in a URL with an empty user or no scheme, base64 of a
   ``user:password`` pair, a hex key outside a revision/commit/digest context.

A finding is either a refusal (the config is refused with the field's dotted path; the
message names the field and the rule, never the value) or, below the refusal threshold,
*suspicious*: the review console highlights those before a reviewer publishes
(:func:`suspicious_strings`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import shlex
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agentperf.schema.secret_names import (
    SECRET_NAME_SEGMENTS,
    hex_context,
    looks_secret_name,
    name_segments,
    strong_name,
)

# The detector's public names, the name rules' included: callers import them from here.
__all__ = [
    "HEX_FIELDS", "REFUSE", "SECRET_NAME_SEGMENTS", "SUSPECT", "Finding", "clear_secrets",
    "credential_kind", "hide_credential_keys", "is_secret_ref", "key_carries_credential",
    "looks_secret_name", "name_segments", "normalized", "safe_label", "scan",
    "secret_flag_values", "shell_tokens", "suspicious_strings",
]  # fmt: skip

REFUSE = "refuse"
SUSPECT = "suspect"

# Values that name no credential: a placeholder, a switch state, a variable reference.
_PLACEHOLDERS = frozenset(
    {"", "none", "null", "empty", "dummy", "false", "true", "off", "on", "disabled", "no"}
)
_REFERENCE = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh"})
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}"
_ASSIGNMENT = re.compile(rf"^({_NAME})=(.*)$", re.DOTALL)
_QUERY_PARAM = re.compile(rf"[?&;]({_NAME})=([^&#\s]*)")
_COLON_PAIR = re.compile(rf"(?<![\w/.\-])({_NAME}):[ \t]*([^\s,;]+)")
_FLAG = re.compile(r"^(--?)([A-Za-z][A-Za-z0-9_.\-]*)(=(.*))?$", re.DOTALL)
# A next token that is itself an option, not a value given to the flag before it.
_OPTION_LIKE = re.compile(r"^(--[a-z][a-z0-9]*([-_][a-z0-9]+)*|-[a-z]{1,6}|-[A-Z])$")
# Fields whose value is by definition a digest or a revision (hex is expected there).
HEX_FIELDS = frozenset({"model.revision", "engine.commit", "engine.image"})

# --- own rules (each tested in tests/submissions/test_secret_rules.py) ----------------
_TOKEN_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])("
    r"sk-[A-Za-z0-9_\-]{16,}"  # OpenAI-style, Anthropic (sk-ant-…)
    r"|sk_(live|test)_[A-Za-z0-9]{16,}"
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|nvapi-[A-Za-z0-9_\-]{20,}"  # NVIDIA NGC / build.nvidia.com
    r"|gsk_[A-Za-z0-9]{20,}"  # Groq
    r"|pplx-[A-Za-z0-9]{20,}"  # Perplexity
    r"|xai-[A-Za-z0-9]{20,}"  # xAI
    r"|r8_[A-Za-z0-9]{20,}"  # Replicate
    r"|dapi[0-9a-f]{32}"  # Databricks
    r"|npm_[A-Za-z0-9]{30,}"  # npm
    r"|pypi-[A-Za-z0-9_\-]{40,}"  # PyPI
    r"|apf_[A-Za-z0-9_\-]{16,}"  # this platform's API tokens
    r"|aprun_[A-Za-z0-9_\-]{16,}"  # this platform's run tokens
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
    r")"
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY( BLOCK)?-----")
_AUTH_HEADER = re.compile(
    r"\b(Basic|Bearer|Token|Digest|ApiKey)\s{1,8}([A-Za-z0-9._~+/\-]{6,}=*)", re.IGNORECASE
)
_URL_PASSWORD = re.compile(
    r"[a-z][a-z0-9+.\-]{0,15}://[^/\s@:]{0,128}:([^/\s@]{1,256})@", re.IGNORECASE
)
_BARE_USERINFO = re.compile(
    r"(?<![\w.%+:/@\-])[\w.%+\-]{1,64}:([^\s@/:]{1,256})@[A-Za-z0-9\-]{1,63}"
    r"(\.[A-Za-z0-9\-]{1,63}){0,8}(?![\w@])"
)
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z])([0-9a-f]{32,}|[0-9A-F]{32,})(?![0-9A-Za-z])")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_\-])([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
_RANDOM_RUN = re.compile(r"(?<![A-Za-z0-9])([A-Za-z0-9+/_]{12,}={0,2})(?![A-Za-z0-9])")
# detect-secrets' base64 limit is 4.5 bits per character: a shorter string cannot reach it
B64_MIN_CHARS = 23
RANDOM_BITS_PER_CHAR = 3.7  # own rule: a 20+ character run of three classes above this
SUSPECT_BITS_PER_CHAR = 3.0  # below the refusal threshold: shown to the reviewer


@dataclass(frozen=True)
class Finding:
    """One thing the detector found in the string at `path`."""

    path: str
    severity: str  # REFUSE or SUSPECT
    rule: str  # what matched, in words (never the value)
    start: int = -1  # the span in the string at `path`, -1 when unknown
    end: int = -1

    def message(self) -> str:
        if self.severity == REFUSE:
            return (
                f"a credential in clear ({self.rule}): pass it by name as {{secret: NAME}} "
                "and set NAME on the runner host; a config is public; it was not stored"
            )
        return f"looks like it may hold a credential ({self.rule})"


def _harmless_value(value: str) -> bool:
    return value.strip().lower() in _PLACEHOLDERS or bool(_REFERENCE.match(value.strip()))


# --- shell splitting ---------------------------------------------------------------------


def shell_tokens(text: str, depth: int = 0) -> list[str]:
    """`text` as a shell would split it; ``sh -c PAYLOAD`` payloads split in place.

    Unbalanced quotes fall back to whitespace splitting (the detector never refuses a
    string for being unparseable shell)."""
    return list(_shell_tokens(text, depth))


@lru_cache(maxsize=4096)
def _shell_tokens(text: str, depth: int) -> tuple[str, ...]:
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError:
        tokens = text.split()
    if depth > 3:
        return tuple(tokens)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        out.append(token)
        shell = tokens[i - 1].rsplit("/", 1)[-1] if i else ""
        if shell in _SHELLS and re.fullmatch(r"-[a-z]*c[a-z]*", token) and i + 1 < len(tokens):
            out += _shell_tokens(tokens[i + 1], depth + 1)
            i += 2
            continue
        i += 1
    return tuple(out)


# --- value rules ---------------------------------------------------------------------------


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values()) if n else 0.0


def _classes(text: str) -> int:
    return sum(bool(re.search(p, text)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))


@lru_cache(maxsize=1)
def _plugins() -> tuple[list[Any], Any, Any, Any]:
    """detect-secrets' plugins: (known formats, keyword, base64 entropy, hex entropy)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.high_entropy_strings import (
        Base64HighEntropyString,
        HexHighEntropyString,
    )
    from detect_secrets.plugins.keyword import KeywordDetector

    skip = {
        "Secret Keyword",
        "Base64 High Entropy String",
        "Hex High Entropy String",
        "Public IP (ipv4)",  # an address is not a credential
    }
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    formats = [cls() for name, cls in plugins.items() if name not in skip]
    return formats, KeywordDetector(), Base64HighEntropyString(), HexHighEntropyString()


def _detect_secrets(line: str, filename: str = "config.yaml") -> Iterator[tuple[str, str]]:
    """(plugin's secret type, matched value) for each detect-secrets plugin that fires."""
    formats, keyword, _, _ = _plugins()
    for plugin in [*formats, keyword]:
        for found in plugin.analyze_line(filename=filename, line=line, line_number=1):
            yield found.type, str(found.secret_value or "")


def _wordlike(run: str) -> bool:
    """CamelCase words and numbers (``DeepseekV3ForCausalLM``), not random characters:
    its pieces (a capital and lower case letters, capitals, digits) average 3+ characters."""
    pieces = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", run)
    return bool(pieces) and len(run) / len(pieces) >= 3.0


def _b64_decodes_to_pair(token: str) -> bool:
    """Own rule: base64 of ``user:password`` (a Basic credential without its word)."""
    if len(token) % 4:
        return False
    try:
        decoded = base64.b64decode(token, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return (
        decoded.isprintable()
        and re.fullmatch(r"[^\s:]{1,64}:[^\s]{3,128}", decoded) is not None
        and len(decoded) >= 5
    )


@dataclass
class _Scan:
    findings: list[Finding] = field(default_factory=list)

    def add(self, path: str, severity: str, rule: str, span: tuple[int, int] = (-1, -1)) -> None:
        self.findings.append(Finding(path, severity, rule, span[0], span[1]))


def _span(text: str, part: str) -> tuple[int, int]:
    at = text.find(part) if part else -1
    return (at, at + len(part)) if at >= 0 else (-1, -1)


def _plugin_fires(plugin: Any, token: str) -> bool:
    """An entropy plugin reads quoted strings only: the token quoted, as one line."""
    line = '"' + token.replace('"', "") + '"'
    return bool(plugin.analyze_line(filename="config.yaml", line=line, line_number=1))


def _value_rules(scan: _Scan, path: str, text: str, hex_ok: bool) -> None:
    """The shape rules over one whole string (every token of it included)."""
    _, _, b64, hexp = _plugins()
    if _PRIVATE_KEY.search(text):
        scan.add(path, REFUSE, "a private key", _span(text, "-----BEGIN"))
    for match in _TOKEN_PREFIXES.finditer(text):
        scan.add(path, REFUSE, "a known token format", match.span())
    for match in _AUTH_HEADER.finditer(text):
        if not _harmless_value(match.group(2)):
            scan.add(path, REFUSE, f"an Authorization {match.group(1)} value", match.span(2))
    for match in _URL_PASSWORD.finditer(text):
        scan.add(path, REFUSE, "a password in a URL", match.span(1))
    for match in _BARE_USERINFO.finditer(text):
        scan.add(path, REFUSE, "a user:password@host", match.span(1))
    for match in _B64_RUN.finditer(text):
        if _b64_decodes_to_pair(match.group(1)):
            scan.add(path, REFUSE, "base64 of a user:password pair", match.span(1))
    for match in _HEX_RUN.finditer(text):
        run = match.group(1)
        before = text[: match.start()]
        in_context = (
            hex_ok
            or before.endswith(("sha256:", "sha1:", "@"))
            or re.search(r"/(commit|commits|tree|blob|pull|compare)/[^\s]*$", before)
            or re.search(
                r"\b(commit|revision|rev|sha|sha1|sha256|digest|hash)\b\W{0,3}$", before, re.I
            )
        )
        if not in_context and _plugin_fires(hexp, run):
            scan.add(path, REFUSE, "a hex key (detect-secrets: high-entropy hex)", match.span(1))
    for match in _RANDOM_RUN.finditer(text):
        run = match.group(1).rstrip("=")
        if _HEX_RUN.fullmatch(run):
            continue
        bits, classes = _entropy(run), _classes(run)
        if _wordlike(run):
            if classes == 3 and len(run) >= 20 and bits >= RANDOM_BITS_PER_CHAR:
                scan.add(path, SUSPECT, "a long mixed-case string", match.span(1))
        elif len(run) >= 20 and classes == 3 and bits >= RANDOM_BITS_PER_CHAR:
            scan.add(path, REFUSE, "a random-looking token", match.span(1))
        elif classes >= 2 and re.search(r"[0-9]", run) and bits >= SUSPECT_BITS_PER_CHAR:
            scan.add(path, SUSPECT, "a random-looking string", match.span(1))
    for kind, value in _detect_secrets(text):
        if value and _harmless_value(value):
            continue
        scan.add(path, REFUSE, f"detect-secrets: {kind}", _span(text, value))
    for token in {t.strip("'\"") for t in shell_tokens(text) if len(t) >= B64_MIN_CHARS}:
        if not _HEX_RUN.fullmatch(token) and _plugin_fires(b64, token):
            scan.add(path, REFUSE, "detect-secrets: high-entropy base64", _span(text, token))


def safe_label(name: str) -> str:
    """`name` for a message when it is a plain flag or variable name that carries nothing
    itself; else "a secret-looking name" (a message never repeats a credential)."""
    if not re.fullmatch(r"-{0,2}[A-Za-z0-9_.\-]{1,40}", name):
        return "a secret-looking name"
    probe = _Scan()
    _value_rules(probe, "", name, False)
    return "a secret-looking name" if probe.findings else name


def _pair_rule(
    scan: _Scan, path: str, text: str, name: str, value: str, *, via: str, strong: bool = False
) -> None:
    """A name that says "credential" with a clear value is refused; a placeholder or a
    ``${VAR}`` reference is suspicious at most."""
    secret = strong_name(name) if strong else looks_secret_name(name)
    if not secret:
        return
    label = safe_label(name)
    if _harmless_value(value):
        if value.strip():
            scan.add(path, SUSPECT, f"{label} {via} a placeholder", _span(text, value))
        return
    scan.add(path, REFUSE, f"{label} {via} a clear value", _span(text, value))


def _token_stream_rules(
    scan: _Scan, tokens: list[tuple[str, str | None, str]], hex_names: bool = True
) -> None:
    """Flag/value and NAME=value pairs over a stream of (path, token or None, item text).

    None stands for a ``{secret: …}`` item (a value given by name)."""
    for i, (path, token, text) in enumerate(tokens):
        if token is None:
            continue
        flag = _FLAG.match(token)
        if flag and not re.fullmatch(r"-?\d+(\.\d+)?", token):
            name = flag.group(1) + flag.group(2)
            if flag.group(3):
                _pair_rule(scan, path, text, name, flag.group(4), via="is given")
                continue
            if i + 1 < len(tokens) and looks_secret_name(name):
                npath, nxt, ntext = tokens[i + 1]
                if nxt is not None and not _OPTION_LIKE.match(nxt):
                    _pair_rule(scan, npath, ntext, name, nxt, via="is given")
            continue
        assignment = _ASSIGNMENT.match(token)
        if assignment:
            _pair_rule(scan, path, text, assignment.group(1), assignment.group(2), via="is set to")
        for match in _QUERY_PARAM.finditer(token):
            _pair_rule(scan, path, text, match.group(1), match.group(2), via="is set to")


# Characters a shell or an engine's argument parser would never read as ASCII dashes, but a
# reader of the published config does: each is read as "-" before the rules run, so
# `––api-key X` (en dashes) is a flag and its value a clear credential.
_DASHES = dict.fromkeys(
    map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"), "-"
)
JSON_MAX_CHARS = 100_000  # a JSON argument read for credentials: at most this long


def normalized(text: str) -> str:
    """`text` as the rules read it: NFKC (fullwidth forms to ASCII), look-alike dashes as
    "-", and invisible format characters (zero-width spaces and joiners, bidi marks: Unicode
    category Cf) removed, so none of them hides a flag or a name from the rules."""
    folded = unicodedata.normalize("NFKC", text).translate(_DASHES)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


def _json_inside(scan: _Scan, path: str, token: str) -> None:
    """A JSON object or array inside an argument (`--hf-overrides '{"token": "…"}'`,
    `--speculative-config={…}`): its keys and values walked as the config's own are, each
    finding reported at the argument's path."""
    body = token.strip().strip("'")
    if not body.startswith(("{", "[")) or len(body) > JSON_MAX_CHARS:
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    if not isinstance(parsed, dict | list):
        return
    inner = _Scan()
    _walk(inner, parsed, "", None)
    # refusals only: the shape rules already ran over the raw string, suspicious parts with
    # their own spans
    for f in inner.findings:
        if f.severity == REFUSE:
            scan.add(path, REFUSE, f"{f.rule} in its JSON", _span(token, body))


def _scan_string(scan: _Scan, path: str, text: str, key: str | None) -> None:
    text = normalized(text)
    hex_ok = path in HEX_FIELDS or hex_context(key)
    if key is not None and looks_secret_name(key) and not _harmless_value(text):
        scan.add(path, REFUSE, f"{safe_label(key)} is given a clear value", (0, len(text)))
    tokens = shell_tokens(text)
    _token_stream_rules(scan, [(path, t, text) for t in tokens])
    # the raw text, not its shell tokens (which drop JSON's quotes): the whole string, or
    # the value of `--flag=VALUE`
    flag = _FLAG.match(text.strip())
    _json_inside(scan, path, flag.group(4) if flag and flag.group(3) else text)
    for match in _COLON_PAIR.finditer(text):
        _pair_rule(scan, path, text, match.group(1), match.group(2), via="is given", strong=True)
    _value_rules(scan, path, text, hex_ok)
    if tokens and not hex_ok:
        # a revision flag's hex value ("--revision <sha>") is a revision, not a key
        for i, token in enumerate(tokens[:-1]):
            if _FLAG.match(token) and hex_context(token):
                _forgive_hex(scan, path, text, tokens[i + 1])


def _forgive_hex(scan: _Scan, path: str, text: str, value: str) -> None:
    span = _span(text, value)
    scan.findings[:] = [
        f
        for f in scan.findings
        if not (
            f.path == path and f.rule.startswith("a hex key") and span[0] <= f.start < span[1] + 1
        )
    ]


def is_secret_ref(value: Any) -> bool:
    """``{secret: NAME}``, or the long forms ``{secret: true}`` (an env value named by its
    variable) and ``{secret: true, name: NAME}`` (an argument)."""
    return isinstance(value, dict) and (
        value.get("secret") is True or isinstance(value.get("secret"), str)
    )


def _scan_list(scan: _Scan, path: str, items: list[Any], key: str | None) -> None:
    stream: list[tuple[str, str | None, str]] = []
    for index, item in enumerate(items):
        where = f"{path}.{index}" if path else str(index)
        if is_secret_ref(item):
            stream.append((where, None, ""))
        elif isinstance(item, str):
            stream += [(where, t, item) for t in shell_tokens(normalized(item))]
    _token_stream_rules(scan, stream)
    for index, item in enumerate(items):
        where = f"{path}.{index}" if path else str(index)
        if isinstance(item, str):
            inner = _Scan()
            _scan_string(inner, where, item, key)
            scan.findings += inner.findings
            # a revision flag in the previous item makes a hex item a revision
            prev = items[index - 1] if index else None
            if isinstance(prev, str) and _FLAG.match(prev) and hex_context(prev):
                _forgive_hex(scan, where, item, item)
        else:
            _walk(scan, item, where, None)


def _walk(scan: _Scan, value: Any, path: str, key: str | None) -> None:
    if is_secret_ref(value):
        # only a name is given; a name that is itself a credential is still refused
        for part in ("secret", "name"):
            if isinstance(value.get(part), str):
                _value_rules(scan, f"{path}.{part}", value[part], False)
        return
    if isinstance(value, dict):
        for i, (k, v) in enumerate(value.items()):
            child = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and key_carries_credential(k):
                # the path names the key by its position: it must not repeat the key
                hidden = f"{path}.[key {i + 1}]" if path else f"[key {i + 1}]"
                scan.add(hidden, REFUSE, "a field name carries a credential")
                continue
            _walk(scan, v, child, str(k))
        return
    if isinstance(value, list):
        _scan_list(scan, path, value, key)
        return
    if isinstance(value, str):
        _scan_string(scan, path, value, key)


def key_carries_credential(key: str) -> bool:
    """True when a mapping key is itself a credential (it is then never repeated)."""
    probe = _Scan()
    _value_rules(probe, "", key, False)
    return any(f.severity == REFUSE for f in probe.findings)


def hide_credential_keys(path: str) -> str:
    """A field path with each segment that is itself a credential replaced by ``[key]``
    (for error paths that come from elsewhere, e.g. the schema's)."""
    return ".".join("[key]" if key_carries_credential(p) else p for p in path.split("."))


def scan(data: Any, path: str = "") -> list[Finding]:
    """Every finding in `data`, refusals and suspicious strings, in document order."""
    result = _Scan()
    _walk(result, data, path, None)
    seen: set[tuple[str, str, str, int, int]] = set()
    out = []
    for f in result.findings:
        marker = (f.path, f.severity, f.rule, f.start, f.end)
        if marker not in seen:
            seen.add(marker)
            out.append(f)
    return out


def clear_secrets(data: Any, path: str = "") -> dict[str, list[str]]:
    """Every clear credential in `data`, by dotted field path (empty when there is none).
    One message per path: the first rule that refused it."""
    found: dict[str, list[str]] = {}
    for finding in scan(data, path):
        if finding.severity == REFUSE and (finding.path or "non_field_errors") not in found:
            found[finding.path or "non_field_errors"] = [finding.message()]
    return found


def credential_kind(text: str) -> str | None:
    """What kind of credential `text` carries in clear, or None."""
    for finding in scan({"value": text}):
        if finding.severity == REFUSE:
            return finding.rule
    return None


def secret_flag_values(items: list[Any]) -> list[int]:
    """Indexes of the items of an argument list that are a secret flag's clear value (or
    hold one): what a page shows redacted in a config stored before a rule existed."""
    out = set()
    for finding in scan({"items": items}):
        if finding.severity == REFUSE:
            _, _, index = finding.path.partition(".")
            if index.isdigit():
                out.add(int(index))
    return sorted(out)


def _lookup(data: Any, path: str) -> Any:
    node = data
    for part in path.split(".") if path else []:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def suspicious_strings(data: Any) -> list[dict[str, Any]]:
    """For the review console: each string the detector rated suspicious or worse, with
    the spans to highlight: ``[{path, text, rules, parts: [(text, marked)]}]``."""
    by_path: dict[str, list[Finding]] = {}
    for finding in scan(data):
        by_path.setdefault(finding.path, []).append(finding)
    out = []
    for path, findings in by_path.items():
        text = _lookup(data, path)
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        marks = [False] * len(text)
        for f in findings:
            if 0 <= f.start < f.end <= len(text):
                for i in range(f.start, f.end):
                    marks[i] = True
        if not any(marks):
            marks = [True] * len(text)
        parts: list[tuple[str, bool]] = []
        for ch, marked in zip(text, marks, strict=True):
            if parts and parts[-1][1] == marked:
                parts[-1] = (parts[-1][0] + ch, marked)
            else:
                parts.append((ch, marked))
        out.append(
            {
                "path": path,
                "text": text,
                "severity": REFUSE if any(f.severity == REFUSE for f in findings) else SUSPECT,
                "rules": sorted({f.rule for f in findings}),
                "parts": parts,
            }
        )
    return out
