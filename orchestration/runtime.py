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

    def active_views(self, path: str | Path | None = None) -> list[View]:
        """The file's views, overridden by what was deployed (e.g. from Dagster), minus disabled.

        A deployment carries the whole definition, so a view deployed from the UI runs even if
        the file on this machine is older.
        """
        from pipelines.views import parse_views

        by_name = {v.name: v for v in self.views(path)}
        for deployed in self.control.deployed_views():
            if deployed["state"] == "Disabled":
                by_name.pop(deployed["name"], None)
                continue
            (view,) = parse_views(
                [deployed["definition"]], source=f"deployed view {deployed['name']}"
            )
            by_name[view.name] = view
        return list(by_name.values())

    def deployment_version(self) -> str:
        """Changes whenever a view is deployed, changed or disabled; the fleet reloads on it."""
        parts = [
            f"{d['name']}={d['fingerprint']}:{d['state'] == 'Disabled'}"
            for d in self.control.deployed_views()
        ]
        return "|".join(parts)

    def mark_deployed_running(self) -> None:
        for deployed in self.control.deployed_views():
            if deployed["state"] in ("Scheduled", "Waiting"):
                self.control.set_view_state(deployed["name"], "Running")

    def view(self, name: str, path: str | Path | None = None) -> View:
        from pipelines.exceptions import QueryError

        views = {v.name: v for v in self.views(path)}
        if name not in views:
            raise QueryError(f"unknown view {name!r} (views: {', '.join(sorted(views))})")
        return views[name]

    def bootstrap(self) -> str:
        return resolve_bootstrap(self.settings, self.kafka)
