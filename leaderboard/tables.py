"""Tables shown on pages and exported as CSV from the same rows.

A view builds `Table`s from raw values; the template renders `table.html_rows()` (formatted,
with links) and `?format=csv&table=<name>` returns `table.csv_response()` (raw values), so
every table on the site is exportable and the two can never disagree.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString, mark_safe

KINDS = ("text", "int", "float0", "float1", "float2", "float3", "ratio", "pct", "bool")


@dataclass(slots=True)
class Column:
    key: str
    label: str
    kind: str = "text"
    missing: str = "—"  # shown when the value is None

    @property
    def numeric(self) -> bool:
        return self.kind not in ("text", "bool")


def format_value(value: Any, kind: str, missing: str = "—") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if kind == "int":
        return f"{int(value):,}"
    if kind.startswith("float"):
        return f"{float(value):,.{int(kind[5:])}f}"
    if kind == "ratio":
        return f"{float(value):.2f}×"
    if kind == "pct":
        return f"{float(value) * 100:.1f}%"
    if kind == "bool":
        return "yes" if value else "no"
    return str(value)


class LazyRows(Sequence):
    """Table rows built on first use: a page that shows only a big table's row count (the
    6,000-point table of a 200-result model page) never builds them; its CSV export does."""

    __slots__ = ("_build", "_count", "_rows")

    def __init__(self, count: int, build: Callable[[], list[dict[str, Any]]]) -> None:
        self._count = count
        self._build = build
        self._rows: list[dict[str, Any]] | None = None

    def _all(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = self._build()
        return self._rows

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # type: ignore[override]
        return self._all()[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._all())


@dataclass(slots=True)
class Table:
    name: str
    title: str
    columns: list[Column]
    # raw values by column key; optional "_links" {key: url}, "_class" (row css class)
    rows: Sequence[dict[str, Any]] = field(default_factory=list)
    caption: str = ""
    # the <table> markup, rendered once when the page data is built (then cached with it)
    rendered: str = ""
    # above this many rows a page shows the CSV link instead of the table
    inline_limit: int | None = None

    @property
    def inline(self) -> bool:
        return self.inline_limit is None or len(self.rows) <= self.inline_limit

    @property
    def fragment(self) -> SafeString:
        """The table's HTML; built in Python because the template engine costs ~10 µs a cell."""
        if not self.rendered:
            self.rendered = self.render_html()
        return mark_safe(self.rendered)  # every value is escaped in render_html

    def render_html(self) -> str:
        """The same markup as `html_rows()` gives, built in one pass (no per-cell dicts)."""
        escape = html.escape  # the stdlib's: same output as Django's, no lazy-string wrapper
        num_attr = ' class="num"'
        head = "".join(
            f'<th scope="col"{num_attr if c.numeric else ""}>{escape(c.label)}</th>'
            for c in self.columns
        )
        # per column: key, kind, missing text, open tag (value present / missing), close tag
        plan = []
        for i, c in enumerate(self.columns):
            tag, scope = ("th", ' scope="row"') if i == 0 else ("td", "")
            num = "num" if c.numeric else ""
            present = f'<{tag}{scope} class="{num}">' if num else f"<{tag}{scope}>"
            missing = (
                f'<{tag}{scope} class="{num} unknown">'
                if num
                else f'<{tag}{scope} class="unknown">'
            )
            plan.append((c.key, c.kind, c.missing, present, missing, f"</{tag}>"))
        body = []
        for row in self.rows:
            links = row.get("_links") or {}
            cells = []
            for key, kind, if_missing, present, missing, close in plan:
                value = row.get(key)
                text = escape(format_value(value, kind, if_missing))
                href = links.get(key)
                if href:
                    text = '<a href="' + escape(href) + '">' + text + "</a>"
                cells.append((missing if value is None else present) + text + close)
            cls = row.get("_class", "")
            attr = ' class="' + escape(cls) + '"' if cls else ""
            body.append(f"<tr{attr}>{''.join(cells)}</tr>")
        return (
            f'<table class="data"><thead><tr>{head}</tr></thead>'
            f"<tbody>{chr(10).join(body)}</tbody></table>"
        )

    def html_rows(self) -> list[dict]:
        out = []
        for row in self.rows:
            links = row.get("_links") or {}
            cells = [
                {
                    "text": format_value(row.get(col.key), col.kind, col.missing),
                    "href": links.get(col.key),
                    "num": col.numeric,
                    "missing": row.get(col.key) is None,
                    "header": i == 0,
                }
                for i, col in enumerate(self.columns)
            ]
            out.append({"cells": cells, "cls": row.get("_class", "")})
        return out

    def csv_text(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c.key for c in self.columns])
        for row in self.rows:
            writer.writerow([_csv_value(row.get(c.key)) for c in self.columns])
        return buf.getvalue()

    def csv_response(self, filename: str) -> HttpResponse:
        response = HttpResponse(self.csv_text(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
        return response


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return value


def prerender(data: dict | None) -> dict | None:
    """Render every table of a page's data once, before the data is cached."""
    for table in (data or {}).get("tables", {}).values():
        if table.inline:
            table.rendered = table.render_html()
    return data


def csv_requested(request: HttpRequest, tables: dict[str, Table], stem: str) -> HttpResponse | None:
    """The CSV of the table `?table=` names when `?format=csv`, else None."""
    if request.GET.get("format") != "csv" or not tables:
        return None
    name = request.GET.get("table") or next(iter(tables))
    table = tables.get(name)
    if table is None:
        return HttpResponse(
            f"unknown table {name!r}; tables: {', '.join(tables)}\n",
            status=404,
            content_type="text/plain; charset=utf-8",
        )
    return table.csv_response(f"{stem}-{name}")
