"""The advise use case: the one entry that evaluates advice on an opened profile.

Every front door and every other use case that shows findings (``dlscope advise``, ``summary``,
``report``, ``diff``, the notebook API) gets them here, so the rules run the same way everywhere.
The replay's what-if predictions are part of every evaluation (``advice.run`` ranks the findings
by them); ``--what-if`` and ``Analysis.advise(what_if=True)`` only choose which findings to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..advice import AdviceRun
    from ..analysis.core.context import ProfileData


def advise(data: ProfileData) -> AdviceRun:
    """Run every rule on ``data``: the findings (largest saving first, with their what-if chain
    where the replay models the fix), the rules that could not run and why, and those that found
    nothing. Errors inside the rules are bugs and propagate."""
    from .. import advice

    return advice.run(data)
