"""Signed measurement receipts: in-toto Statements in DSSE envelopes, Ed25519 (DB-free).

What a receipt names, how it is signed and what it proves: docs/verification.md "Receipt".
The platform signs at publish (leaderboard/receipts.py); anyone checks with
``agentperf verify`` (agentperf_cli/verify.py), which imports only this module, so the
installed CLI needs neither Django nor the database.

A receipt folder (what ``agentperf verify RESULT_ID --keep DIR`` writes and
``agentperf verify --offline RECEIPT DIR`` reads) holds every file a subject names, by
its subject name: ``config.json``, ``figures.json``, ``verification.json``,
``inventory.json`` (each a canonical JSON document) and ``raw/<file>`` (each raw-record
file as stored). The image subject names no file: its digest is the one declared in the
config's ``engine.image``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://agentperf.dev/receipt/v1"
STATUS_PREDICATE_TYPE = "https://agentperf.dev/receipt-status/v1"

CONFIG = "config.json"
FIGURES = "figures.json"
VERIFICATION = "verification.json"
INVENTORY = "inventory.json"
RAW_PREFIX = "raw/"
IMAGE_PREFIX = "image:"
DOCUMENTS = (CONFIG, FIGURES, VERIFICATION, INVENTORY)

# A subject that is a file: a plain name, or raw/<plain name>; never "..", never absolute.
_FILE_NAME = re.compile(r"^(raw/)?[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


class ReceiptError(Exception):
    """A receipt that does not verify; ``name`` is the file (or part) that differs."""

    def __init__(self, message: str, *, name: str = "") -> None:
        super().__init__(message)
        self.name = name


# --- documents and digests -------------------------------------------------------------


def canonical_json(doc: Any) -> bytes:
    """The one byte form a document is hashed in: UTF-8 JSON, keys sorted, no spaces."""
    return json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_file_subject(name: str) -> bool:
    return bool(_FILE_NAME.match(name)) and ".." not in name


def image_digest(reference: str) -> str | None:
    """The hex sha256 of an image reference pinned by digest (name@sha256:<hex>), else None."""
    _, sep, digest = reference.rpartition("@sha256:")
    return digest if sep and _HEX64.match(digest) else None


def subject(name: str, sha256: str) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": sha256}}


def statement(subjects: list[dict[str, Any]], predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 of our receipt predicate type."""
    names = [s["name"] for s in subjects]
    if len(set(names)) != len(names):
        raise ValueError(f"subject names repeat: {names}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def status_statement(
    publication: Mapping[str, Any], predicate: Mapping[str, Any]
) -> dict[str, Any]:
    """A status Statement (superseded, invalidated) whose one subject is the publication
    receipt's payload: it says something about that receipt and changes nothing in it."""
    payload = _payload_bytes(publication)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [subject("receipt", sha256_hex(payload))],
        "predicateType": STATUS_PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


# --- keys ------------------------------------------------------------------------------


def key_id(public: bytes) -> str:
    """A key's id: the hex SHA-256 of its raw 32-byte Ed25519 public key."""
    return sha256_hex(public)


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_from_hex(text: str) -> bytes:
    """The raw public key a hex string names (64 hex digits), or ValueError."""
    value = text.strip().lower()
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise ValueError("not hex") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes (64 hex digits), got {len(raw)}")
    return raw


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey

    @property
    def public(self) -> bytes:
        return public_bytes(self.private.public_key())

    @property
    def keyid(self) -> str:
        return key_id(self.public)

    @classmethod
    def from_pem(cls, data: bytes) -> SigningKey:
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("not an Ed25519 private key")
        return cls(key)

    @classmethod
    def from_file(cls, path: Path) -> SigningKey:
        return cls.from_pem(path.read_bytes())

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    def pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def write(self, path: Path) -> None:
        """Write the key as PKCS#8 PEM, readable by its owner only; never over a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(self.pem())


def key_entry(public: bytes, *, status: str) -> dict[str, Any]:
    """One key of the published key list (/.well-known/agentperf-keys.json)."""
    return {
        "keyid": key_id(public),
        "keytype": "ed25519",
        "scheme": "ed25519",
        "keyval": {"public": public.hex()},
        "status": status,
    }


def keys_from_document(doc: Any) -> dict[str, bytes]:
    """{keyid: raw public key} from a key list document; a key whose id is not its
    digest is refused (a list cannot rename a key)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ReceiptError("the key list has no 'keys' array", name="keys")
    keys: dict[str, bytes] = {}
    for entry in doc["keys"]:
        try:
            raw = public_key_from_hex(str(entry["keyval"]["public"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReceiptError(f"a listed key is malformed: {exc}", name="keys") from None
        if entry.get("keyid") != key_id(raw):
            raise ReceiptError(
                f"listed key id {entry.get('keyid')!r} is not the SHA-256 of its key", name="keys"
            )
        keys[key_id(raw)] = raw
    return keys


# --- DSSE --------------------------------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(doc: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """A DSSE envelope of ``doc`` (an in-toto Statement) signed with ``key``."""
    payload = canonical_json(doc)
    signature = key.private.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(signature).decode("ascii")}],
    }


