"""`agentperf verify`: check a published result's signed measurement receipt.

``agentperf verify RESULT_ID`` downloads the receipt, the key list, the documents and every
raw-record file through the public API into a folder (``--keep DIR``, else a temporary
one), then checks it exactly as ``agentperf verify --offline RECEIPT DIR`` does: the DSSE
signature with a listed key, and the SHA-256 of every subject recomputed from the files.
Anything that differs exits 1 naming the file. docs/verification.md "Receipt".

Only agentperf.receipt is imported (no Django, no database).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

from agentperf import receipt as rc
from agentperf_cli.client import USER_AGENT, Api
from agentperf_cli.settings import CliError, resolve

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2
RECEIPT_FILE = "receipt.json"
KEYS_FILE = "keys.json"
CHUNK = 1 << 20


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise CliError(f"{what} {path} is not JSON") from None


def envelopes(doc: Any) -> tuple[Any, Any]:
    """(receipt envelope, status envelope or None) from a receipt file or a bare envelope.
    The file's other fields (result_id, status, withheld) are unsigned: `check_folder`
    holds result_id and status to the signed statements and ignores withheld."""
    if isinstance(doc, dict) and "payloadType" in doc:
        return doc, None
    if isinstance(doc, dict) and doc.get("receipt"):
        return doc["receipt"], doc.get("status_receipt") or None
    raise CliError("the receipt file holds no receipt envelope", exit_code=EXIT_FAILED)


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect may lead to another http(s) URL only (urllib would follow ftp too)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise urllib.error.URLError(f"a redirect to {newurl!r}, not an http(s) URL")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


# no file:, ftp: or data: handler: the server names these URLs, and it may be hostile
_OPENER = urllib.request.OpenerDirector()
for _handler in (
    urllib.request.ProxyHandler(),
    urllib.request.HTTPHandler(),
    urllib.request.HTTPSHandler(),
    urllib.request.UnknownHandler(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPErrorProcessor(),
    _HttpOnlyRedirects(),
):
    _OPENER.add_handler(_handler)


def _download(url: str, target: Path) -> None:
    """A raw file the server names, from an http(s) URL only: never file:// (a hostile
    server would have a local file copied into the receipt folder) nor any other scheme."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CliError(
            f"the server named {url!r} for {target.name}: not an http(s) URL",
            exit_code=EXIT_FAILED,
        )
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with _OPENER.open(request, timeout=60) as response, target.open("wb") as fh:
            while chunk := response.read(CHUNK):
                fh.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise CliError(
            f"download of {target.name} failed: {reason}", exit_code=EXIT_FAILED
        ) from None


def fetch(result_id: int, url: str | None, folder: Path) -> None:
    """Write the receipt folder of a result from the public API."""
    api = Api(resolve(url), need_token=False)
    bundle = api.get(f"public/results/{result_id}/receipt/")
    if not bundle.get("receipt"):
        reason = bundle.get("unsigned_reason") or "no receipt"
        raise CliError(f"result {result_id} has no receipt: {reason}", exit_code=EXIT_FAILED)
    folder.mkdir(parents=True, exist_ok=True)
    fields = ("result_id", "status", "receipt", "status_receipt", "withheld")
    receipt_doc = {k: bundle.get(k) for k in fields}
    (folder / RECEIPT_FILE).write_text(json.dumps(receipt_doc, indent=2))
    (folder / KEYS_FILE).write_text(json.dumps(api.get("public/keys/"), indent=2))
    for name, doc in (bundle.get("documents") or {}).items():
        path = _subject_path(folder, str(name))
        path.write_bytes(rc.canonical_json(doc))
    for entry in bundle.get("raw_records") or []:
        path = _subject_path(folder, str(entry.get("name", "")))
        path.parent.mkdir(parents=True, exist_ok=True)
        _download(str(entry["url"]), path)


def _subject_path(folder: Path, name: str) -> Path:
    """Where a named file goes; a name that could leave the folder is refused."""
    if not rc.is_file_subject(name):
        raise CliError(f"the server named a file {name!r}, not a plain file name", exit_code=1)
    return folder / PurePosixPath(name)


def check_folder(
    receipt_path: Path, folder: Path, keys_path: Path | None, *, result_id: int | None = None
) -> rc.Checked:
    """Check the receipt folder; ``result_id``: the result asked for (online), which the
    signed statement must name."""
    wrapper = _read_json(receipt_path, "receipt")
    envelope, status_envelope = envelopes(wrapper)
    if keys_path is None and result_id is None:
        # offline, the folder's own keys.json is whoever wrote the folder's: a receipt forged
        # with another key would verify against the key list written beside it
        raise CliError(
            "offline, pass --keys FILE: a key list you trust (the platform's "
            "/.well-known/agentperf-keys.json), not the folder's own keys.json"
        )
    keys_path = keys_path or folder / KEYS_FILE
    if not keys_path.is_file():
        raise CliError(
            f"no key list: pass --keys FILE (the platform's /.well-known/agentperf-keys.json); "
            f"{keys_path} does not exist"
        )
    keys = rc.keys_from_document(_read_json(keys_path, "key list"))
    if not folder.is_dir():
        raise CliError(f"{folder} is not a folder")
    checked = rc.check(envelope, folder, keys, status_envelope=status_envelope)
    _agrees(checked, wrapper if isinstance(wrapper, dict) else {}, result_id)
    return checked


