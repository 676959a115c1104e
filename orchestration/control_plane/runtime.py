"""Open what a command needs from the settings: storage, control store, views, broker address.

The views in force are resolved here for every caller (workers, query, status, and the Dagster
code location when it loads), from the views file and the control store's deployments.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from pipelines.aggregators import import_modules
from pipelines.config import KafkaSettings, SluiceSettings, get_settings
from pipelines.control import ControlStore
from pipelines.exceptions import QueryError
from pipelines.kafka import resolve_bootstrap
from pipelines.storage import ObjectStore, open_store
from pipelines.views import ResolvedView, View, load_views, resolve_views_file, views_in_force

if TYPE_CHECKING:  # pyiceberg loads where tables are opened, not at every process start
    from pipelines.tables import ViewTables

__all__ = ["Runtime"]

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: SluiceSettings
    kafka: KafkaSettings

    def __post_init__(self) -> None:
        import_modules(self.settings.aggregator_modules)  # before any view names them

    @classmethod
    def from_env(cls) -> Runtime:
        return cls(get_settings(), KafkaSettings())

    @cached_property
    def store(self) -> ObjectStore:
        """The storage root; its views publish to and are read from :attr:`tables`."""
        settings = self.settings
        return open_store(
            settings.resolved_storage_root, settings.s3_endpoint_url, settings.storage_timeout_s
        )

    @cached_property
    def tables(self) -> ViewTables:
        """The views' Iceberg tables (catalog from the settings, warehouse the storage root),
        built once and handed to whatever reads or writes the views' results."""
        from pipelines.tables import TablesConfig, ViewTables

        return ViewTables(TablesConfig.from_settings(self.settings, self.store.root))

    @cached_property
    def control(self) -> ControlStore:
        settings = self.settings
        return ControlStore(settings.resolved_control_store_url, settings.control_store_timeout_s)

    def views(self, path: str | Path | None = None) -> list[View]:
        """The views file's own definitions, before deployments: what a user edits. Everything
        that runs, queries or corrects a view uses :meth:`resolved_views` instead."""
        return load_views(path or self.settings.views_file)

    def resolved_views(self, path: str | Path | None = None) -> dict[str, ResolvedView]:
        """Every view from its newest change, file or deployment (:mod:`pipelines.views.resolve`)."""
        return resolve_views_file(path or self.settings.views_file, self.control.deployed_views())

    def views_in_force(
        self, path: str | Path | None = None
    ) -> tuple[list[View], dict[str, dict[str, Any]]]:
        """Every view resolved (disabled ones marked) and the definition each deploys. A
        control store that does not exist yet is not created, and one that cannot be read
        leaves the file alone to decide (with a warning): a code location must still load."""
        return views_in_force(path or self.settings.views_file, self.deployments())

    def deployments(self) -> list[dict[str, Any]]:
        """The views deployed in the control store; none from a control store that does not
        exist yet (it is not created) or that cannot be read (with a warning)."""
        url = self.settings.resolved_control_store_url
        if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
            return []
        try:
            return self.control.deployed_views()
        except SQLAlchemyError as exc:
            log.warning("views: control store unreadable (%s); using the views file alone", exc)
            return []

    def active_views(self, path: str | Path | None = None) -> list[View]:
        """The views workers run: resolved, minus those whose newest change disabled them."""
        return self.running_views(path)[0]

    def deployment_version(self, path: str | Path | None = None) -> str:
        """Changes whenever the views in force change (a deployment, a Disabled state, an edit of
        the views file); the fleet reloads on it."""
        return self.running_views(path)[1]

    def running_views(self, path: str | Path | None = None) -> tuple[list[View], str]:
        """:meth:`active_views` and their :meth:`deployment_version`, from one reading of the
        control store. Read apart, a change landing between the two left an agent with the
        old views under the new version, so it never reloaded them."""
        resolved = self.resolved_views(path)
        version = "|".join(f"{name}={r.view.fingerprint}:{r.runs}" for name, r in resolved.items())
        return [r.view for r in resolved.values() if r.runs], version

    def mark_deployed_running(self) -> None:
        for deployed in self.control.deployed_views():
            if deployed["state"] in ("Scheduled", "Waiting"):
                self.control.set_view_state(deployed["name"], "Running")

    def view(self, name: str, path: str | Path | None = None) -> View:
        """The definition of ``name`` in force (disabled or not: its data can still be read)."""
        resolved = self.resolved_views(path)
        if name not in resolved:
            raise QueryError(f"unknown view {name!r} (views: {', '.join(resolved)})")
        return resolved[name].view

    def bootstrap(self) -> str:
        return resolve_bootstrap(self.settings, self.kafka)