def _payload_bytes(envelope: Mapping[str, Any]) -> bytes:
    try:
        return base64.b64decode(str(envelope["payload"]), validate=True)
    except (KeyError, binascii.Error, ValueError):
        raise ReceiptError("the envelope has no base64 payload", name="receipt") from None


def open_envelope(
    envelope: Any, keys: Mapping[str, bytes], *, what: str = "receipt"
) -> tuple[dict[str, Any], str]:
    """(the Statement, the key id that signed it) when a listed key's signature verifies;
    ReceiptError otherwise."""
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise ReceiptError(f"{what}: not a DSSE envelope of an in-toto Statement", name=what)
    payload = _payload_bytes(envelope)
    message = pae(PAYLOAD_TYPE, payload)
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise ReceiptError(f"{what}: the envelope has no signature", name=what)
    seen: list[str] = []
    for entry in signatures:
        keyid = str(entry.get("keyid", "")) if isinstance(entry, dict) else ""
        seen.append(keyid[:16] or "?")
        raw = keys.get(keyid)
        if raw is None:
            continue
        try:
            sig = base64.b64decode(str(entry.get("sig", "")), validate=True)
            Ed25519PublicKey.from_public_bytes(raw).verify(sig, message)
        except (InvalidSignature, binascii.Error, ValueError):
            raise ReceiptError(
                f"{what}: the signature of key {keyid[:16]}… does not verify", name=what
            ) from None
        try:
            doc = json.loads(payload)
        except ValueError:
            raise ReceiptError(f"{what}: the payload is not JSON", name=what) from None
        if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
            raise ReceiptError(f"{what}: the payload is not an in-toto Statement v1", name=what)
        return doc, keyid
    raise ReceiptError(
        f"{what}: signed by key {', '.join(seen)}, which is not in the key list", name=what
    )


# --- checking a receipt folder ------------------------------------------------------------


# Only the config may be withheld, and only once a signed status statement says the result
# is one of these (docs/security.md "Secrets in configs"); any other gap fails the check.
WITHHOLDING_STATUSES = ("invalidated", "withdrawn")
WITHHOLDABLE = (CONFIG,)


@dataclass(frozen=True)
class Checked:
    """What a verified receipt says (docs/verification.md "Receipt")."""

    statement: dict[str, Any]
    keyid: str
    files: list[str]
    status: str
    status_reason: str
    status_keyid: str
    # {name: why} of files absent from the folder that a signed status statement withholds
    withheld: dict[str, str]
    # {name: why} of documents checked against a signed status statement's digest instead of
    # the receipt's: the config a reviewer redacted after publication
    redacted: dict[str, str] = field(default_factory=dict)
    # when the status statement was signed ("" without one): the status is as of then
    status_at: str = ""


@dataclass(frozen=True)
class _Status:
    status: str = "published"
    reason: str = ""
    keyid: str = ""
    at: str = ""
    redaction: tuple[str, str] | None = None  # (config sha256, why)
    withheld: dict[str, str] = field(default_factory=dict)  # {name: why}, as signed


def check(
    envelope: Any, folder: Path, keys: Mapping[str, bytes], *, status_envelope: Any = None
) -> Checked:
    """Verify ``envelope`` with ``keys`` and recompute every subject's digest from
    ``folder``; ReceiptError naming the first file that is missing or differs.

    A file may be absent only when a status statement signed by a listed key about this
    receipt withholds it (the config of an invalidated or withdrawn result); it is then
    reported as not checked. What an unsigned wrapper says is withheld counts for nothing.
    """
    not_checked: dict[str, str] = {}
    doc, keyid = open_envelope(envelope, keys)
    said = _status(envelope, status_envelope, keys)
    redacted: dict[str, str] = {}
    if doc.get("predicateType") != PREDICATE_TYPE:
        raise ReceiptError(
            f"receipt: predicate type {doc.get('predicateType')!r}, not {PREDICATE_TYPE}",
            name="receipt",
        )
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise ReceiptError("receipt: the Statement names no subject", name="receipt")
    files: list[str] = []
    images: list[tuple[str, str]] = []
    for entry in subjects:
        name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        expected = str(((entry or {}).get("digest") or {}).get("sha256", ""))
        if name.startswith(IMAGE_PREFIX):
            images.append((name, expected))
            continue
        if not is_file_subject(name):
            raise ReceiptError(f"receipt: subject name {name!r} is not a file name", name=name)
        path = folder / PurePosixPath(name)
        if not path.is_file() and name in said.withheld:
            not_checked[name] = said.withheld[name]
            continue
        if not path.is_file():
            raise ReceiptError(
                f"{name}: missing from {folder}, and no signed statement withholds it",
                name=name,
            )
        actual = sha256_file(path)
        if name == CONFIG and said.redaction is not None:
            # the receipt signed the config as published; the status statement signs the
            # config a reviewer redacted since, which is what the platform serves now
            expected = said.redaction[0]
            redacted[name] = said.redaction[1]
        if actual != expected:
            raise ReceiptError(
                f"{name}: sha256 {actual} differs from the receipt's {expected}", name=name
            )
        files.append(name)
    for name, expected in images:
        _check_image(
            folder,
            name,
            expected,
            config_withheld=CONFIG in not_checked,
            config_redacted=CONFIG in redacted,
        )
    return Checked(
        doc,
        keyid,
        files,
        said.status,
        said.reason,
        said.keyid,
        not_checked,
        redacted,
        said.at,
    )


