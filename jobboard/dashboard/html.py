"""HTML building blocks: everything is escaped unless it is :class:`Markup` built here.

Job names, details, reasons, owners and plan task names are untrusted input: they only ever reach a
page through :func:`h` (or :func:`pretty`, which escapes too). Graph labels for Mermaid are encoded
as entity codes (:func:`mermaid_graph`) and drawn with HTML labels off.
"""

from __future__ import annotations

import html
import json
import math
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jobboard.job import JobState
from jobboard.plans.dag import STATE_COLOURS

PRETTY_LIMIT = 20_000
NAV = (("overview", "/", "Overview"), ("jobs", "/jobs", "Jobs"), ("trash", "/trash", "Trash"),
       ("workers", "/workers", "Workers"), ("plans", "/plans", "Plans"))
MERMAID = "/static/vendor/mermaid-11.4.1.min.js"


class Markup(str):
    """A string of HTML that is safe as it is (built from escaped parts)."""


def h(value: object) -> Markup:
    """``value`` as text, escaped for HTML (``Markup`` is kept as it is)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object]) -> Markup:
    return Markup("".join(h(part) for part in parts))


def tag(element: str, content: object = "", /, **attrs: object) -> Markup:
    """``<name attrs>content</name>``; attribute names end in ``_`` for Python keywords (``class_``)."""
    rendered = "".join(f' {key.rstrip("_").replace("_", "-")}="{h(value)}"'
                       for key, value in attrs.items() if value is not None)
    return Markup(f"<{element}{rendered}>{h(content)}</{element}>")


def link(href: str, text: object) -> Markup:
    return tag("a", text, href=href)


def job_link(job_id: str) -> Markup:
    return link(f"/jobs/{urllib.parse.quote(job_id, safe='')}", job_id)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, class_: str = "",
          empty: str = "nothing here") -> Markup:
    head = join(tag("th", header) for header in headers)
    body = [join(tag("td", cell) for cell in row) for row in rows]
    if not body:
        body = [Markup(f'<td colspan="{len(headers)}" class="empty">{h(empty)}</td>')]
    rows_html = join(tag("tr", row) for row in body)
    return Markup(f'<table class="{h(class_)}"><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>')


def state_badge(state: JobState | str) -> Markup:
    value = state.value if isinstance(state, JobState) else str(state)
    return tag("span", value, class_=f"state state-{value}")


def pretty(value: Any) -> Markup:
    """``value`` as indented JSON (anything else by ``repr``), escaped, in a ``<pre>``."""
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=repr, sort_keys=False)
    except (TypeError, ValueError, RecursionError) as error:
        text = f"(not shown as JSON: {error}) {value!r}"[:PRETTY_LIMIT]
    if len(text) > PRETTY_LIMIT:
        text = text[:PRETTY_LIMIT] + f"\n... ({len(text) - PRETTY_LIMIT} more characters)"
    return tag("pre", text, class_="data")


def age(seconds: float | None) -> str:
    """``12s``, ``3m 4s``, ``2h 5m``, ``4d 3h``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0, int(seconds))
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if seconds >= size:
            return f"{seconds // size}{unit} {seconds % size // sub_size}{sub}"
    return f"{seconds}s"


def since(at: float | None) -> str:
    return "-" if at is None else f"{age(time.time() - at)} ago"


def throughput_svg(rows: Sequence[tuple[float, int, int, int]], width: int = 600, height: int = 120) -> Markup:
    """A small line chart of posted / consumed / trashed per 10-s bucket."""
    peak = max([1, *(max(r[1:]) for r in rows)])
    step = width / max(1, len(rows) - 1)
    lines = []
    for column, series in ((1, "posted"), (2, "consumed"), (3, "trashed")):
        points = " ".join(f"{i * step:.1f},{height - 4 - (height - 8) * row[column] / peak:.1f}"
                          for i, row in enumerate(rows))
        lines.append(f'<polyline class="series-{series}" points="{points}"/>')
    total = [sum(row[column] for row in rows) for column in (1, 2, 3)]
    title = f"last {len(rows) * 10 // 60} minutes: {total[0]} posted, {total[1]} consumed, {total[2]} trashed"
    return Markup(f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{h(title)}">'
                  f'<title>{h(title)}</title><line x1="0" y1="{height - 4}" x2="{width}" y2="{height - 4}" '
                  f'class="axis"/>{"".join(lines)}<text x="4" y="14">peak {peak} / 10 s</text></svg>')


def mermaid_label(text: str) -> str:
    """``text`` for a quoted Mermaid label: anything but letters, digits, space and ``._-/`` as ``#code;``."""
    return "".join(c if c.isascii() and (c.isalnum() or c in " ._-/") else f"#{ord(c)};" for c in text)


def mermaid_graph(after: Mapping[str, Sequence[str]], states: Mapping[str, JobState]) -> str:
    """A Mermaid flowchart of the tasks (name -> names it runs after), one class per state."""
    ids = {name: f"t{index}" for index, name in enumerate(after)}
    lines = ["flowchart LR"]
    for name, node in ids.items():
        state = states.get(name)
        lines.append(f'  {node}["{mermaid_label(name)}"]' + (f":::{state.value}" if state else ""))
    lines += [f"  {ids[dep]} --> {ids[name]}" for name, deps in after.items() for dep in deps if dep in ids]
    lines += [f"  classDef {state.value} fill:{colour},stroke:#555" for state, colour in STATE_COLOURS.items()]
    return "\n".join(lines)


def redact(url: str) -> str:
    """The board URL without credentials."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host}"))


def layout(page: str, title: str, body: Markup, *, board_url: str, healthy: bool, actions: bool,
           before_main: Markup | None = None, graphs: bool = False) -> Markup:
    """A whole page: navigation, the health banner, ``before_main`` (kept across live updates), ``body``."""
    nav = join(tag("a", text, href=href, class_="current" if key == page else None) for key, href, text in NAV)
    health = tag("span", "live" if healthy else "board unreachable: showing the last known state",
                 id="health", class_="ok" if healthy else "down")
    mode = (Markup('actions enabled (token needed) <input id="token" type="password" autocomplete="off" '
                   'placeholder="action token" aria-label="action token">') if actions else h("read-only"))
    script = Markup(f'<script src="{MERMAID}" defer></script>') if graphs else Markup("")
    return Markup(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{h(title)} · jobboard</title><link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/static/style.css">'
        f'{script}<script src="/static/app.js" defer></script></head>'
        f'<body data-page="{h(page)}" data-healthy="{"yes" if healthy else "no"}">'
        f'<header><strong>jobboard</strong> <code>{h(redact(board_url))}</code><nav>{nav}</nav>{health}</header>'
        f'<p id="notice" role="status"></p>{before_main or ""}<main id="main">{body}</main>'
        f'<footer>{mode}</footer></body></html>')
