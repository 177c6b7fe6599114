"""The `mockllm` command: serve, inspect, check."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mockllm.options import add_arguments, from_arguments


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mockllm", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    serve = verbs.add_parser("serve", help="serve a scenario or suite over OpenAI-compatible SSE")
    serve.add_argument("path", nargs="?", type=Path,
                       help="scenario or suite folder (default: the DSH_SNAPSHOT_* tree if DSH_SNAPSHOT_FILE is "
                            "set, else the bundled recordings/)")
    add_arguments(serve)

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

        return serve_forever(args.path, from_arguments(args))
    if args.verb == "inspect":
        from mockllm.inspect import run_inspect

        return run_inspect(args.path, as_json=args.json)
    from mockllm.check import run_check

    return run_check(args.path)


if __name__ == "__main__":
    sys.exit(main())
