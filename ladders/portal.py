"""The vendor portal's ladder pages (docs/ladders.md "Submitting (portal)"): the form, the
organization's ladders, and one ladder with each rung's submission.

They live here, not in portal/web/, because ladders sit above the vendor app in the
layers (docs/architecture.md); the portal's rules are portal.web's own: login required,
the organization from ``portal_org`` (another organization's ladder is a 404), CSRF on the
form. The body goes through the API's service (``ladders.services.ladder_create``), so the
rules and the field paths are the API's; the text is read by the deployment config's
reader (``load_document``: the size limit, strict YAML or JSON), and its errors are shown
beside their lines as the submit form shows a config's (portal.web.annotate).
"""

from __future__ import annotations

import datetime
import re
from math import ceil
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from agentperf.fielderrors import NON_FIELD
from agentperf.ladder.report import ORDER_TITLES
from ladders.forms import LadderForm
from ladders.models import Ladder
from ladders.services import LadderError, ladder_create
from portal.api.access import submit_allowed
from portal.web.annotate import annotate
from portal.web.views import portal_org
from submissions.models import Organization
from submissions.schema import ConfigError, load_document

# One submit per rendered form (a double click or a browser retry): the form's key is
# claimed in the cache before the ladder is created, and then names it.
FORM_KEY = re.compile(r"[0-9a-f]{32}")
FORM_KEY_TTL_S = 24 * 3600
_RUNG = re.compile(r"rungs\.(\d+)(?:\.|$)")


def _json_value(value: Any, path: str = "") -> Any:
    """The YAML document as the API's JSON body would carry it: dates as ISO text, keys as
    text; a value JSON has no form for (a YAML set, binary) is an error naming its path."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            where = f"{path}.{name}" if path else name
            if name in out:
                raise LadderError(f"{where}: duplicate key", fields={where: ["duplicate key"]})
            out[name] = _json_value(item, where)
        return out
    if isinstance(value, list):
        return [
            _json_value(item, f"{path}.{i}" if path else str(i)) for i, item in enumerate(value)
        ]
    if isinstance(value, datetime.date):  # datetime too
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    message = f"not a JSON value (YAML {type(value).__name__})"
    raise LadderError(f"{path or NON_FIELD}: {message}", fields={path or NON_FIELD: [message]})


def _rung_name(path: str, body: Any) -> str:
    """The name of the change ``rungs.i`` a path points into, when the body gives one."""
    match = _RUNG.match(path)
    rungs = body.get("rungs") if isinstance(body, dict) else None
    if match is None or not isinstance(rungs, list) or int(match[1]) >= len(rungs):
        return ""
    rung = rungs[int(match[1])]
    name = rung.get("name") if isinstance(rung, dict) else None
    return name.strip() if isinstance(name, str) else ""


def _annotated(text: str, fields: dict[str, list[str]], body: Any):
    """The body's lines with each error at its field (the API's paths are the text's:
    agentperf.fielderrors); each error keeps its path and the name of the rung it is in."""
    lines, unplaced = annotate(text, fields)
    for line in lines:
        line.errors = [(path, _rung_name(path, body), message) for path, message in line.errors]
    unplaced_out = [(path, _rung_name(path, body), m) for path, m in unplaced]
    return lines, unplaced_out


def _reworded(message: str) -> str:
    """The config reader's messages ("the config is not valid YAML") said of the ladder."""
    return re.sub(r"^the config\b", "the ladder body", message)


def _form_key(org: Organization, form: LadderForm) -> str | None:
    key = form.cleaned_data.get("idempotency_key") or ""
    return f"portal-ladder:{org.pk}:{key}" if FORM_KEY.fullmatch(key) else None


@login_required
@require_http_methods(["GET", "POST"])
def ladder_new(request: HttpRequest) -> HttpResponse:
    org = portal_org(request)
    lines, unplaced, error, status = None, None, None, 200
    form = LadderForm(request.POST, request.FILES) if request.method == "POST" else LadderForm()
    wait = None
    if request.method == "POST" and form.is_valid():
        text = form.cleaned_data["config_text"]
        key = _form_key(org, form)
        if (wait := submit_allowed(request, org)) is not None:
            # the API's vendor_submit budget (docs/security.md "Throttles"), as POST /ladders/
            error, status = f"Too many submissions; try again in {ceil(wait)} s.", 429
        elif key is not None and not cache.add(key, 0, FORM_KEY_TTL_S):
            earlier = cache.get(key)
            if earlier:
                return redirect("portal-ladder", pk=earlier)
            error, status = "This form is being submitted already; see your ladders.", 409
        else:
            body: Any = None
            try:
                body = _json_value(load_document(text, form.cleaned_data["content_type"]))
                ladder = ladder_create(org=org, body=body, created_by=request.user)
            except ConfigError as exc:  # LadderError is one
                if key is not None:
                    cache.delete(key)
                error, status = _reworded(exc.message), 400
                lines, unplaced = _annotated(text, exc.fields, body)
                # unbound, so it gets a fresh key: the corrected body is a new ladder
                form = LadderForm(initial={"config_text": text})
            else:
                if key is not None:
                    cache.set(key, ladder.pk, FORM_KEY_TTL_S)
                messages.success(request, f"Ladder #{ladder.pk} is {ladder.get_status_display()}.")
                return redirect("portal-ladder", pk=ladder.pk)
    if form.errors:  # nothing pasted or uploaded, or an unreadable file
        status = 400
    context = {"org": org, "form": form, "lines": lines, "unplaced": unplaced, "error": error}
    response = render(request, "ladders/portal_new.html", context, status=status)
    if wait is not None:
        response["Retry-After"] = str(ceil(wait))
    return response


@login_required
@require_GET
def ladder_list(request: HttpRequest) -> HttpResponse:
    org = portal_org(request)
    ladders = Ladder.objects.filter(org=org).select_related("model", "hardware")
    ladders = ladders.annotate(
        n_rungs=Count("rungs"), n_submissions=Count("rungs__submission", distinct=True)
    )
    listed = ladders[:200]  # read only: ladders move on in ladders.refresh (ladders/tasks.py)
    return render(request, "ladders/portal_list.html", {"org": org, "ladders": listed})


@login_required
@require_GET
def ladder_detail(request: HttpRequest, pk: int) -> HttpResponse:
    org = portal_org(request)
    ladder = Ladder.objects.filter(org=org, pk=pk).first()
    if ladder is None:
        raise Http404("No such ladder in your organization.")
    changes = [c.get("name", "") for c in (ladder.document or {}).get("rungs") or []]
    by_order: dict[str, list[dict[str, Any]]] = {}
    for rung in ladder.rungs.select_related("submission").order_by("order", "index"):
        by_order.setdefault(rung.order, []).append(
            {
                "rung": rung,
                "applied": [changes[i] for i in rung.applied if 0 <= i < len(changes)],
            }
        )
    orders = [
        {"order": o, "title": ORDER_TITLES.get(o, o), "rungs": by_order[o]}
        for o in [*ladder.orders, *(o for o in by_order if o not in ladder.orders)]
        if o in by_order
    ]
    context = {
        "org": org,
        "ladder": Ladder.objects.select_related("model", "hardware").get(pk=ladder.pk),
        "orders": orders,
        "submissions": len({r["rung"].submission_id for rs in orders for r in rs["rungs"]}),
    }
    return render(request, "ladders/portal_detail.html", context)
