"""Sensors, each from a factory with a JSON cursor and a unit test through build_sensor_context.

May import: ``assets``, ``orchestration.resources``, the control-plane library and ``pipelines``.
"""

from orchestration.sensors.alerts import CHECK_ALERT_SENSOR, RUN_ALERT_SENSOR, make_alert_sensors
from orchestration.sensors.archive_hours import make_archive_hours_sensor
from orchestration.sensors.autoscaler import SCALE_JOB, decide_scaling, make_autoscaling_sensor
from orchestration.sensors.events_offsets import EVENTS_SENSOR, make_events_sensor
from orchestration.sensors.realtime_lag import make_realtime_lag_sensor, realtime_observations
from orchestration.sensors.spot import SPOT_SENSOR, make_spot_interruption_sensor

__all__ = [
    "CHECK_ALERT_SENSOR",
    "EVENTS_SENSOR",
    "RUN_ALERT_SENSOR",
    "SCALE_JOB",
    "SPOT_SENSOR",
    "decide_scaling",
    "make_alert_sensors",
    "make_archive_hours_sensor",
    "make_autoscaling_sensor",
    "make_events_sensor",
    "make_realtime_lag_sensor",
    "make_spot_interruption_sensor",
    "realtime_observations",
]
