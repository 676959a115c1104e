"""The closed-loop autoscale test's planner settings: the defaults with time compressed to the
test's seconds. Shared with the replays of its recorded snapshots
(``test_autoscale_mcts.py``), which must decide as the live sensor did."""

from __future__ import annotations

from orchestration.control_plane.autoscaling.config import (
    AutoscaleSettings,
    ForecastSettings,
    MctsSettings,
    SimulationSettings,
)

MAX_WORKERS = 3
SLA_S = 10.0  # time lag: newest record produced minus newest record processed
TIME_SCALE = SimulationSettings().sla_s / SLA_S
"""Production seconds per test second (60). The planner's defaults are tuned for a 10-minute
SLA (``simulation.sla_s``, 600 s), plan steps of 5 minutes, a 2-hour horizon and windows of
hours; here the SLA is SLA_S = 10 s and the sensor ticks every 2 s, so every setting that is a
span of time is divided by 600 / 10 = 60 (a 5 s plan step, a 120 s horizon, a 15 s level
window, a 60 s down-floor window, the sensor's 300 s cooldown becomes 5 s, ...). What is not time stays: prices per worker-hour and per SLA
minute scale alike with the clock (the planner compares cost rates), so the SLA's weight
against hardware is unchanged. Two settings carry hours in their unit and are scaled too: the
fixed rescale penalty (worker-hours: a quarter of an hour of one worker becomes 15 s of one)
and the rescale budget (1 an hour becomes 1 a scaled hour, 60 s). The pause of a moved task is
measured, not tuned, so its default stands, and so is the time a scale-up's new workers take
to start (``fleet.scale_up_start_s``, 5 s): real seconds here as in production."""

COOLDOWN_S = AutoscaleSettings.model_fields["sensor_cooldown_s"].default / TIME_SCALE
MCTS_SPANS = (
    "c_s",
    "horizon_s",
    "plan_step_s",
    "billing_granularity_s",
    "rescale_penalty_s",
    "rescale_budget_window_s",
    "rescale_budget_min_span_s",
    "down_floor_window_s",
    "min_dwell_s",
)
FORECAST_SPANS = (
    "season_s",
    "level_window_s",
    "smoothing_s",
    "persistence_tau_s",
    "trend_window_s",
    "skill_window_s",
    "noise_window_s",
    "skill_lead_s",
)


def compressed_planner_env() -> dict[str, str]:
    """The mcts and forecast defaults with their time spans divided by TIME_SCALE."""
    mcts, forecast = MctsSettings(), ForecastSettings()
    env = {
        f"SLUICE_AUTOSCALE_MCTS__{name.upper()}": str(getattr(mcts, name) / TIME_SCALE)
        for name in MCTS_SPANS
    }
    env |= {
        f"SLUICE_AUTOSCALE_FORECAST__{name.upper()}": str(getattr(forecast, name) / TIME_SCALE)
        for name in FORECAST_SPANS
    }
    env["SLUICE_AUTOSCALE_MCTS__RESCALE_COST"] = str(mcts.rescale_cost / TIME_SCALE)
    env["SLUICE_AUTOSCALE_MCTS__RESCALE_BUDGET_PER_H"] = str(mcts.rescale_budget_per_h * TIME_SCALE)
    return env


AUTOSCALE_ENV = {  # no SLUICE_AUTOSCALE_POLICY: the sensor's default policy is under test
    "SLUICE_AUTOSCALE_SIMULATION__SLA_S": str(SLA_S),  # mcts plans against sla_safety x it
    "SLUICE_AUTOSCALE_SENSOR_COOLDOWN_S": str(COOLDOWN_S),
    "SLUICE_AUTOSCALE_FLEET__MAX_WORKERS": str(MAX_WORKERS),
    "SLUICE_AUTOSCALE_GUARDS__COOLDOWN_S": "0",
    "SLUICE_AUTOSCALE_GUARDS__HYSTERESIS_WORKERS": "0",
    # the planner's time runs TIME_SCALE times faster here, a process start does not: a
    # measured start (20 s at load 15) would be priced as 20 compressed minutes against a 10 s
    # SLA, so the start is the default a local agent process is priced at, as the user may set
    "SLUICE_AUTOSCALE_FLEET__SCALE_UP_START_S": "5",
    **compressed_planner_env(),
}
