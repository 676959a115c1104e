"""A planner's decision in words and tables: what the scaling run shows an operator.

Works on `Plan.explain()` data (plain JSON, carried in the run's config), so a run launched
by the sensor, replayed from the UI or read back later renders the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["describe_plan", "plan_markdown", "split_line"]

PARTS = ("hardware", "sla", "rescale", "drain")


def _counts(plan: Mapping[str, Any]) -> str:
    return ", then ".join(
        f"{s['workers']} for {s['minutes']:.0f} min" for s in plan.get("segments", [])
    )


def split_line(plan: Mapping[str, Any]) -> str:
    """``cost 12.30 = hardware 11.00 + SLA 0.00 + rescale 1.20 + drain 0.10``."""
    split = plan.get("split") or {}
    if not split:
        return f"cost {plan.get('cost', float('nan')):.2f}"
    parts = " + ".join(f"{'SLA' if p == 'sla' else p} {split[p]:.2f}" for p in PARTS)
    return f"cost {split['total']:.2f} = {parts}"


def describe_plan(explanation: Mapping[str, Any]) -> str:
    """Two or three lines: the chosen plan, its cost split, the rejected alternative."""
    lines = [f"chosen plan: {_counts(explanation)}; {split_line(explanation)}"]
    alternative = explanation.get("alternative")
    if alternative:
        extra = alternative.get("cost", 0.0) - explanation.get("cost", 0.0)
        lines.append(
            f"best rejected alternative: {_counts(alternative)}; {split_line(alternative)} "
            f"({extra:+.2f} against the chosen plan)"
        )
    if "task_pause_s" in explanation:
        lines.append(
            f"priced with a {explanation['task_pause_s']:.2f} s pause per moved task and the "
            f"rescale penalty x{explanation.get('penalty_factor', 1.0):.2f}"
        )
    return "\n".join(lines)


def plan_markdown(explanation: Mapping[str, Any]) -> str:
    """The chosen plan and the alternative as Markdown tables: worker counts over the horizon
    and the cost split, side by side."""
    plans = [("chosen", explanation)]
    if explanation.get("alternative"):
        plans.append(("best rejected alternative", explanation["alternative"]))
    out = []
    for title, plan in plans:
        out.append(f"**{title}**: {_counts(plan)}\n")
        out.append("| from (min) | for (min) | workers |\n|---:|---:|---:|")
        out.extend(
            f"| {s['start_min']:.0f} | {s['minutes']:.0f} | {s['workers']} |"
            for s in plan.get("segments", [])
        )
        out.append("")
    split_rows = [
        (name, [(plan.get("split") or {}).get(name) for _, plan in plans])
        for name in (*PARTS, "total")
    ]
    header = " | ".join(title for title, _ in plans)
    out.append(f"| cost (worker-hour prices) | {header} |")
    out.append("|---|" + "---:|" * len(plans))
    for name, values in split_rows:
        cells = " | ".join("" if v is None else f"{v:.3f}" for v in values)
        out.append(f"| {'SLA' if name == 'sla' else name} | {cells} |")
    return "\n".join(out)