def _status(envelope: Any, status_envelope: Any, keys: Mapping[str, bytes]) -> _Status:
    """What the status statement about ``envelope`` signs; "published" without one."""
    if not status_envelope:
        return _Status()
    said, status_keyid = open_envelope(status_envelope, keys, what="status receipt")
    if said.get("predicateType") != STATUS_PREDICATE_TYPE:
        raise ReceiptError("status receipt: wrong predicate type", name="status receipt")
    target = sha256_hex(_payload_bytes(envelope))
    names = [s.get("digest", {}).get("sha256") for s in said.get("subject") or []]
    if target not in names:
        raise ReceiptError(
            "status receipt: it is about another receipt (subject digest differs)",
            name="status receipt",
        )
    predicate = said.get("predicate") or {}
    status = str(predicate.get("status", "?"))
    redaction = None
    redacted = predicate.get("config_redacted")
    if isinstance(redacted, dict) and isinstance(redacted.get("sha256"), str):
        paths = ", ".join(str(p) for p in redacted.get("paths") or [])
        redaction = (
            redacted["sha256"],
            f"redacted by a reviewer after publication ({paths}): checked against the "
            "signed status statement's digest",
        )
    return _Status(
        status=status,
        reason=str(predicate.get("reason", "")),
        keyid=status_keyid,
        at=str(predicate.get("at", "")),
        redaction=redaction,
        withheld=_signed_withheld(predicate, status),
    )


def _signed_withheld(predicate: Mapping[str, Any], status: str) -> dict[str, str]:
    """{name: why} a status statement withholds. Only the config, only for an invalidated or
    withdrawn result: a statement that withholds anything else is refused even though
    signed. A statement signed before statements named what they withhold (no
    ``withheld`` key) withholds the config of an invalidated or withdrawn result, the rule
    the platform followed then."""
    if "withheld" not in predicate:
        if status in WITHHOLDING_STATUSES:
            return {CONFIG: f"the result is {status}: its config is no longer published"}
        return {}
    withheld = predicate["withheld"]
    if not isinstance(withheld, dict):
        raise ReceiptError("status receipt: 'withheld' is not a mapping", name="status receipt")
    for name in withheld:
        if name not in WITHHOLDABLE or status not in WITHHOLDING_STATUSES:
            raise ReceiptError(
                f"status receipt: withholds {name} of a {status} result; only the config of "
                f"an invalidated or withdrawn result may be withheld",
                name=str(name),
            )
    return {str(name): str(why) for name, why in withheld.items()}


def _check_image(
    folder: Path, name: str, expected: str, *, config_withheld: bool, config_redacted: bool
) -> None:
    """The image subject is the digest the config declares: it must be that digest. A config
    a reviewer redacted since may no longer name it; the signed subject then stands alone."""
    reference = name[len(IMAGE_PREFIX) :]
    if image_digest(reference) != expected:
        raise ReceiptError(f"{name}: the subject digest is not the reference's", name=name)
    if config_withheld:
        return
    path = folder / CONFIG
    if not path.is_file():
        raise ReceiptError(f"{CONFIG}: missing from {folder}", name=CONFIG)
    try:
        config = json.loads(path.read_bytes())
        declared = str(config["engine"]["image"])
    except (ValueError, KeyError, TypeError):
        raise ReceiptError(f"{CONFIG}: no engine.image to match {name}", name=CONFIG) from None
    if declared != reference and not config_redacted:
        raise ReceiptError(f"{name}: the config declares engine.image {declared!r}", name=CONFIG)
