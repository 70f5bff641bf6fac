"""What a profile could not capture, and why, in one line each (for the summary and reports).

Read from meta.json: every collector that was unavailable or failed, with its reason, and the
counters the NVML sampler could not read on some GPU (GPM unsupported, a metric the board
lacks), grouped by reason.
"""

from __future__ import annotations

from ...store.meta import Meta


def counter_reasons(meta: Meta) -> dict[str, str]:
    """metric -> why it was not sampled, for the counters the sampler could not read."""
    st = meta.collectors.get("nvml")
    if st is None:
        return {}
    un = st.settings.get("unavailable") if isinstance(st.settings, dict) else None
    return {str(k): str(v) for k, v in un.items()} if isinstance(un, dict) else {}


def unavailable_lines(meta: Meta) -> list[str]:
    lines = [
        f"{name}: {st.reason or st.status}"
        for name, st in meta.collectors.items()
        if st.status in ("unavailable", "failed")
    ]
    by_reason: dict[str, list[str]] = {}
    for metric, reason in counter_reasons(meta).items():
        by_reason.setdefault(reason, []).append(metric)
    lines += [f"nvml: {', '.join(ms)}: {reason}" for reason, ms in by_reason.items()]
    return lines
