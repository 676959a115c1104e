"""The one place that builds Dagster ``Definitions``; ``workspace.yaml`` points here.

Asset packages are loaded per group (``assets/raw``, ``assets/views``) with the group names
of :mod:`assets.constants`; checks, the correction job and schedule and the lag sensor are
built from the same views; the resources are the set ``SLUICE_ENV`` picks.
"""

from __future__ import annotations

import logging

import dagster as dg

import assets.raw
import assets.views
from assets.constants import RAW_GROUP, VIEWS_GROUP
from orchestration.jobs import build_correction_job, scale_stream_workers
from orchestration.resources import get_resources
from orchestration.schedules import build_correction_schedule
from orchestration.sensors import make_autoscaling_sensor, make_realtime_lag_sensor
from quality.checks import build_correction_checks

__all__ = ["defs"]

log = logging.getLogger(__name__)

VIEWS = assets.views.VIEWS

correction_job = build_correction_job(VIEWS)

defs = dg.Definitions(
    assets=[
        *dg.load_assets_from_package_module(assets.raw, group_name=RAW_GROUP),
        *dg.load_assets_from_package_module(assets.views, group_name=VIEWS_GROUP),
    ],
    asset_checks=build_correction_checks(VIEWS),
    jobs=[correction_job, scale_stream_workers],
    schedules=[build_correction_schedule(correction_job)],
    sensors=[make_realtime_lag_sensor(VIEWS), make_autoscaling_sensor(scale_stream_workers)],
    resources=get_resources(),
)
