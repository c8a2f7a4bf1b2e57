"""What an accelerated run did, in a few lines for the terminal (`wormhole run --accel`): what it
froze and skipped, what the memo did, and with --explain-events where the simulated events went
and why partitions were not frozen as they formed. The numbers are summary.json's `accel`."""

from __future__ import annotations

# Collectives listed per mode of events_by; the rest are summed up as "other".
TOP_COLLECTIVES = 3


def accel_lines(accel: dict) -> list[str]:
    """The summary's `accel` block as lines of plain text."""
    bytes_total = accel["bytes_simulated"] + accel["bytes_skipped"]
    skipped = accel["bytes_skipped"] / bytes_total if bytes_total else 0.0
    lines = [f"accel: {accel['events_executed']:,} events, {skipped:.1%} of the bytes skipped; "
             f"{accel['freezes']:,} freezes ({accel['fair_starts']:,} at fair shares as formed), "
             f"{accel['skip_backs']:,} skip-backs, {accel['ends_computed']:,} ends computed"]
    memo = accel.get("memo")
    if memo:
        lines.append(f"memo: {memo['hits']:,} hits / {memo['lookups']:,} lookups "
                     f"({memo['applied_episode']:,} episodes), {memo['records_written']:,} records written "
                     f"to {memo['cache']}")
    by_mode = accel.get("events_by")
    if by_mode is None:
        return lines
    events_total = sum(m["events"] for m in by_mode.values()) or 1
    lines.append("events by what the engine did with their partition (by collectives):")
    for mode, m in sorted(by_mode.items(), key=lambda kv: -kv[1]["events"]):
        kinds = sorted(m["by_collectives"].items(), key=lambda kv: -kv[1])
        shown = [f"{k} {n:,}" for k, n in kinds[:TOP_COLLECTIVES]]
        rest = sum(n for _, n in kinds[TOP_COLLECTIVES:])
        if rest:
            shown.append(f"other {rest:,}")
        lines.append(f"  {mode:<22} {m['events']:>12,} {m['events'] / events_total:6.1%}  ({', '.join(shown)})")
    refused = {k: n for k, n in accel["fair_starts_refused"].items() if n}
    if refused:
        lines.append("fair starts refused: " + ", ".join(f"{k} {n:,}" for k, n in
                                                         sorted(refused.items(), key=lambda kv: -kv[1])))
    watches = accel["episode_watches"]
    if watches["watched"]:
        given_up = ", ".join(f"{k} {n:,}" for k, n in watches["given_up"].items() if n) or "none"
        lines.append(f"episodes watched: {watches['watched']:,}, completed {watches['completed']:,}, "
                     f"given up by: {given_up}")
    return lines
