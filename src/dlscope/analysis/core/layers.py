"""Which of the four layers a profile holds, and for each missing one, why."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...store.schema import LAYER_TABLES
from .context import ProfileData

LAYERS = ("application", "framework", "runtime", "hardware")

# Collectors able to fill each layer, in the order their reasons are worth showing.
_LAYER_COLLECTORS: dict[str, tuple[str, ...]] = {
    "application": (),
    "framework": ("torch",),
    "runtime": ("torch", "cupti"),
    "hardware": ("torch", "cupti", "nvml"),
}

_EMPTY_REASON = {
    "application": (
        "no phases or steps were recorded (annotate with dlscope.phase() and prof.step(), "
        "or name an iteration marker with --key-node)"
    ),
    "framework": "no framework ops were recorded",
    "runtime": "no CUDA API calls were recorded",
    "hardware": "no GPU activity or hardware counters were recorded",
}


@dataclass
class LayerStatus:
    available: bool
    reason: str
    rows: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def layer_status(data: ProfileData) -> dict[str, LayerStatus]:
    out: dict[str, LayerStatus] = {}
    collectors = data.meta.collectors
    for layer in LAYERS:
        rows = sum(data.count(t) for t in LAYER_TABLES[layer])
        if rows:
            out[layer] = LayerStatus(True, "", rows)
            continue
        reasons = []
        for name in _LAYER_COLLECTORS[layer]:
            st = collectors.get(name)
            if st is not None and st.status != "ok" and st.reason:
                reasons.append(f"{name}: {st.reason}")
        if not reasons and data.meta.source.startswith("imported"):
            reasons.append(f"the imported file has no {layer}-layer events")
        out[layer] = LayerStatus(False, "; ".join(reasons) or _EMPTY_REASON[layer], 0)
    return out
