"""The machinery every settings model shares: sources, provenance and one-line errors.

A Sluice option is a field of a pydantic-settings model derived from :class:`SluiceBaseSettings`.
Its value comes from, in order: the process environment, the settings file, the field's
default. The settings file (``SLUICE_CONFIG_FILE``, default ``sluice.yaml`` in the working
directory if it exists) is a flat YAML mapping of the same variable names the environment uses,
so there is one vocabulary::

    SLUICE_FLUSH_INTERVAL_S: 5
    SLUICE_AUTOSCALE_POLICY: mcts
    KAFKA_BOOTSTRAP_SERVERS: broker-1:9092

`option_rows` says, for ``sluice config``, what each option is and where its value came from;
`describe_validation_error` turns pydantic's report into one line naming the variable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import AfterValidator, BaseModel, Field, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
)

from pipelines.exceptions import InvalidSetting

__all__ = [
    "CONFIG_FILE_VAR",
    "DEFAULT_CONFIG_FILE",
    "MAX_BUCKET_FACTOR",
    "BucketFactor",
    "OptionRow",
    "SettingsFileSource",
    "SluiceBaseSettings",
    "as_environment",
    "describe_validation_error",
    "load_settings",
    "option_rows",
    "overridden",
    "settings_file",
]

CONFIG_FILE_VAR = "SLUICE_CONFIG_FILE"
DEFAULT_CONFIG_FILE = "sluice.yaml"
MASK = "**********"

_MODELS: dict[str, type[SluiceBaseSettings]] = {}
SettingsT = TypeVar("SettingsT", bound="SluiceBaseSettings")
ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_BUCKET_FACTOR = 64
"""The most key buckets (virtual tasks) a partition may be split into."""


def _power_of_two(value: int) -> int:
    if value & (value - 1):
        raise ValueError(f"must be a power of two (1, 2, 4, ... {MAX_BUCKET_FACTOR}), got {value}")
    return value


BucketFactor = Annotated[int, Field(ge=1, le=MAX_BUCKET_FACTOR), AfterValidator(_power_of_two)]
"""A key-bucket factor option: a power of two from 1 to MAX_BUCKET_FACTOR (the fleet's and the
planner's settings share it)."""


def overridden(model: ModelT, **fields: Any) -> ModelT:
    """``model`` with the given fields that are set (not None) over it: a Dagster resource's
    fields over the settings they default to."""
    return model.model_copy(update={k: v for k, v in fields.items() if v is not None})


def settings_file() -> Path | None:
    """The settings file in force: ``SLUICE_CONFIG_FILE``, else ``./sluice.yaml`` if present."""
    named = os.environ.get(CONFIG_FILE_VAR)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise InvalidSetting(f"{CONFIG_FILE_VAR}={named!r}: no such file")
        return path.resolve()
    default = Path(DEFAULT_CONFIG_FILE)
    return default.resolve() if default.is_file() else None


@lru_cache(maxsize=8)
def _file_variables(path: Path, mtime_ns: int) -> dict[str, str]:
    """The file's mapping as environment-style strings (complex values as JSON)."""
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidSetting(f"settings file {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise InvalidSetting(
            f"settings file {path}: expected a mapping of variable names (SLUICE_...: value), "
            f"got {type(loaded).__name__}"
        )
    out = {}
    for key, value in loaded.items():
        if value is None:
            continue
        if isinstance(value, dict | list):
            out[str(key)] = json.dumps(value)
        elif isinstance(value, bool):
            out[str(key)] = str(value).lower()
        else:
            out[str(key)] = str(value)
    return out


def _current_file_variables() -> tuple[Path | None, dict[str, str]]:
    path = settings_file()
    if path is None:
        return None, {}
    return path, _file_variables(path, path.stat().st_mtime_ns)


class SettingsFileSource(EnvSettingsSource):
    """Reads the settings file exactly as the environment is read (prefixes, aliases, ``__``)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        _, variables = _current_file_variables()
        return {
            (key if self.case_sensitive else key.lower()): value
            for key, value in variables.items()
            if not (self.env_ignore_empty and value == "")
        }


class SluiceBaseSettings(BaseSettings):
    """Base of every Sluice settings model: environment, then the settings file, then defaults."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _MODELS[cls.__name__] = cls

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, SettingsFileSource(settings_cls))


