"""The IMDSv2 poller against a local server speaking the protocol: token, then GET with it;
404 until a notice appears; a new session after the token is refused."""

from __future__ import annotations

from orchestration.control_plane.fleet.imds import InstanceMetadata, Notice
from tests.fixtures.imds import FakeImds


def test_no_notice_until_one_appears_then_both_kinds() -> None:
    with FakeImds("i-0abc") as imds:
        client = InstanceMetadata(imds.url)
        assert client.instance_id() == "i-0abc"
        assert client.poll() == []
        imds.interrupt("2026-11-23T10:00:00Z")
        assert client.poll() == [Notice("interruption", "2026-11-23T10:00:00Z", "terminate")]
        imds.recommend_rebalance("2026-11-23T09:58:00Z")
        assert Notice("rebalance", "2026-11-23T09:58:00Z") in client.poll()
        puts = [path for method, path in imds.requests if method == "PUT"]
        assert puts == ["/latest/api/token"]  # one session for all of it


def test_a_refused_token_starts_a_new_session() -> None:
    with FakeImds() as imds:
        client = InstanceMetadata(imds.url)
        assert client.poll() == []
        imds.expire_tokens()
        imds.interrupt("2026-11-23T10:00:00Z", "stop")
        assert client.poll()[0].action == "stop"
        assert [m for m, _ in imds.requests].count("PUT") == 2


def test_an_unreachable_service_is_no_notice_and_no_crash(caplog) -> None:
    with FakeImds() as imds:
        url = imds.url
    assert InstanceMetadata(url, timeout_s=0.2).poll() == []
    assert "instance metadata" in caplog.text
