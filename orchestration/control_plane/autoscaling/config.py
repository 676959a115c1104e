"""Every autoscaling option, typed, with its default and what it means: the documented place.

Settings load from ``SLUICE_AUTOSCALE_*`` environment variables; nested groups use ``__``
(``SLUICE_AUTOSCALE_MCTS__SAMPLES=128``). ``sluice config --defaults --format markdown``
renders them (with every other setting) into docs/settings.md, so the table there can never
drift from the code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pipelines.settings import BucketFactor, SluiceBaseSettings

__all__ = [
    "DEPRECATED_SEARCH",
    "POLICY_NAMES",
    "AutoscaleSettings",
    "AwsSettings",
    "Ds2Settings",
    "EcsSettings",
    "FleetSettings",
    "ForecastSettings",
    "GuardSettings",
    "KedaSettings",
    "MctsSettings",
    "SimulationSettings",
    "SpotCostSettings",
    "StaticSettings",
    "ThresholdSettings",
]

ENV_PREFIX = "SLUICE_AUTOSCALE_"


class FleetSettings(BaseModel):
    """The stream fleet being scaled."""

    partitions: int = Field(
        288,
        ge=1,
        description="Kafka partitions of the input topic (upper bound on useful workers).",
    )
    worker_rate: float = Field(
        100_000.0,
        gt=0,
        description="True processing rate of one worker, msg per busy-second (what one agent "
        "with the example views carries: benchmarks/ingest.py, figures in docs/benchmarks.md).",
    )
    max_bucket_factor: BucketFactor = Field(
        1,
        description="Most key buckets per partition (virtual tasks, a power of two): the "
        "planner's and the simulator's assumption, so counts above the partitions can carry "
        "more. The autoscaler sensor reads the live fleet's SLUICE_MAX_BUCKET_FACTOR instead.",
    )
    min_workers: int = Field(1, ge=1, description="Fewest workers any policy may ask for.")
    max_workers: int | None = Field(
        None,
        ge=1,
        description="Most workers any policy may ask for; default: the partitions times "
        "max_bucket_factor.",
    )
    move_pause_s: float = Field(
        1.6,
        ge=0,
        description="How long a task a rescale moves stands still (checkpoint, hand-off, "
        "restore), s; a rescale moves only the tasks the new count needs moved. The autoscaler sensor "
        "fits it (and the next one) from the fleet's recorded rescales once it has "
        "pause_fit_min_rescales of them. Default: the fit of measured rescales, hand-offs in "
        "parallel (benchmarks/rescale_pause.py).",
    )
    move_pause_per_state_mb_s: float = Field(
        2.5,
        ge=0,
        description="Extra pause of a moved task per MB of window state (checkpointed Parquet) "
        "it carries, s. Default: what a final checkpoint and its restore take per MB "
        "(benchmarks/rescale_pause.py).",
    )
    scale_up_start_s: float = Field(
        5.0,
        ge=0,
        description="How long after a scale-up is decided its new workers start taking tasks, "
        "s: the capacity they add is missing until then. Unset, the autoscaler sensor prices "
        "the median start the fleet measured (request to applied, last 10 scale-ups), else the "
        "backend's typical start (a local agent process 5 s, an EC2 instance "
        "aws.instance_start_s, an ECS task ecs.task_start_s), and the simulator this default; "
        "set, it is used as given.",
    )
    state_mb_per_task: float = Field(
        1.0,
        ge=0,
        description="Window state per task, MB: the simulator's assumption (the autoscaler sensor "
        "reads the mean the workers report).",
    )
    pause_fit_min_rescales: int = Field(
        3,
        ge=1,
        description="Recorded rescales the autoscaler sensor needs before it fits the pause.",
    )
    pause_fit_rescales: int = Field(
        50, ge=1, description="How many of the newest recorded rescales the fit reads."
    )

    @property
    def tasks(self) -> int:
        """The most tasks the fleet can have: partitions times the bucket factor."""
        return self.partitions * self.max_bucket_factor

    @property
    def upper(self) -> int:
        """Effective maximum worker count."""
        return min(self.max_workers or self.tasks, self.tasks)


class SimulationSettings(BaseModel):
    """How a trace is replayed."""

    peak_rate: float = Field(
        3_200_000.0,
        gt=0,
        description="Input rate (msg/s) the trace's maximum is scaled to (32 default workers).",
    )
    step_s: float = Field(
        300.0, gt=0, description="Decision interval: simulated seconds between policy decisions."
    )
    tick_s: float = Field(
        10.0, gt=0, description="Resolution of the backlog/lag integration inside a step, s."
    )
    sla_s: float = Field(600.0, gt=0, description="Time-lag SLA, s: lag beyond it is a violation.")
    days: float | None = Field(
        None, gt=0, description="Replay only the first N days of the trace (default: all of it)."
    )


class SpotCostSettings(BaseModel):
    """What workers cost and how often spot takes them (the simulator's cost model).

    Defaults: an m5.xlarge in us-east-1 (on demand $0.192/h, spot about 60% less) and an
    interruption rate in AWS's "<5%" frequency band (a spot instance is reclaimed about once in
    twenty days); a moved task pauses for about what the failover benchmark measures for a
    notice plus a restore.
    """

    on_demand_hour_price: float = Field(0.192, gt=0, description="$ per on-demand worker-hour.")
    spot_hour_price: float = Field(0.0768, gt=0, description="$ per spot worker-hour.")
    spot_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the workers on spot (Mist ran 1.0); 0 = all on demand.",
    )
    interruptions_per_worker_day: float = Field(
        0.05, ge=0, description="Spot interruptions per spot worker and day (a Poisson rate)."
    )
    interruption_times_s: list[float] | None = Field(
        None,
        description="A recorded list of interruption times (s from the replay's start) instead "
        "of the rate.",
    )
    task_move_pause_s: float = Field(
        15.0, ge=0, description="Processing a moved task loses while it moves, s."
    )
    seed: int = Field(0, description="Seed of the injected interruptions.")


class StaticSettings(BaseModel):
    """`static`: the baseline provisioned for the peak."""

    workers: int | None = Field(
        None, ge=1, description="Fixed worker count; default: the fewest that carry the peak rate."
    )


class ThresholdSettings(BaseModel):
    """`threshold`: the Palo Alto Networks rules."""

    backlog_time_up_s: float = Field(
        120.0, gt=0, description="Scale up when backlog drain time (backlog/throughput) exceeds it."
    )
    cpu_up: float = Field(0.9, gt=0, le=1, description="Scale up when utilisation exceeds it.")
    cpu_down: float = Field(0.7, gt=0, le=1, description="Scale down only below this utilisation.")
    backlog_time_down_s: float = Field(
        10.0, ge=0, description="Scale down only when drain time is below it (and not growing)."
    )
    target_cpu: float = Field(
        0.8, gt=0, le=1, description="Utilisation the CPU-based sizing aims for (W*cpu/target)."
    )
    catch_up_target_s: float = Field(
        300.0, gt=0, description="Time to drain a steady backlog in: W_extra = W*backlog_time/it."
    )


class Ds2Settings(BaseModel):
    """`ds2`: the Flink Kubernetes-operator autoscaler."""

    target_utilisation: float = Field(
        0.6, gt=0, le=1, description="Utilisation of true capacity the fleet is sized to."
    )
    utilisation_min: float = Field(
        0.4, ge=0, le=1, description="Lower edge of the no-rescale band of utilisation."
    )
    utilisation_max: float = Field(
        0.8, gt=0, le=1, description="Upper edge of the no-rescale band of utilisation."
    )
    catch_up_s: float = Field(
        1800.0, gt=0, description="Time to catch up the current lag and a restart's backlog, s."
    )
    restart_time_s: float = Field(
        60.0, ge=0, description="Expected restart time whose backlog the spare capacity covers, s."
    )
    scale_down_interval_s: float = Field(
        3600.0, ge=0, description="Scale down only to the largest recommendation of this window, s."
    )
    align_to_partitions: bool = Field(
        True, description="Round parallelism up to a divisor of the partition count, as Flink does."
    )


class KedaSettings(BaseModel):
    """`keda`: the KEDA Kafka scaler behind a Kubernetes HPA."""

    lag_threshold: float = Field(
        6_000_000.0,
        gt=0,
        description="lagThreshold: target lag (msg) per replica (60 s of the default worker).",
    )
    stabilisation_window_s: float = Field(
        300.0, ge=0, description="HPA scale-down stabilisation window (largest recent wins), s."
    )
    tolerance: float = Field(
        0.1, ge=0, description="HPA tolerance: ignore ratio changes within +-tolerance."
    )


class ForecastSettings(BaseModel):
    """Traffic forecast used by the planner: yesterday's shape plus today's level and trend."""

    season_s: float = Field(86400.0, gt=0, description="Season length, s (a day).")
    level_window_s: float = Field(
        900.0, gt=0, description="Window of the current level (mean input rate), s."
    )
    smoothing_s: float = Field(
        1800.0, ge=0, description="Width of the moving average applied to last season's profile, s."
    )
    persistence_tau_s: float = Field(
        1800.0, gt=0, description="Decay time of the current level's weight against the season, s."
    )
    trend_window_s: float = Field(
        3600.0, gt=0, description="Window of the linear trend used without a season of history, s."
    )
    skill_window_s: float = Field(
        43200.0, gt=0, description="Window over which the season's recent skill is measured, s."
    )
    noise_window_s: float = Field(
        7200.0,
        ge=0,
        description="What the season does not explain is noise: the current rate and level are "
        "blended, by (1 - the season's trust), towards the mean of this window, s (0: off).",
    )
    skill_lead_s: float = Field(
        3600.0, gt=0, description="Lead of the persistence forecast the season is compared with, s."
    )


class MctsSettings(BaseModel):
    """`mcts`: the Metamarkets Monte-Carlo tree search planner; `horizon` plans on the same
    problem (forecast, budget, floor) and reads its prices here too."""

    k: int = Field(2, ge=2, description="Children of n are n, n+-1, n+-k, n+-k^2, ... in bounds.")
    c_s: float = Field(300.0, gt=0, description="Time spent in a root child, s (c).")
    m: float = Field(2.0, ge=1, description="Growth of time per node with depth: c*m^depth.")
    horizon_s: float = Field(7200.0, gt=0, description="Planning horizon every leaf runs to, s.")
    plan_step_s: float = Field(
        300.0, gt=0, description="Resolution of the planner's fluid model of backlog, s."
    )
    samples: int = Field(
        16, ge=1, description="Tree expansions per decision (each evaluates all children)."
    )
    exploration: float = Field(0.7, ge=0, description="UCT exploration weight.")
    max_decision_s: float = Field(
        0.5, gt=0, description="Wall-clock budget of one decision; the search stops early at it."
    )
    worker_hour_price: float = Field(1.0, gt=0, description="Hardware cost of one worker-hour.")
    billing_granularity_s: float = Field(
        60.0, gt=0, description="A started worker is billed in multiples of this, s."
    )
    sla_cost_per_minute: float = Field(
        50.0,
        ge=0,
        description="Cost of one minute with lag beyond the SLA (in worker-hour prices).",
    )
    rescale_cost: float = Field(
        0.25,
        ge=0,
        description="Fixed part of the penalty per rescale (worker-hour prices), on top of the "
        "capacity its pause loses (workers x pause); the backlog the pause leaves is modelled.",
    )
    rescale_penalty_s: float = Field(
        900.0,
        ge=0,
        description="Part of the penalty that grows with the fleet: seconds of the new fleet's "
        "work per rescale (more tasks to stop, hand over and restart).",
    )
    rescale_budget_per_h: float = Field(
        1.0,
        ge=0,
        description="Rescales per hour the planner aims at: the penalty is scaled by "
        "e^(gain x (rescales in the window / budget - 1)), at least rescale_budget_floor (0: a "
        "fixed penalty).",
    )
    rescale_budget_window_s: float = Field(
        86400.0, gt=0, description="Window over which the fleet's rescales are counted, s."
    )
    rescale_budget_min_span_s: float = Field(
        10800.0,
        gt=0,
        description="Shortest span the count is spread over, s (a young fleet's first rescales "
        "do not price the next ones out).",
    )
    rescale_budget_gain: float = Field(
        3.0, ge=0, description="How steeply the penalty follows the budget (the gain above)."
    )
    rescale_budget_floor: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Least factor of the penalty while the fleet rescales less than its budget: "
        "below the budget the factor is e^(gain x (used / budget - 1)) down to this, so a "
        "budget left unused buys worker-hours (1: never lowered, the default: lower, the plan "
        "follows a noisy flat load's dips).",
    )
    down_floor_window_s: float = Field(
        3600.0,
        ge=0,
        description="The plan never scales down below the count that carries the mean input "
        "rate of this window, s (0: no floor): noise dips are not worth a rescale.",
    )
    min_dwell_s: float = Field(
        0.0,
        ge=0,
        description="Least time a count reached by a rescale holds before the plan may take it "
        "down, s (ups are always allowed).",
    )
    dwell_per_cost_s: float = Field(
        0.0,
        ge=0,
        description="Dwell added per worker-hour price of a rescale's cost (penalty + lost "
        "capacity), s: a count holds min_dwell_s + this x cost before going down. Off by "
        "default: holding after a burst costs more worker-hours than the rescales it saves.",
    )
    hysteresis: float = Field(
        0.0,
        ge=0,
        description="The first move must beat holding the count to the horizon by this share "
        "of holding's predicted cost (0: any saving).",
    )
    sla_safety: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Plan against this fraction of the SLA: room for the forecast's error.",
    )
    forecast_margin: float = Field(
        0.05, ge=0, description="Plan for the forecast times (1 + margin)."
    )
    use_forecast: bool = Field(
        True, description="Use the seasonal forecast; off: assume the current rate persists."
    )
    seed: int = Field(
        0, description="Seed of the tree search's tie-breaking; same seed, same plan."
    )
    search: Literal["tree", "horizon"] = Field(
        "tree",
        description="Deprecated: set the policy to `horizon` instead. `horizon` here makes the "
        "`mcts` policy the `horizon` policy (with a warning); `tree`, the default, changes "
        "nothing.",
    )
    horizon_rescale_price_h: float = Field(
        1.0,
        ge=0,
        description="`horizon` policy: what a rescale costs on top of the capacity its pause and "
        "start lose, worker-hours (raised while the fleet is over its rescale budget; a flat "
        "price alone holds a small fleet's burst count for hours: see the part per worker).",
    )
    horizon_rescale_price_per_worker_h: float = Field(
        0.25,
        ge=0,
        description="`horizon` policy: what a rescale costs per worker of the new count, "
        "worker-hours, on top of horizon_rescale_price_h (scaled by the budget's factor too): a "
        "price that follows the fleet's size, as the tree's rescale_penalty_s does.",
    )


class GuardSettings(BaseModel):
    """Vetoes applied after every policy, before the realizer acts."""

    cooldown_s: float = Field(
        0.0, ge=0, description="Veto any rescale within this long of the previous one, s."
    )
    hysteresis_workers: int = Field(
        0, ge=0, description="Veto changes of at most this many workers (0: allow all)."
    )


class AwsSettings(BaseModel):
    """The AWS Auto Scaling realizer (Metamarkets' Guardian)."""

    group_name: str = Field("sluice-workers", description="Auto Scaling group of the workers.")
    region: str = Field("us-east-1", description="AWS region of the group.")
    endpoint_url: str | None = Field(
        None, description="Endpoint override (e.g. a moto server); default: AWS."
    )
    wait_timeout_s: float = Field(
        600.0, gt=0, description="Deadline for the instances to be InService after a rescale, s."
    )
    poll_interval_s: float = Field(
        5.0, gt=0, description="How often to poll the group while waiting, s."
    )
    instance_start_s: float = Field(
        180.0,
        ge=0,
        description="How long a scale-out's new EC2 instances take to be InService with their "
        "agents registered, s, until the realizer has measured it (boot, user data, agent "
        "start: minutes, against about 5 s for a local agent process).",
    )


class EcsSettings(BaseModel):
    """The ECS service realizer: agents as tasks of one service."""

    cluster: str = Field("sluice", description="ECS cluster of the agents' service.")
    service: str = Field("sluice-agents", description="ECS service running `sluice agent`.")
    region: str = Field("us-east-1", description="AWS region of the cluster.")
    endpoint_url: str | None = Field(
        None, description="Endpoint override (e.g. a moto server); default: AWS."
    )
    max_count: int = Field(64, ge=1, description="Largest desired count the realizer sets.")
    wait_timeout_s: float = Field(
        600.0, gt=0, description="Deadline for agents to register or drain after a rescale, s."
    )
    poll_interval_s: float = Field(5.0, gt=0, description="How often to poll while waiting, s.")
    task_start_s: float = Field(
        60.0,
        ge=0,
        description="How long a scale-out's new ECS tasks take to register their agents, s, "
        "until the realizer has measured it.",
    )


POLICY_NAMES = ("static", "threshold", "ds2", "keda", "mcts", "horizon")
"""The policies a setting may name, in the order reports list them; the registry in
:mod:`orchestration.control_plane.autoscaling.policies` has one factory for each (the settings are
read by every policy, so they name policies rather than import them)."""


DEPRECATED_SEARCH = (
    "mcts.search = 'horizon' (SLUICE_AUTOSCALE_MCTS__SEARCH) is deprecated: the horizon "
    "search is the `horizon` policy now (SLUICE_AUTOSCALE_POLICY=horizon, or --policy horizon); "
    "the `mcts` policy runs as `horizon` until the setting is removed"
)


class AutoscaleSettings(SluiceBaseSettings):
    """All autoscaling settings; one instance is passed to policies, simulator and realizers."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore"
    )

    fleet: FleetSettings = Field(default_factory=FleetSettings, description="The fleet.")
    simulation: SimulationSettings = Field(
        default_factory=SimulationSettings, description="Trace replay."
    )
    spot: SpotCostSettings = Field(
        default_factory=SpotCostSettings, description="Prices and spot interruptions."
    )
    static: StaticSettings = Field(default_factory=StaticSettings, description="`static` policy.")
    threshold: ThresholdSettings = Field(
        default_factory=ThresholdSettings, description="`threshold` policy."
    )
    ds2: Ds2Settings = Field(default_factory=Ds2Settings, description="`ds2` policy.")
    keda: KedaSettings = Field(default_factory=KedaSettings, description="`keda` policy.")
    forecast: ForecastSettings = Field(
        default_factory=ForecastSettings, description="Traffic forecast."
    )
    mcts: MctsSettings = Field(
        default_factory=MctsSettings, description="`mcts` planner (and `horizon`)."
    )
    guards: GuardSettings = Field(default_factory=GuardSettings, description="Guards.")
    aws: AwsSettings = Field(default_factory=AwsSettings, description="AWS realizer.")
    ecs: EcsSettings = Field(default_factory=EcsSettings, description="ECS realizer.")
    sensor: bool = Field(
        False,
        description="Start the live autoscaler sensor running (on/off; the UI can toggle it).",
    )
    policy: str = Field(
        "mcts",
        description="Policy the live sensor decides with (default: the `mcts` planner, which "
        "prices hardware, lag beyond the SLA and rescales over its horizon).",
    )
    sensor_interval_s: int = Field(30, ge=5, description="Seconds between the live sensor's ticks.")
    history_retention_s: float = Field(
        8 * 86400.0,
        ge=86400.0,
        description="How long the live sensor keeps its per-minute rate history in the control "
        "store, s: the span a live policy reads (a season of a day and more).",
    )
    sensor_cooldown_s: float = Field(
        300.0,
        ge=0,
        description="The live sensor's cooldown guard, s: no rescale within this long of the "
        "previous one (guards.cooldown_s is the simulator's).",
    )

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy (known: {', '.join(POLICY_NAMES)})")
        return value

    @model_validator(mode="after")
    def _check_bands(self) -> AutoscaleSettings:
        ds2 = self.ds2
        if not ds2.utilisation_min <= ds2.target_utilisation <= ds2.utilisation_max:
            raise ValueError(
                f"ds2 utilisation band [{ds2.utilisation_min}, {ds2.utilisation_max}] must hold "
                f"the target {ds2.target_utilisation}"
            )
        if self.fleet.max_workers is not None and self.fleet.max_workers < self.fleet.min_workers:
            raise ValueError(
                f"fleet max_workers {self.fleet.max_workers} < min_workers {self.fleet.min_workers}"
            )
        return self

    def updated(self, **groups: dict[str, Any]) -> AutoscaleSettings:
        """A copy with some fields of some groups replaced (None values are ignored)."""
        data = self.model_dump()
        for group, values in groups.items():
            data[group].update({k: v for k, v in values.items() if v is not None})
        return type(self).model_validate(data)
