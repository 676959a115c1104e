"""Alerts to a person: Slack-compatible JSON posted to ``SLUICE_ALERT_WEBHOOK_URL``.

Slack's incoming webhooks (and Mattermost's, Teams' Slack-compatible ones, or any small HTTP
service) take ``{"text": ...}``; the text names what failed, why, and links to the run or the
asset in the Dagster UI (``SLUICE_DAGSTER_URL``, which ``sluice up`` sets). Unset, nothing is
posted. A webhook that does not answer is logged, never raised: an alert must not fail the
sensor that found the failure. Deciding that something is a new incident is the caller's
(the sensors keep what they alerted on in their cursors).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass

from orchestration.control_plane.settings import get_dagster_settings

__all__ = ["Alert", "alert_link", "post_alert"]

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Alert:
    """One incident: what (a title), why (details), where to look (a UI path), and its kind."""

    kind: str
    """``run_failure``, ``check_failure``, ``realtime_lag`` or ``table_lag``."""
    title: str
    details: str
    ui_path: str
    """Path in the Dagster UI, e.g. ``/runs/<id>`` or ``/assets/<key>``."""

    def payload(self, base_url: str | None) -> dict[str, str]:
        """Slack-compatible JSON: ``text`` with a ``<url|label>`` link (plain URL if no base)."""
        link = alert_link(base_url, self.ui_path)
        text = f"*Sluice: {self.title}*\n{self.details}\n<{link}|open in Dagster>"
        return {"text": text, "sluice_kind": self.kind, "sluice_link": link}


def alert_link(base_url: str | None, ui_path: str) -> str:
    base = (base_url or "http://127.0.0.1:3000").rstrip("/")
    return f"{base}{ui_path}"


def post_alert(alert: Alert, url: str | None = None, base_url: str | None = None) -> bool:
    """POST ``alert`` to the webhook (default: the settings'); True if it was accepted."""
    settings = get_dagster_settings()
    if url is None and settings.alert_webhook_url is not None:
        url = settings.alert_webhook_url.get_secret_value()
    if not url:
        return False
    body = json.dumps(alert.payload(base_url or settings.dagster_url)).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            ok = 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.warning("alert %r not delivered to the webhook: %s", alert.title, exc)
        return False
    if not ok:
        log.warning("alert %r: the webhook answered %s", alert.title, response.status)
    return ok
