"""The inspector's views as HTML: scenario trees, a run's timeline of lanes, and each call's details.

Rendered here, in Python, for both the live page (which swaps in a run's fresh fragment as it
changes) and the one-file report, so the two show the same thing and read with no script at all:
a mark on a lane is a link to its call's `<details>`; script only opens it for you. Every string
from a request, a recording or a report is escaped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from mockllm.inspector.tree import Node, session_tree
from mockllm.inspector.view import OUTCOMES, CallView, Lane, RunView
from mockllm.numbering import call_name
from mockllm.replay.report import DivergenceReport
from mockllm.scenario.summary import ScenarioSummary, SessionSummary

# Given a run id and a call number, where the live page fetches that call's body; None inlines it.
BodyUrl = Callable[[str, int], str]
MARK_PX = 22  # one column of the timeline per call


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def plural(n: int, singular: str, many: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (many or singular + 's')}"


def legend() -> str:
    items = "".join(f'<li><span class="dot o-{o}"></span>{o}</li>' for o in OUTCOMES)
    return f'<ul class="legend" aria-label="call outcomes">{items}</ul>'


# --- scenarios ----------------------------------------------------------------------------------


def session_node(session: SessionSummary) -> str:
    cut = f' <span class="cut">cut {session.cut}</span>' if session.kind == "fork" else ""
    return (f'<span class="kind k-{esc(session.kind)}">{esc(session.kind)}</span> <b>{esc(session.file)}</b>{cut} '
            f'<span class="muted">{plural(session.entries, "entry", "entries")} · id {esc(session.id)}</span>')


def tree_html(summary: ScenarioSummary) -> str:
    """The sessions as nested lists (children under their parent), then the side routes."""

    def item(node: Node) -> str:
        note = f' <span class="note">({esc(node.note)})</span>' if node.note else ""
        children = "".join(item(c) for c in node.children)
        return f"<li>{session_node(node.session)}{note}{f'<ul>{children}</ul>' if children else ''}</li>"

    routes = "".join(
        f'<li><span class="kind k-side">side route</span> model <b>{esc(r.model)}</b> ← {esc(r.file)} '
        f'<span class="muted">{plural(r.entries, "entry", "entries")}{", repeats its last" if r.repeat else ""}'
        "</span></li>" for r in summary.side_routes)
    return f'<ul class="tree">{"".join(item(n) for n in session_tree(summary.sessions))}{routes}</ul>'


def scenarios_html(summaries: Sequence[ScenarioSummary], broken: dict[str, list[str]],
                   base_urls: dict[str, str] | None = None) -> str:
    """Every loaded scenario as a tree, and every broken one with its file:line errors."""
    parts = []
    for summary in summaries:
        entries = sum(s.entries for s in summary.sessions)
        base = (base_urls or {}).get(summary.name)
        parts.append(
            f'<article class="scenario" data-scenario="{esc(summary.name)}"><h3>{esc(summary.name)} '
            f'<span class="muted">{plural(len(summary.sessions), "session")} · '
            f'{plural(entries, "entry", "entries")}</span></h3>'
            + (f'<p class="base"><code>{esc(base)}</code></p>' if base else "") + tree_html(summary) + "</article>")
    for name, errors in broken.items():
        lines = "".join(f"<li><code>{esc(e)}</code></li>" for e in errors)
        parts.append(f'<article class="scenario broken" data-scenario="{esc(name)}"><h3>{esc(name)} '
                     f'<span class="bad">broken: not served</span></h3><ul class="errors">{lines}</ul></article>')
    return "".join(parts) or '<p class="muted">No scenarios loaded.</p>'


# --- a run --------------------------------------------------------------------------------------


def call_id(run: str, number: int) -> str:
    return f"{run}-call-{number}"


def run_html(view: RunView, *, body_url: BodyUrl | None = None, actions: bool = False,
             calls_open: bool = True) -> str:
    """One run: its verdict, problems, divergences, a lane per session, and every kept call."""
    state = view.state
    run = state.run
    problems = view.problems
    if problems:
        verdict, tone = plural(len(problems), "problem"), "bad"
    elif view.ended or state.consumed:
        verdict, tone = ("replayed as recorded" if view.ended else "every recorded call served"), "ok"
    else:
        verdict, tone = "in progress", "muted"
    if state.diverged_calls and not problems:  # served, but not as recorded: say so beside the verdict
        verdict, tone = f"{verdict}; {plural(state.diverged_calls, 'call')} diverged", "warn"
    settings = state.settings
    facts = (f"bind {settings.bind} · divergence {settings.divergence} · pace {settings.pace} · "
             f"strict {'on' if settings.strict else 'off'}")
    # The live page's links and buttons; a report file read offline has no server to ask.
    buttons = "" if not actions else f'<a href="/_mockllm/runs/{esc(run)}/report.html">report.html</a>'
    if actions and not view.ended:
        buttons += ('<button type="button" data-action="reset" title="start the run over: same id and base URL">'
                    'Reset</button><button type="button" data-action="end" title="DELETE the run: it ends with its '
                    'final report">End</button>')
    head = (f'<header class="run-head"><h2>{esc(run)} <span class="muted">of</span> {esc(state.scenario)}</h2>'
            f'<span class="state {"ended" if view.ended else "live"}">{"ended" if view.ended else "live"}</span>'
            f'<span class="verdict {tone}">{esc(verdict)}</span><span class="muted">{esc(facts)}</span>'
            f'<nav class="actions">{buttons}</nav></header>')
    parts = [head]
    if problems:
        parts.append('<ul class="problems">' + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>")
    if state.divergences:
        parts.append(divergences_html(view))
    parts.append(timeline_html(view))
    extras = extras_html(view)
    if extras:
        parts.append(extras)
    if view.mcp:
        parts.append(mcp_html(view))
    kept = plural(len(view.calls), "call")
    dropped = f", {state.journal_dropped} older ones no longer kept" if state.journal_dropped else ""
    calls = "".join(call_html(view, c, body_url) for c in view.calls)
    parts.append(f'<details class="calls"{" open" if calls_open else ""}><summary>Calls: {kept}{dropped}</summary>'
                 f"{calls or '<p class=muted>No calls yet.</p>'}</details>")
    return (f'<section class="run" id="run-{esc(run)}" data-run="{esc(run)}" '
            f'data-ended="{str(view.ended).lower()}">{"".join(parts)}</section>')


def divergences_html(view: RunView) -> str:
    """Where each session's requests first differed from the recording: expected, got, diff."""
    items = []
    for d in view.state.divergences:
        call = next((c for c in view.calls if c.divergence is d), None)
        link = (f' <a href="#{esc(call_id(view.state.run, call.number))}" class="goto">call details</a>'
                if call is not None else "")
        items.append(f'<li class="divergence" data-session="{esc(d.session)}"><p><b>{esc(d.session)}</b> '
                     f"{call_name(d.call)} (live id {esc(d.live_id)}): diverged at {esc(d.what)}{link}</p>"
                     f"{diff_html(d)}</li>")
    return ('<div class="divergences"><h3>Where requests first differed from the recording</h3>'
            f'<ul>{"".join(items)}</ul></div>')


