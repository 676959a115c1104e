"""The `sluice` command: one argparse tree, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit code. Flags fall
back to ``SLUICE_*`` environment variables through the settings models.

May import: everything below it; nothing imports the CLI.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from orchestration.cli.logs import configure_logging
from pipelines.config import get_settings
from pipelines.exceptions import InvalidSetting, SluiceError
from pipelines.settings import describe_validation_error

__all__ = ["build_parser", "main"]

# Subcommand modules, in the order `sluice --help` lists them.
SUBCOMMANDS = (
    "up",
    "broker",
    "generate",
    "stream",
    "agent",
    "worker",
    "query",
    "status",
    "batch",
    "report",
    "autoscale",
    "config",
)


def _command_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (its first positional argument), if it is one of ours."""
    positional = [a for a in argv if not a.startswith("-")]
    return positional[0] if positional and positional[0] in SUBCOMMANDS else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of ``only``: a worker process then imports what
    it runs, not the report's plotting or Spark (seconds of start-up on every rescale)."""
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Real-time aggregation of event streams that stays correct and cheap.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging on the terminal too"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only else SUBCOMMANDS:
        try:
            module = importlib.import_module(f"orchestration.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"orchestration.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    configure_logging(args.verbose, _state_dir())
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InvalidSetting as exc:
        print(f"sluice: invalid setting: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a settings model built without load_settings
        print(f"sluice: invalid setting: {describe_validation_error(exc)}", file=sys.stderr)
        return 2
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _state_dir() -> Path | None:
    """Where the log file goes; None while the settings are invalid (the command says why)."""
    try:
        return get_settings().resolved_state_dir
    except (InvalidSetting, ValidationError):
        return None


def _version() -> str:
    try:
        return metadata.version("sluice")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
