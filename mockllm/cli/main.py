"""The `mockllm` command: serve, inspect, check, record, mcp-bridge."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from mockllm.options import add_arguments, from_arguments
from mockllm.scenario.side_routes import SideRouteSpec, parse_side_route

# The reference page that says more about each verb, named at the end of its --help. A verb with
# no page of its own points at the CLI page, which lists every verb.
DOCS_PAGES = {
    "mockllm": "docs/index.md",
    "serve": "docs/cli.md",
    "inspect": "docs/format.md",
    "check": "docs/cli.md",
    "record": "docs/record.md",
    "mcp-bridge": "docs/mcp.md",
}


def docs_note(page: str) -> str:
    """The line at the end of a --help: the page, in the repository and its site (`mkdocs serve`)."""
    return f"More: {page} in mockllm's repository (its reference site: mkdocs serve)."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mockllm", description=__doc__, epilog=docs_note(DOCS_PAGES["mockllm"]))
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="serve a scenario or suite over OpenAI-compatible SSE")
    serve.add_argument("path", nargs="?", type=Path,
                       help="scenario or suite folder (default: the DSH_SNAPSHOT_* tree if DSH_SNAPSHOT_FILE is "
                            "set, else the bundled recordings/)")
    add_arguments(serve)

    inspect = verbs.add_parser("inspect", help="print a session tree: sessions, kinds, cuts, calls")
    inspect.add_argument("path", type=Path)
    shape = inspect.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="machine-readable output")
    shape.add_argument("--tree", action="store_true", help="draw each scenario as a tree: children under parents")
    _add_side_route(inspect)

    check = verbs.add_parser("check", help="validate a scenario or suite; exit 1 on any error")
    check.add_argument("path", type=Path)
    _add_side_route(check)
    _add_record(verbs)
    bridge = verbs.add_parser("mcp-bridge", help="a stdio MCP server that forwards to a Streamable HTTP one (for "
                              "agents that start their MCP servers as commands)")
    bridge.add_argument("url", help="the MCP endpoint: …/runs/RUN/mcp/NAME, …/scenarios/NAME/mcp/SERVER, "
                        "or mockllm record's …/mcp/NAME")
    bridge.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="send this header with every request, e.g. x-mockllm-session:agent-1 (repeatable)")
    for name, verb in verbs.choices.items():
        verb.epilog = docs_note(DOCS_PAGES.get(name, "docs/cli.md"))
    return parser


def _add_side_route(verb: argparse.ArgumentParser) -> None:
    """`--side-route` for inspect and check, so they read a tree as `serve --side-route` serves it."""
    verb.add_argument("--side-route", dest="side_routes", action="append", default=[], metavar="MODEL=FILE",
                      type=_side_route, help="read FILE as model MODEL's side route, as serve does (repeatable)")


def _side_route(text: str) -> SideRouteSpec:
    try:
        return parse_side_route(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# The serve options record mode shares: where it listens, and which headers name the calling session.
RECORD_SERVE_OPTIONS = ("host", "port", "session_headers")


def _add_record(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    record = verbs.add_parser("record", help="proxy a real upstream and record its answers as a session tree")
    record.add_argument("--upstream", required=True, metavar="URL",
                        help="the upstream's base URL, /v1 included (e.g. https://api.openai.com/v1)")
    record.add_argument("--out", required=True, type=Path, metavar="DIR", help="new or empty folder to record into")
    record.add_argument("--pack", action="store_true", help="write packed chunk rows")
    record.add_argument("--redact", action="append", default=[], metavar="REGEX",
                        help="mask matches in every recorded string (repeatable)")
    add_arguments(record, only=RECORD_SERVE_OPTIONS)
    # Not serve's --side-route MODEL=FILE nor serve's --cwd: record writes the file and the placeholder.
    record.add_argument("--side-route", dest="record_side_routes", action="append", default=[], metavar="MODEL",
                        help="write MODEL's calls as a side route's script (side.MODEL.json, declared in "
                             "mockllm.json), not as sessions: a title model, warm-ups (repeatable)")
    record.add_argument("--cwd", dest="record_cwd", metavar="DIR",
                        help="the agent's working folder: written as {{cwd}} in recorded strings, as dsh does")
    record.add_argument("--mcp", dest="record_mcp", action="append", default=[], metavar="NAME=URL",
                        help="proxy an MCP server at /mcp/NAME and record it in mcp.NAME.jsonl: NAME=URL (Streamable "
                             "HTTP) or NAME=stdio:COMMAND ARGS (a stdio server it starts) (repeatable)")
    record.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verb == "serve":
        from mockllm.server.running import serve_forever

        return serve_forever(args.path, from_arguments(args))
    if args.verb == "record":
        from mockllm.record.command import RecordOptions, record_forever

        return record_forever(RecordOptions(args.upstream, args.out, pack=args.pack, redact=tuple(args.redact),
                                            host=args.host, port=args.port, log_level=args.log_level,
                                            session_headers=tuple(args.session_headers),
                                            side_routes=tuple(args.record_side_routes), cwd=args.record_cwd,
                                            mcp=tuple(args.record_mcp)))
    if args.verb == "mcp-bridge":
        from mockllm.cli.mcp_bridge import run_bridge

        return run_bridge(args.url, args.header)
    if args.verb == "inspect":
        from mockllm.cli.tree_view import run_inspect

        return run_inspect(args.path, as_json=args.json, as_tree=args.tree, side_routes=args.side_routes)
    from mockllm.cli.validate import run_check

    return run_check(args.path, side_routes=args.side_routes)