def diff_html(d: DivergenceReport) -> str:
    rows = [("expected", d.expected), ("got", d.got)] + ([("diff", d.diff)] if d.diff else [])
    return ('<dl class="diff">' + "".join(f'<dt>{name}</dt><dd><pre class="{name}">{esc(text)}</pre></dd>'
                                         for name, text in rows) + "</dl>")


def timeline_html(view: RunView) -> str:
    depths = _depths(view)
    columns = max(len(view.calls), 1)
    lanes = "".join(lane_html(view, lane, depths.get(lane.key, 0)) for lane in view.lanes)
    return (f'<div class="timeline" style="--calls:{columns};--mark:{MARK_PX}px">{legend()}'
            f'<div class="lanes">{lanes}</div></div>')


def lane_html(view: RunView, lane: Lane, depth: int) -> str:
    run = view.state.run
    cut = f' <span class="cut">cut {lane.summary.cut}</span>' if lane.summary and lane.summary.kind == "fork" else ""
    sub = []
    if lane.session is not None:
        sub.append(f"recorded id {esc(lane.session.id)}")
    if lane.live_id is not None:
        sub.append(f"live id <code>{esc(lane.live_id)}</code>")
    sub.append(esc(lane.bound))
    if lane.session is not None and lane.session.retries:
        sub.append(plural(lane.session.retries, "retry", "retries"))
    served, entries = lane.served, lane.entries
    width = 100 if entries == 0 else round(100 * min(served, entries) / entries)
    cursor = (f'<div class="cursor" data-served="{served}" data-entries="{entries}"><span class="bar">'
              f'<i style="width:{width}%"></i></span> served <b>{served} / {entries}</b></div>'
              if lane.session is not None or lane.side is not None else "")
    first = view.state.journal_dropped  # a call's column is its place among the calls kept
    marks = "".join(
        f'<li style="grid-column:{c.number - first + 1}"><a class="mark o-{c.outcome}{" held" if c.held else ""}" '
        f'href="#{esc(call_id(run, c.number))}" data-call="{c.number}" title="{esc(_mark_title(c, lane))}">'
        f"{_call_number(c)}</a></li>" for c in lane.calls)
    if lane.mcp:  # the MCP calls the session made, under its model calls, each after the model calls before it
        tools = "".join(
            f'<li style="grid-column:{m.column}"><a class="mark mcp o-{m.outcome}" href="#mcp-{esc(run)}-{m.number}" '
            f'title="{esc(m.call.server)}: {esc(m.call.what)}{esc(": " + m.call.error if m.call.error else "")}">'
            f"T</a></li>" for m in lane.mcp)
        tracks = f'<div class="tracks"><ol class="track">{marks}</ol><ol class="track mcp-track">{tools}</ol></div>'
    else:
        tracks = f'<ol class="track">{marks}</ol>'
    return (f'<div class="lane k-{esc(lane.kind.replace(" ", "-"))}" data-lane="{esc(lane.key)}" '
            f'style="--depth:{depth}"><div class="lane-head"><div class="lane-title">'
            f'<span class="kind k-{esc(lane.kind.replace(" ", "-"))}">{esc(lane.kind)}</span> '
            f"<b>{esc(lane.title)}</b>{cut}</div>"
            f'<div class="lane-sub">{" · ".join(sub)}</div>{cursor}</div>{tracks}</div>')


