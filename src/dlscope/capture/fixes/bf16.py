"""bf16 autocast over each step's forward pass and loss.

The autocast region opens when a step begins (and when torch is imported, for the first step) and
closes right before ``backward`` (the backward pass follows the forward's dtypes; the optimizer
step stays outside), as PyTorch's AMP recipe places it. Leaving the outermost autocast region
clears its weight-cast cache, so every step casts the weights it updated afresh: a cache kept
across steps would serve the previous step's weights.

A program with its own AMP switch (``with torch.autocast('cuda', enabled=args.amp):`` around the
step) turns autocast off inside that region, ours included. So a region the program opens with
``enabled=False`` while no region of its own is open is taken as that switch and opened enabled,
in bf16; one opened inside the program's own enabled region (a loss kept in fp32 on purpose)
is left as the program wrote it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, NotApplicable


class Bf16Autocast(InjectedFix):
    name = FixName.BF16
    rules = (RuleId.AMP_NOT_ENABLED,)
    describe = "torch.autocast('cuda', dtype=torch.bfloat16) around each step's forward pass and loss"
    changes_precision = True

    def __init__(self) -> None:
        super().__init__()
        self._region: Any = None
        self._device = "cuda"

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        if self._device == "cuda" and not torch.cuda.is_bf16_supported():
            raise NotApplicable("this GPU has no bf16 support")
        self._torch = torch
        self._program_depth = 0
        self.switches = 0
        self._wrap_program_regions(torch.amp.autocast_mode.autocast)
        ctx.on_step_start.append(self.open)
        ctx.before_backward.append(self.close)
        self.open()

    def _wrap_program_regions(self, cls: Any) -> None:
        """Count the program's own autocast regions, and turn its top-level AMP switch on."""
        fix, init, enter, exit_ = self, cls.__init__, cls.__enter__, cls.__exit__

        def __init__(region: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
            init(region, device_type, *args, **kwargs)
            region._dlscope_switch = False
            if (
                not getattr(region, "_dlscope_ours", False)
                and not region._enabled
                and fix._program_depth == 0
                and device_type == fix._device
            ):
                init(
                    region,
                    device_type,
                    dtype=fix._torch.bfloat16,
                    enabled=True,
                    cache_enabled=kwargs.get("cache_enabled"),
                )
                region._dlscope_switch = True
                fix.switches += 1

        def __enter__(region: Any) -> Any:
            if not getattr(region, "_dlscope_ours", False):
                fix._program_depth += 1
            return enter(region)

        def __exit__(region: Any, *exc: Any) -> Any:
            if not getattr(region, "_dlscope_ours", False):
                fix._program_depth = max(fix._program_depth - 1, 0)
            return exit_(region, *exc)

        cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__
        self._restore_cls = (cls, init, enter, exit_)

    def open(self) -> None:
        if self._region is None:
            region = self._torch.autocast.__new__(self._torch.autocast)
            region._dlscope_ours = True
            region.__init__(self._device, dtype=self._torch.bfloat16)
            region.__enter__()
            self._region = region
            self.changed += 1

    def close(self) -> None:
        if self._region is not None:
            region, self._region = self._region, None
            region.__exit__(None, None, None)  # the outermost region's exit clears the cast cache

    def outcome(self) -> tuple[bool, str]:
        self.close()
        return (True, "") if self.changed > 1 else (False, "no step began under autocast (no backward pass ran)")
