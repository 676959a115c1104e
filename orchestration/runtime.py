"""Open what a command needs from the settings: storage, control store, views, broker address."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pipelines.config import KafkaSettings, SluiceSettings, get_settings
from pipelines.control import ControlStore
from pipelines.kafka import resolve_bootstrap
from pipelines.storage import ObjectStore, open_store
from pipelines.views import View, load_views

__all__ = ["Runtime"]


@dataclass
class Runtime:
    settings: SluiceSettings
    kafka: KafkaSettings

    @classmethod
    def from_env(cls) -> Runtime:
        return cls(get_settings(), KafkaSettings())

    @cached_property
    def store(self) -> ObjectStore:
        return open_store(self.settings.resolved_storage_root, self.settings.s3_endpoint_url)

    @cached_property
    def control(self) -> ControlStore:
        return ControlStore(self.settings.resolved_control_store_url)

    def views(self, path: str | Path | None = None) -> list[View]:
        return load_views(path or self.settings.views_file)

    def view(self, name: str, path: str | Path | None = None) -> View:
        from pipelines.exceptions import QueryError

        views = {v.name: v for v in self.views(path)}
        if name not in views:
            raise QueryError(f"unknown view {name!r} (views: {', '.join(sorted(views))})")
        return views[name]

    def bootstrap(self) -> str:
        return resolve_bootstrap(self.settings, self.kafka)