def mcp_html(view: RunView) -> str:
    """Every MCP call of the run: server, call, the session that made it, the recorded line that answered."""
    rows = []
    for m in view.mcp:
        call = m.call
        answered = ("sent to the server (new_episodes)" if call.live else f"miss: {call.error}" if call.error
                    else f"recorded line {call.line}" if call.line else "as recorded")
        rows.append(f'<tr id="mcp-{esc(view.state.run)}-{m.number}" class="o-{m.outcome}"><td>{m.number + 1}</td>'
                    f"<td>{esc(call.server)}</td><td><code>{esc(call.what)}</code></td>"
                    f"<td>{esc(call.session or call.mcp_session or '-')}</td><td>{esc(answered)}</td></tr>")
    return (f'<details class="mcp-calls" open><summary>MCP calls: {len(view.mcp)}</summary><table>'
            "<thead><tr><th>#</th><th>server</th><th>call</th><th>session</th><th>answered by</th></tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table></details>')


def extras_html(view: RunView) -> str:
    """Faults served, held calls, notes, pacing notes and failures counted past the kept ones, if any."""
    state = view.state
    rows = [f"fault at {esc(f.file)} {call_name(f.call)} (live id {esc(f.session)}): {esc(f.fault)}"
            for f in state.faults]
    rows += [f"note: {esc(n.session)} {call_name(n.call)} (live id {esc(n.live_id)}): {esc(n.message)}"
             for n in state.notices]
    rows += [f"held open: {esc(h.script)} {call_name(h.call)} (live id {esc(h.session)})" for h in state.held]
    rows += [f"pacing: {esc(p.file)} {call_name(p.call)} served {esc(p.served)}: {esc(p.note)}" for p in state.pacing]
    rows += [f"{n} more failures {esc(code)} (counted, not kept)" for code, n in state.failures_more.items()]
    return '<ul class="extras">' + "".join(f"<li>{r}</li>" for r in rows) + "</ul>" if rows else ""


# --- a call -------------------------------------------------------------------------------------


def call_html(view: RunView, call: CallView, body_url: BodyUrl | None) -> str:
    """A call's details: what was served, the divergence or failure, then the request as kept."""
    record, run = call.record, view.state.run
    lane = next(lane for lane in view.lanes if lane.key == call.lane)
    number = record.get("call")
    where = lane.title if not isinstance(number, int) else \
        f"{lane.title} {call_name(number)}" + (f" of {lane.entries}" if lane.entries else "")
    timing = [f"{record['duration_ms']:.1f} ms"] if isinstance(record.get("duration_ms"), float | int) else []
    if view.first_at is not None and isinstance(record.get("at"), float):
        timing.append(f"+{record['at'] - view.first_at:.3f} s")
    status = record.get("status")
    summary = (f'<summary><span class="dot o-{call.outcome}"></span><b>#{call.number}</b> {esc(where)} '
               f'<span class="tag o-{call.outcome}">{call.outcome}</span> '
               f'<span class="muted">{esc(" · ".join([str(status or "-"), call.entry_kind or "-", *timing]))}'
               "</span></summary>")
    body = []
    if call.divergence is not None:
        body.append(f'<div class="divergence"><p>diverged at {esc(call.divergence.what)}</p>'
                    f"{diff_html(call.divergence)}</div>")
    elif record.get("diverged"):
        body.append(f'<div class="divergence"><p>diverged at {esc(record["diverged"])} (a session\'s first '
                    "divergence is described in full; this is a later one)</p></div>")
    if call.failure is not None:
        body.append(f'<p class="failure"><b>{esc(call.failure.code)}</b>: {esc(call.failure.message)}</p>')
    body.append(_facts(call, lane))
    body.append(_request(record, run, call.number, body_url))
    open_ = " open" if call.divergence is not None or call.failure is not None else ""
    return (f'<details class="call o-{call.outcome}" id="{esc(call_id(run, call.number))}" '
            f'data-call="{call.number}" data-at="{esc(record.get("at", ""))}"{open_}>{summary}'
            f'<div class="call-body">{"".join(body)}</div></details>')


def _facts(call: CallView, lane: Lane) -> str:
    record = call.record
    served = "nothing from the script"
    if call.entry_kind is not None:
        served = f"entry {_call_number(call)} (0-based) of {lane.title}: {call.entry_kind}"
    rows = [("served", served), ("status", record.get("status")), ("error", record.get("error")),
            ("fault", record.get("fault")), ("retry", "yes: a repeat of a call not received whole"
                                            if record.get("retry") else None),
            ("held", "yes: held open until the client leaves" if call.held else None),
            ("live session", record.get("session")), ("dialect", record.get("dialect")),
            ("stream", "yes" if record.get("stream") else "no"), ("arrived", _utc(record.get("at")))]
    return '<dl class="facts">' + "".join(f"<dt>{name}</dt><dd>{esc(value)}</dd>" for name, value in rows
                                        if value not in (None, "")) + "</dl>"


def _request(record: dict[str, Any], run: str, number: int, body_url: BodyUrl | None) -> str:
    headers = record.get("headers") or {}
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in headers.items())
    head = f'<table class="headers">{rows}</table>' if rows else '<p class="muted">no x- headers</p>'
    cut = (' <span class="muted">(cut: the journal keeps the first 64 KiB)</span>'
           if record.get("body_truncated") else "")
    if body_url is None:
        pre = f'<pre class="body">{esc(pretty_body(str(record.get("body", ""))))}</pre>'
    else:
        pre = f'<pre class="body" data-src="{esc(body_url(run, number))}">(opens on demand)</pre>'
    return f"<h4>request headers</h4>{head}<h4>request body{cut}</h4>{pre}"


