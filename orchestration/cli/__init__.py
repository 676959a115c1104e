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
from sqlalchemy import make_url
from sqlalchemy.exc import SQLAlchemyError

from orchestration.cli.help import apply_help_conventions
from orchestration.cli.logs import configure_logging, dump_stacks_on_sigusr1
from pipelines.config import get_settings
from pipelines.exceptions import InvalidSetting, SluiceError
from pipelines.settings import describe_validation_error

__all__ = ["build_parser", "main"]

# Subcommand modules, in the order `sluice --help` lists them.
SUBCOMMANDS = (
    "up",
    "broker",
    "generate",
    "replay",
    "stream",
    "agent",
    "worker",
    "query",
    "status",
    "views",
    "schema",
    "batch",
    "spark",
    "report",
    "tables",
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
    apply_help_conventions(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    configure_logging(args.verbose, _state_dir())
    dump_stacks_on_sigusr1()
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
    except SQLAlchemyError as exc:
        print(f"sluice: error: {_control_store_problem(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not _is_object_store_error(exc):
            raise
        print(f"sluice: error: {_object_store_problem(exc)}", file=sys.stderr)
        return 1


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _control_store_problem(exc: BaseException) -> str:
    """One line naming the setting and the store, never its password."""
    try:
        url = make_url(get_settings().resolved_control_store_url)
        where = url.render_as_string(hide_password=True)
    except Exception:  # the URL itself is what is broken
        where = "(unparsable URL)"
    return f"the control store {where} (SLUICE_CONTROL_STORE_URL) failed: {_first_line(exc)}"


def _is_object_store_error(exc: BaseException) -> bool:
    """An S3 failure, told without importing botocore into every command's start-up."""
    errors = sys.modules.get("botocore.exceptions")
    return errors is not None and isinstance(exc, (errors.BotoCoreError, errors.ClientError))


def _object_store_problem(exc: BaseException) -> str:
    try:
        where = get_settings().resolved_storage_root
    except Exception:
        where = "?"
    return f"the object store {where} (SLUICE_STORAGE_ROOT) failed: {_first_line(exc)}"


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
