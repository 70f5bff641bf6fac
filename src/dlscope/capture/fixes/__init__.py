"""The fixes ``dlscope try`` applies to an unchanged program: one module per fix, registered here."""

from __future__ import annotations

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, NotApplicable
from .batch import LargerBatch
from .bf16 import Bf16Autocast
from .channels_last import ChannelsLast
from .compile import Compile
from .compile_graphs import CompileGraphs
from .cudnn_benchmark import CudnnBenchmark
from .defer_sync import DeferSync
from .fused_optimizer import FusedOptimizer
from .pinned import PinnedMemory
from .tf32 import Tf32
from .workers import DataLoaderWorkers

FIXES: list[type[InjectedFix]] = [
    Bf16Autocast,
    Tf32,
    DataLoaderWorkers,
    PinnedMemory,
    LargerBatch,
    FusedOptimizer,
    ChannelsLast,
    CudnnBenchmark,
    Compile,
    CompileGraphs,
    DeferSync,
]
BY_NAME: dict[FixName, type[InjectedFix]] = {f.name: f for f in FIXES}


def fixes_for(rule_id: RuleId) -> list[FixName]:
    """The fixes ``dlscope try`` injects to test a finding of the rule ``rule_id``."""
    return [f.name for f in FIXES if rule_id in f.rules]


__all__ = ["BY_NAME", "FIXES", "fixes_for", "FixContext", "InjectedFix", "NotApplicable"]
