"""The pages' bodies, as escaped HTML (see :mod:`jobboard.dashboard.html`); no I/O here.

A job that cannot be shown (a field of an unexpected type, ...) is shown as ``malformed`` with the
error, in its row or on its page; it never breaks the page.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Sequence

from jobboard.dashboard.html import (
    Markup,
    age,
    h,
    job_link,
    join,
    link,
    mermaid_graph,
    pretty,
    since,
    state_badge,
    table,
    tag,
    throughput_svg,
)
from jobboard.dashboard.model import Dashboard, JobFilter, JobsPage, JobView, PlanView
from jobboard.job import JobState, ListedJob, Priority, TrashedJob

STATES = ("unclaimed", "claimed", "waiting")
PRIORITIES = tuple(p.name.lower() for p in Priority)
CHART_BUCKETS = 30
"""The overview's chart: the last 5 minutes."""


def button(label: str, action: str, **data: str) -> Markup:
    """An action button; app.js posts to ``action`` with the token header (no form, no cookie)."""
    extra = "".join(f' data-{key}="{h(value)}"' for key, value in data.items())
    return Markup(f'<button type="button" data-action="{h(action)}"{extra}>{h(label)}</button>')


def guarded(render: Callable[[], list[object]], width: int, what: str) -> list[object]:
    """The cells ``render`` gives, or one ``malformed`` cell (then blanks) if it fails."""
    try:
        return render()
    except Exception as error:  # noqa: BLE001 - an unexpected value must not break the page
        return [tag("span", f"malformed {what}: {type(error).__name__}: {error}", class_="malformed"),
                *[""] * (width - 1)]


def progress_text(job: object) -> str:
    progress = getattr(job, "progress", None)
    if progress is None:
        return ""
    fraction, note = getattr(progress, "fraction", None), getattr(progress, "note", "")
    percent = f"{100 * float(fraction):.0f}%" if isinstance(fraction, int | float) else ""
    return f"{percent} {note}".strip()


# -- overview ----------------------------------------------------------------------


def overview(d: Dashboard) -> Markup:
    stats = d.stats()
    cards = [("on the board", stats.total), *((state, stats.by_state.get(state, 0)) for state in STATES),
             ("trash", stats.trash_size), ("oldest unclaimed", age(stats.oldest_unclaimed_age)),
             ("live workers", len(stats.workers)), ("malformed entries", len(d.malformed))]
    figures = join(tag("div", join([tag("span", value, class_="figure"), tag("span", label, class_="label")]),
                       class_="card", data_figure=label) for label, value in cards)
    names = sorted(stats.by_name.items())[:100]
    by_name = table(["name", *STATES], ([name, *(counts.get(state, 0) for state in STATES)]
                                        for name, counts in names), empty="no jobs on the board")
    by_priority = table(["priority", "jobs"], ([p, stats.by_priority[p]] for p in PRIORITIES
                                               if p in stats.by_priority), empty="no jobs on the board")
    malformed = table(["seen", "entry", "why"], ([since(at), job_link(entry) if entry else "", why]
                                                 for at, entry, why in d.malformed),
                      empty="none reported")
    recent = table(["when", "event", "job", "detail"],
                   ([since(at), kind, job_link(job) if job else "", detail] for at, kind, job, detail in d.recent),
                   empty="no events since the dashboard started")
    return join([
        tag("section", figures, class_="cards"),
        tag("h2", "Throughput (per 10 s)"), throughput_svg(d.live.throughput()[-CHART_BUCKETS:]),
        Markup('<p class="legend"><span class="series-posted">posted</span> <span class="series-consumed">'
               'consumed</span> <span class="series-trashed">trashed</span></p>'),
        tag("div", join([tag("section", join([tag("h2", "By name"), by_name])),
                         tag("section", join([tag("h2", "By priority"), by_priority]))]), class_="columns"),
        tag("h2", "Malformed entries"), malformed, tag("h2", "Recent events"), recent])


# -- jobs ----------------------------------------------------------------------------


def jobs_filter_form(query: JobFilter, names: Sequence[str]) -> Markup:
    def select(field: str, options: Sequence[str], current: str) -> Markup:
        choices = [tag("option", f"any {field}", value="")]
        choices += [Markup(f'<option value="{h(o)}"{" selected" if o == current else ""}>{h(o)}</option>')
                    for o in options]
        return tag("select", join(choices), name=field, aria_label=field)

    datalist = tag("datalist", join(tag("option", "", value=name) for name in names[:200]), id="names")
    return tag("form", join([
        select("state", STATES, query.state), select("priority", PRIORITIES, query.priority),
        Markup(f'<input name="name" list="names" placeholder="name contains" value="{h(query.name)}">'), datalist,
        Markup(f'<input name="owner" placeholder="owner contains" value="{h(query.owner)}">'),
        Markup('<button type="submit">filter</button>')]), method="get", action="/jobs", class_="filters")


