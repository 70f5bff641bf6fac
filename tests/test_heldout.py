"""The held-out check of the advice (issue 21), on a program that was not used to build or tune
it: bench/heldout/vit_train.py, a small ViT whose DataLoader runs in the training process,
profiled once on an H100 (lease 11, 2026-11-26; bench/RESULTS.md). Its truth, each fix made in the
source and run as its own process, alternated over three rounds (bench/heldout/alternate.py,
results in bench/heldout/results_lease11/truth.json): DataLoader workers saved 65.5% of the median
step [47.5, 77.3]; bf16, TF32 and a fused AdamW were not significant (their rounds spread
-35..+38%). The advice must put workers first with an estimate within 0.5x..2x of that interval,
and advise no other fix at 5% or more."""

from __future__ import annotations

import json
from pathlib import Path

from dlscope import advice
from dlscope.analysis.core.context import ProfileData

ROOT = Path(__file__).resolve().parents[1]
PROFILE = Path(__file__).parent / "data" / "heldout" / "vit_baseline.dlscope"
TRUTH = ROOT / "bench" / "heldout" / "results_lease11" / "truth.json"
# the fixes measured, by the rules that advise them
FIX_RULES = {
    "workers": "input_bound",
    "bf16": "amp_not_enabled",
    "tf32": "no_tensor_cores",
    "fused": "unfused_optimizer",
}


def test_the_held_out_vit_is_advised_as_measured():
    truth = json.loads(TRUTH.read_text())["fixes"]
    found = [f for f in advice.evaluate(ProfileData.open(PROFILE)) if not f.negligible]
    fix_findings = [f for f in found if f.id in FIX_RULES.values()]
    assert fix_findings[0].id == "input_bound"
    lo, hi = truth["workers"]["interval_pct"]
    assert truth["workers"]["p_value"] < 0.05 and 0.5 * lo <= fix_findings[0].saving_pct <= 2 * hi
    assert 0.5 <= fix_findings[0].saving_pct / truth["workers"]["saving_pct"] <= 2
    for fix in ("bf16", "tf32", "fused"):
        assert truth[fix]["p_value"] > 0.05  # not significant: no finding of 5% or more
        assert all((f.saving_pct or 0) < 5 for f in fix_findings if f.id == FIX_RULES[fix]), fix
