"""Fixtures of the end-to-end tests that several modules share."""

from tests.fixtures.agents import agents_factory, agents_stream, pg_url  # noqa: F401
from tests.fixtures.chaos import chaos_rng, chaos_seed  # noqa: F401
