"""The EC2 instance metadata service (IMDSv2), for what an agent must know about its machine:
its instance id, and whether AWS is about to take it (a spot interruption notice, two minutes
ahead) or recommends moving off it (a rebalance recommendation).

IMDSv2 is a session protocol: PUT ``/latest/api/token`` with a TTL header returns a token,
every GET carries it; a notice path answers 404 until there is a notice. The token is
renewed before it expires and after a 401. Errors never raise out of :meth:`poll`: a poller
that cannot reach the service says so in the log and tries again.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

__all__ = ["InstanceMetadata", "Notice"]

log = logging.getLogger(__name__)

TOKEN_TTL_S = 21_600
SPOT_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
INSTANCE_ID = "/latest/meta-data/instance-id"


@dataclass(frozen=True)
class Notice:
    """What the metadata service announced."""

    kind: str
    """``interruption`` (the instance will be stopped or terminated at ``time``) or
    ``rebalance`` (its capacity is at elevated risk: move off early)."""
    time: str
    """When (ISO 8601, UTC), as AWS wrote it."""
    action: str = ""
    """For an interruption: terminate, stop or hibernate."""


class InstanceMetadata:
    def __init__(self, endpoint: str, timeout_s: float = 1.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self._token: str | None = None
        self._token_until = 0.0

    def _request(self, method: str, path: str, headers: dict[str, str]) -> str:
        request = urllib.request.Request(f"{self.endpoint}{path}", method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read().decode()

    def _session(self) -> str:
        if self._token is None or time.monotonic() >= self._token_until:
            self._token = self._request(
                "PUT",
                "/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
            )
            self._token_until = time.monotonic() + TOKEN_TTL_S - 60
        return self._token

    def get(self, path: str) -> str | None:
        """The body at ``path``, or None where there is nothing (404)."""
        for attempt in (1, 2):
            try:
                return self._request("GET", path, {"X-aws-ec2-metadata-token": self._session()})
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401 and attempt == 1:  # the token expired: a new session
                    self._token = None
                    continue
                raise
        return None

    def instance_id(self) -> str | None:
        return self.get(INSTANCE_ID)

    def poll(self) -> list[Notice]:
        """The notices standing now (none when the service cannot be reached)."""
        notices = []
        try:
            action = self.get(SPOT_ACTION)
            if action is not None:
                body = json.loads(action)
                notices.append(Notice("interruption", body["time"], body.get("action", "")))
            rebalance = self.get(REBALANCE)
            if rebalance is not None:
                notices.append(Notice("rebalance", json.loads(rebalance)["noticeTime"]))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("instance metadata at %s: %s", self.endpoint, exc)
        return notices