def jobs(page: JobsPage, query: JobFilter, actions: bool) -> Markup:
    headers = ["id", "name", "state", "priority", "owner", "attempts", "progress", "age",
               *(["action"] if actions else [])]

    def row(item: ListedJob) -> list[object]:
        job = item.job
        cells: list[object] = [job_link(job.id), job.name, state_badge(item.state), Priority(job.priority).name.lower(),
                               item.owner or "", _attempts(job.attempts, job.max_attempts), progress_text(job),
                               age(time.time() - job.created_at)]
        return [*cells, button("cancel", f"/api/jobs/{urllib.parse.quote(job.id, safe='')}/cancel")] if actions \
            else cells

    rows = [guarded(lambda item=item: row(item), len(headers), "job") for item in page.items]  # type: ignore[misc]
    return join([tag("p", f"{page.total} job(s) match; page {page.page} of {page.pages}", class_="count"),
                 table(headers, rows, class_="jobs", empty="no job matches"), _pager(page, query)])


def _attempts(attempts: int, most: int | None) -> str:
    return f"{attempts}/{most}" if most else str(attempts)


def _pager(page: JobsPage, query: JobFilter) -> Markup:
    def href(number: int) -> str:
        params = {k: v for k, v in (("state", query.state), ("name", query.name), ("priority", query.priority),
                                    ("owner", query.owner)) if v}
        return "/jobs?" + urllib.parse.urlencode({**params, "page": number})

    parts = [link(href(1), "« first") if page.page > 1 else "",
             link(href(page.page - 1), "‹ previous") if page.page > 1 else "",
             link(href(page.page + 1), "next ›") if page.page < page.pages else "",
             link(href(page.pages), "last »") if page.page < page.pages else ""]
    return tag("nav", join(part for part in parts if part), class_="pager")


# -- one job ---------------------------------------------------------------------------


def job_page(view: JobView | None, job_id: str, actions: bool, requeue: bool) -> Markup:
    if view is None:
        return join([tag("h1", f"job {job_id}"), tag("p", "no such job on this board (nor in its trash)")])
    if view.malformed is not None:
        return join([tag("h1", f"job {job_id}"), tag("p", f"malformed entry: {view.malformed}", class_="malformed"),
                     tag("p", "The board skips it: no worker can claim it. Remove it with the tool that wrote it.")])
    try:
        return _job_page(view, actions, requeue)
    except Exception as error:  # noqa: BLE001 - an unexpected value must not break the page
        return join([tag("h1", f"job {job_id}"),
                     tag("p", f"malformed job: {type(error).__name__}: {error}", class_="malformed")])


def _job_page(view: JobView, actions: bool, requeue: bool) -> Markup:
    job = view.job
    quoted = urllib.parse.quote(view.job_id, safe="")
    rows: list[tuple[str, object]] = [("id", view.job_id), ("state", state_badge(view.state))]
    if job is not None:
        generation = getattr(job, "generation", None)
        rows += [("name", job.name), ("owner", view.owner or "-"),
                 ("generation", "-" if generation is None else generation),
                 ("priority", Priority(job.priority).name.lower()),
                 ("attempts", _attempts(job.attempts, job.max_attempts)), ("progress", progress_text(job) or "-"),
                 ("posted", since(job.created_at)), ("not before", since(job.not_before) if job.not_before else "-"),
                 ("key", job.key or "-"), ("keeps its result", "yes" if job.keep_result else "no")]
    if view.reason:
        rows.append(("reason", view.reason))
    if view.trashed_at is not None:
        rows.append(("trashed", since(view.trashed_at)))
    facts = tag("dl", join(join([tag("dt", k), tag("dd", v)]) for k, v in rows))
    parts: list[object] = [tag("h1", f"job {job.name if job else view.job_id}"), facts]
    if view.stale:
        parts.insert(1, tag("p", "board unreachable: as last seen, may be stale", class_="malformed"))
    if actions and view.state in (JobState.UNCLAIMED, JobState.CLAIMED, JobState.WAITING):
        parts.append(button("cancel this job", f"/api/jobs/{quoted}/cancel"))
    if actions and requeue and view.state is JobState.TRASHED:
        parts.append(button("requeue", f"/api/trash/{quoted}/requeue"))
    if job is not None and job.last_error is not None:
        error = job.last_error
        parts += [tag("h2", "Last error"), tag("p", f"{error.type}: {error.message} (attempt {error.attempt})"),
                  tag("pre", error.traceback, class_="data") if error.traceback else ""]
    if job is not None:
        parts += [tag("h2", "Details"), pretty(job.details), tag("h2", "Depends on"),
                  tag("ul", join(tag("li", job_link(dep)) for dep in job.depends_on)) if job.depends_on
                  else tag("p", "nothing")]
    parts += [tag("h2", "Dependents on the board"),
              table(["id", "name", "state"], ([job_link(d.job.id), d.job.name, state_badge(d.state)]
                                              for d in view.dependents), empty="none")]
    if view.state is JobState.COMPLETE:
        parts += [tag("h2", "Kept result"), pretty(view.result) if view.has_result
                  else tag("p", "not read: the board is unreachable" if view.stale else "none kept")]
    return join(parts)