def _variable_names(name: str, field: FieldInfo, prefix: str) -> list[str]:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return [str(c) for c in choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{prefix}{name}".upper()]


@dataclass(frozen=True)
class OptionRow:
    """One option as `sluice config` shows it."""

    variable: str
    value: str
    source: str
    description: str


def _shown(value: Any, secret: bool) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr) or secret:
        return MASK
    text = str(value.value if isinstance(value, Enum) else value)
    if "://" in text:
        parts = urlsplit(text)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", f":{MASK}@")
            text = urlunsplit(parts._replace(netloc=netloc))
    return text


def _walk(
    model: BaseModel, prefix: str, delimiter: str | None
) -> Iterator[tuple[str, list[str], Any, FieldInfo]]:
    """(path, variable names, value, field) of every leaf option, nested groups flattened."""
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel) and delimiter:
            yield from (
                (f"{name}.{path}", [f"{prefix}{name}{delimiter}{v}".upper() for v in names], val, f)
                for path, names, val, f in _walk(value, "", delimiter)
            )
            continue
        yield name, _variable_names(name, field, prefix), value, field


def option_rows(settings: BaseSettings, *, defaults: bool = False) -> list[OptionRow]:
    """Every option of ``settings`` with its effective value (secrets masked) and its source;
    with ``defaults``, each option's default instead (``settings`` may then be the class)."""
    model = settings if isinstance(settings, type) else type(settings)
    config = model.model_config
    prefix = config.get("env_prefix", "") or ""
    delimiter = config.get("env_nested_delimiter")
    path, file_vars = (None, {}) if defaults else _current_file_variables()
    file_upper = {k.upper() for k in file_vars}
    instance = model.model_construct() if defaults else settings
    rows = []
    for _, names, value, field in _walk(instance, prefix, delimiter):
        if defaults:
            source = "default"
        elif any(n in os.environ for n in names):
            source = "environment"
        elif any(n.upper() in file_upper for n in names):
            source = f"file {path}"
        else:
            source = "default"
        secret = field.annotation is not None and "SecretStr" in str(field.annotation)
        rows.append(
            OptionRow(names[0], _shown(value, secret), source, (field.description or "").strip())
        )
    return rows


def describe_validation_error(exc: ValidationError) -> str:
    """One line per bad option: the variable, the value given and what is allowed."""
    model = _MODELS.get(exc.title)
    config = model.model_config if model else {}
    prefix = config.get("env_prefix", "") or ""
    delimiter = config.get("env_nested_delimiter") or "__"
    lines = []
    for error in exc.errors():
        loc = [str(p) for p in error.get("loc", ())]
        variable = "?"
        if model is not None and loc:
            field = model.model_fields.get(loc[0])
            names = _variable_names(loc[0], field, prefix) if field else [loc[0]]
            variable = names[0] + "".join(f"{delimiter}{p}".upper() for p in loc[1:])
        given = error.get("input")
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{variable}={given!r}: {message}")
    return "; ".join(lines)


def load_settings(model: type[SettingsT]) -> SettingsT:
    """``model()`` from the environment and the settings file; a bad value is an
    `InvalidSetting` whose message names the variable, the value and what is allowed."""
    try:
        return model()
    except ValidationError as exc:
        raise InvalidSetting(describe_validation_error(exc)) from None


def as_environment(settings: BaseSettings) -> dict[str, str]:
    """``settings`` as the variables that rebuild it in a child process: how a supervisor
    hands its effective settings to the processes it starts, explicitly (secrets included,
    since the child needs them; never log the result)."""
    config = type(settings).model_config
    prefix = config.get("env_prefix", "") or ""
    delimiter = config.get("env_nested_delimiter")
    env = {}
    for _, names, value, _field in _walk(settings, prefix, delimiter):
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, dict | list):
            value = json.dumps(value)
        elif isinstance(value, Enum):
            value = value.value
        env[names[0]] = str(value)
    return env