def _agrees(checked: rc.Checked, wrapper: dict[str, Any], result_id: int | None) -> None:
    """The result asked for, and the receipt file's result id and status, must be what the
    signed statements say: another result's receipt, or a status with no signed statement
    behind it (a receipt replayed after invalidation, served as the current one), fails."""
    signed = ((checked.statement.get("predicate") or {}).get("result") or {}).get("id")
    if result_id is not None and signed != result_id:
        raise rc.ReceiptError(
            f"receipt: the platform served the receipt of result {signed} for result {result_id}",
            name="receipt",
        )
    said = wrapper.get("result_id")
    if said is not None and said != signed:
        raise rc.ReceiptError(
            f"{RECEIPT_FILE}: names result {said}, the signed statement result {signed}",
            name=RECEIPT_FILE,
        )
    status = wrapper.get("status")
    if status is not None and status != checked.status:
        raise rc.ReceiptError(
            f"{RECEIPT_FILE}: says the result is {status}, but the signed statements say "
            f"{checked.status}",
            name=RECEIPT_FILE,
        )


def cmd_verify(args: argparse.Namespace, out: Any, err: Any) -> int:
    keys_path = Path(args.keys) if args.keys else None
    temp: Path | None = None
    result_id: int | None = None  # the result asked for online; offline, none
    try:
        if args.offline:
            if len(args.target) != 2:
                raise CliError("--offline takes RECEIPT RAW_DIR")
            receipt_path, folder = Path(args.target[0]), Path(args.target[1])
        else:
            if len(args.target) != 1 or not args.target[0].isdigit():
                raise CliError("give one RESULT_ID (or --offline RECEIPT RAW_DIR)")
            if args.keep:
                folder = Path(args.keep)
            else:
                temp = Path(tempfile.mkdtemp(prefix="agentperf-verify-"))
                folder = temp
            result_id = int(args.target[0])
            fetch(result_id, args.url, folder)
            receipt_path = folder / RECEIPT_FILE
        try:
            checked = check_folder(receipt_path, folder, keys_path, result_id=result_id)
        except rc.ReceiptError as exc:
            err.print(f"FAILED: {exc}", style="bold red", soft_wrap=True)
            if exc.name:
                err.print(f"file: {exc.name}", soft_wrap=True)
            return EXIT_FAILED
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    predicate = checked.statement.get("predicate") or {}
    result = predicate.get("result") or {}
    out.print(
        f"receipt of result {result.get('id')} verifies: signed by key {checked.keyid}",
        soft_wrap=True,
    )
    for name in checked.files:
        note = f": {checked.redacted[name]}" if name in checked.redacted else ""
        out.print(f"  ok  {name}{note}", soft_wrap=True)
    for name, why in checked.withheld.items():
        out.print(
            f"  NOT CHECKED  {name}: withheld, as the signed status statement says ({why})",
            soft_wrap=True,
        )
    image = predicate.get("image") or {}
    if image.get("reference"):
        out.print(f"  image: {image['reference']} ({image.get('status', '?')})", soft_wrap=True)
    else:
        out.print("  image: none declared", soft_wrap=True)
    verification = predicate.get("verification") or {}
    if verification.get("recorded") is False:
        out.print(
            f"  verification: not recorded ({verification.get('reason', '')})", soft_wrap=True
        )
    inventory = predicate.get("inventory") or {}
    if inventory.get("recorded") is False:
        out.print(f"  inventory: not recorded ({inventory.get('reason', '')})", soft_wrap=True)
    if checked.status != "published":
        out.print(
            f"status: {checked.status.upper()} ({checked.status_reason}); the status statement "
            f"is signed by key {checked.status_keyid}",
            soft_wrap=True,
        )
    else:
        out.print("status: published", soft_wrap=True)
    if args.offline:
        # nothing signed expires: a folder kept before a later status statement still
        # verifies as it was; only the platform serves the status as it is now
        as_of = f" as of {checked.status_at}" if checked.status_at else ""
        out.print(
            f"  (offline: the status{as_of} as the folder holds it; `agentperf verify "
            f"{(predicate.get('result') or {}).get('id')}` asks the platform for a later one)",
            soft_wrap=True,
        )
    if args.keep and not args.offline:
        out.print(f"files kept in {folder}", soft_wrap=True)
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "verify",
        parents=[common],
        help="check a result's signed receipt against its raw data",
        description="agentperf verify RESULT_ID | agentperf verify --offline RECEIPT RAW_DIR",
    )
    p.add_argument("target", nargs="+", help="RESULT_ID, or with --offline: RECEIPT RAW_DIR")
    p.add_argument("--offline", action="store_true", help="check files already on disk")
    p.add_argument(
        "--keys",
        help="key list file you trust (online default: the API's; offline: required)",
    )
    p.add_argument("--keep", help="download into this folder and keep it")
    return p