# -- trash, workers ---------------------------------------------------------------------------


def trash(entries: Sequence[TrashedJob], total_shown: int, actions: bool, requeue: bool, purge: bool) -> Markup:
    headers = ["id", "name", "reason", "trashed", *(["action"] if actions and requeue else [])]

    def row(entry: TrashedJob) -> list[object]:
        cells: list[object] = [job_link(entry.job.id), entry.job.name, entry.reason, since(entry.trashed_at)]
        if actions and requeue:
            cells.append(button("requeue", f"/api/trash/{urllib.parse.quote(entry.job.id, safe='')}/requeue"))
        return cells

    rows = [guarded(lambda e=entry: row(e), len(headers), "entry") for entry in entries]  # type: ignore[misc]
    parts = [tag("p", f"{len(entries)} newest entries shown", class_="count")]
    if actions and purge:
        parts.append(button("purge the whole trash", "/api/trash/purge", confirm="Remove every job from the trash?"))
    return join([*parts, table(headers, rows, empty="the trash is empty")])


def workers(d: Dashboard) -> Markup:
    rows = []
    for worker in d.stats().workers:
        running = join(tag("li", join([job_link(job), " ", name, " since ", since(at)]))
                       for job, name, at in worker.running)
        rows.append([worker.name, pretty(dict(worker.metadata)), tag("ul", running) if worker.running else "idle"])
    return join([tag("p", f"{len(rows)} live entities", class_="count"),
                 table(["entity", "metadata", "running (claimed since)"], rows, empty="no live worker")])


# -- plans -----------------------------------------------------------------------------------


def plans(views: Sequence[PlanView]) -> Markup:
    rows = [[link(f"/plans/{urllib.parse.quote(v.plan_id, safe='')}", v.name), v.plan_id, v.status.state,
             _progress_bar(v)] for v in views]
    return table(["plan", "id", "state", "progress"], rows, empty="no plan seen since the dashboard started")


def _progress_bar(view: PlanView) -> Markup:
    progress = view.status.progress()
    text = f"{progress.done}/{progress.total} done, {progress.running} running, {progress.failed} failed"
    return join([tag("progress", text, value=progress.done + progress.failed, max=max(progress.total, 1)),
                 " ", text])


def plan_page(view: PlanView | None, plan_id: str) -> Markup:
    if view is None:
        return join([tag("h1", f"plan {plan_id}"), tag("p", "no such plan on this board")])
    after = {name: [str(dep) for dep in spec.get("after", ())] for name, spec in view.manifest["tasks"].items()}
    rows = [[name, state_badge(state), view.status.owners.get(name) or view.status.reasons.get(name, ""),
             job_link(view.ids[name])] for name, state in view.status.states.items()]
    legend = join(tag("span", state.value, class_=f"state state-{state.value}") for state in JobState)
    return join([tag("h1", f"plan {view.name}"), tag("p", join([tag("strong", view.status.state), " · ",
                                                                _progress_bar(view)])),
                 tag("p", legend, class_="legend"),
                 tag("pre", mermaid_graph(after, view.status.states), class_="mermaid-src", hidden="hidden"),
                 tag("div", "", class_="graph", data_plan=view.plan_id),
                 table(["task", "state", "owner / reason", "job"], rows)])