def pretty_body(body: str) -> str:
    """The body indented when it is whole JSON, else as kept."""
    try:
        return json.dumps(json.loads(body), indent=1, ensure_ascii=False)
    except ValueError:
        return body


def _call_number(call: CallView) -> str:
    """The script's call index (0-based, as the journal and report JSON say), or `·` for none."""
    number = call.record.get("call")
    return str(number) if isinstance(number, int) else "·"


def _mark_title(call: CallView, lane: Lane) -> str:
    record = call.record
    parts = [f"#{call.number}", lane.title, f"call {_call_number(call)} (0-based)", call.outcome]
    parts += [str(record[k]) for k in ("status", "error", "fault") if record.get(k)]
    if record.get("diverged"):
        parts.append(f"diverged at {record['diverged']}")
    return " · ".join(parts)


def _utc(at: object) -> str | None:
    if not isinstance(at, float | int):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d} UTC"


def _depths(view: RunView) -> dict[str, int]:
    """How deep each recorded session sits in the tree, to indent its lane under its parent."""
    summaries = [lane.summary for lane in view.lanes if lane.summary is not None]
    out: dict[str, int] = {}

    def walk(node: Node, depth: int) -> None:
        out[node.session.file] = depth
        for child in node.children:
            walk(child, depth + 1)

    for root in session_tree(summaries):
        walk(root, 0)
    return out
