"""Sensors, each from a factory with a JSON cursor and a unit test through build_sensor_context."""

from orchestration.sensors.realtime_lag import make_realtime_lag_sensor, realtime_observations

__all__ = ["make_realtime_lag_sensor", "realtime_observations"]
