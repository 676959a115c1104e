"""`sluice generate`: replay a trace onto the events topic, with late, duplicate and bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from orchestration.control_plane.runtime import Runtime
from pipelines.generator import GeneratorOptions, Message, load_trace, replay
from pipelines.generator.progress import ReplayProgress
from pipelines.kafka import ensure_topics, exact_end_offsets
from pipelines.kafka.writer import open_writer

__all__ = ["add_generator_flags", "options_from_args", "register"]

DEFAULTS = GeneratorOptions()


def add_generator_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("traffic")
    g.add_argument("--trace", default="nyc_taxi", help="shipped trace name or CSV path")
    g.add_argument("--seed", type=int, default=DEFAULTS.seed)
    g.add_argument(
        "--peak-rate", type=float, default=DEFAULTS.peak_rate, help="msg/s at the trace peak"
    )
    g.add_argument("--speedup", type=float, default=DEFAULTS.speedup, help="simulated s per wall s")
    g.add_argument("--events", type=int, default=None, help="stop after this many messages")
    g.add_argument("--duration", default=None, help="simulated time to replay, e.g. 1d or 6h")
    g.add_argument("--late-share", type=float, default=DEFAULTS.late_share)
    g.add_argument(
        "--late-delay-mean", type=float, default=DEFAULTS.late_delay_mean_s, help="seconds"
    )
    g.add_argument("--duplicate-share", type=float, default=DEFAULTS.duplicate_share)
    g.add_argument("--malformed-share", type=float, default=DEFAULTS.malformed_share)
    g.add_argument(
        "--key-skew", type=float, default=DEFAULTS.key_skew, help="Zipf exponent, 0 = uniform"
    )
    g.add_argument("--orgs", type=int, default=DEFAULTS.orgs)
    g.add_argument("--key-field", default=DEFAULTS.key_field)


def options_from_args(args: argparse.Namespace) -> GeneratorOptions:
    from pipelines.views import parse_duration

    duration = parse_duration(args.duration, "--duration") / 1000 if args.duration else None
    return GeneratorOptions(
        seed=args.seed,
        peak_rate=args.peak_rate,
        speedup=args.speedup,
        max_events=args.events,
        duration_s=duration,
        late_share=args.late_share,
        late_delay_mean_s=args.late_delay_mean,
        duplicate_share=args.duplicate_share,
        malformed_share=args.malformed_share,
        key_skew=args.key_skew,
        orgs=args.orgs,
        key_field=args.key_field,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("generate", help="replay a trace onto the events topic")
    add_generator_flags(parser)
    parser.add_argument("--topic", default=None, help="default: SLUICE_TOPIC (events)")
    parser.add_argument("--no-pace", action="store_true", help="produce as fast as possible")
    parser.add_argument("--report", default=None, help="also write the report as JSON here")
    parser.add_argument(
        "--progress",
        default=None,
        help="keep a JSON progress record here, rewritten every second (what `up` shows)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--open-ended",
        action="store_true",
        help="more input follows: do not mark the topic's input as ended when the replay is "
        "over (by default its end offsets are recorded, so the last hours close at once)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    runtime = Runtime.from_env()
    options = options_from_args(args)
    options.validate()
    trace = load_trace(args.trace)
    topic = args.topic or runtime.settings.topic
    bootstrap = runtime.bootstrap()
    ensure_topics(bootstrap, {topic: runtime.settings.partitions}, runtime.kafka)
    out = open_writer(bootstrap, runtime.kafka)
    console = Console(stderr=True)
    control = runtime.control
    control.input_ends.clear(topic)  # the input is open while the replay goes on

    def send(message: Message) -> None:
        out.send(topic, message.key, message.value)

    total_sim_s = (
        trace.duration_s
        if options.duration_s is None
        else min(options.duration_s, trace.duration_s)
    )

    def progress(report, sim_s: float, done: bool = False) -> None:
        if args.progress:
            record = ReplayProgress(
                produced=report.produced,
                rate=report.produced / report.wall_s if report.wall_s else 0.0,
                sim_s=sim_s,
                total_sim_s=total_sim_s,
                speedup=None if args.no_pace else options.speedup,
                done=done,
            )
            record.write(Path(args.progress))
        if not done and not args.progress:
            console.print(
                f"[dim]generate[/] {report.produced:>10,} msgs  "
                f"{report.produced / report.wall_s:>8,.0f}/s  simulated {sim_s / 3600:6.1f} h",
                highlight=False,
            )

    try:
        report = replay(trace, options, send, pace=not args.no_pace, progress=progress)
    finally:
        out.flush()
        out.close()
    if not args.open_ended:
        # Flushed: the log ends where this input does. The archive sensor closes the last
        # hours once every task has checkpointed through these offsets (no idle wait).
        control.input_ends.record(topic, exact_end_offsets(bootstrap, runtime.kafka, topic))
    control.close()
    progress(report, total_sim_s, done=True)
    summary = {"trace": trace.name, "topic": topic, "seed": options.seed, **report.as_dict()}
    if args.report:
        with open(args.report, "w") as handle:
            json.dump(summary, handle, indent=2)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        console.print(
            f"produced {report.produced:,} messages to {topic} in {report.wall_s:.1f}s: "
            f"{report.valid:,} valid ({report.late:,} late), {report.duplicates:,} duplicates, "
            f"{report.malformed_total:,} malformed {dict(report.malformed)}",
            highlight=False,
        )
    return 0
