"""The `mockllm` command: serve, inspect, check."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

BUNDLED_RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mockllm", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="serve a scenario or suite over OpenAI-compatible SSE")
    serve.add_argument("path", nargs="?", type=Path, help="scenario or suite folder (default: bundled recordings/)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    serve.add_argument("--session-header", action="append", default=[], metavar="NAME",
                       help="another request header naming the calling session (repeatable)")
    serve.add_argument("--headerless", choices=("conversation", "anonymous"), default="conversation",
                       help="route requests with no session header by their conversation (default) or as one session")
    serve.add_argument("--cwd", help="replaces {{cwd}} in recorded strings for the default runs")

    inspect = verbs.add_parser("inspect", help="print a session tree: sessions, kinds, cuts, calls")
    inspect.add_argument("path", type=Path)
    inspect.add_argument("--json", action="store_true", help="machine-readable output")

    check = verbs.add_parser("check", help="validate a scenario or suite; exit 1 on any error")
    check.add_argument("path", type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verb == "serve":
        from mockllm.serve import serve_forever

        return serve_forever(
            args.path or BUNDLED_RECORDINGS,
            host=args.host,
            port=args.port,
            session_headers=args.session_header,
            headerless=args.headerless,
            cwd=args.cwd,
        )
    if args.verb == "inspect":
        from mockllm.inspect import run_inspect

        return run_inspect(args.path, as_json=args.json)
    from mockllm.check import run_check

    return run_check(args.path)


if __name__ == "__main__":
    sys.exit(main())
