"""The layout before the tables, which only `sluice tables migrate` reads: its manifest."""

from __future__ import annotations

import pytest

from pipelines.serving.older_layout import (
    ManifestError,
    PublishedManifest,
    published_key,
    read_manifest,
    write_manifest,
)
from pipelines.storage import open_store


def test_a_manifest_reads_back_as_written_and_keeps_the_old_json_layout(tmp_path) -> None:
    store = open_store(str(tmp_path))
    assert read_manifest(store, "v", 0) is None
    manifest = PublishedManifest(
        version=2, files=("a.parquet",), events=10, hours=("1970-01-01T00",)
    )
    write_manifest(store, "v", 0, manifest)
    assert read_manifest(store, "v", 0) == manifest
    # what earlier versions wrote (a dict with lists) is read the same way
    store.put(published_key("v", 0), b'{"version": 3, "files": ["b"], "kind": "batch", "x": 1}')
    assert read_manifest(store, "v", 0) == PublishedManifest(version=3, files=("b",))


def test_a_broken_manifest_is_a_clear_error(tmp_path) -> None:
    store = open_store(str(tmp_path))
    store.put(published_key("v", 0), b'{"files": []}')
    with pytest.raises(
        ManifestError,
        match=r"_published.json is not a published manifest: version: Field required$",
    ):
        read_manifest(store, "v", 0)
