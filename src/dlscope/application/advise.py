"""The advise use case: the one entry that evaluates advice on an opened profile.

Every front door and every other use case that shows findings (``dlscope advise``, ``summary``,
``report``, ``diff``, the notebook API) gets them here, so the rules run the same way everywhere.
The replay's what-if predictions are part of every evaluation (``advice.run`` ranks the findings
by them); ``--what-if`` and ``Analysis.advise(what_if=True)`` only choose which findings to show.

An evaluation is kept in the profile's results cache (:mod:`dlscope.store.results_cache`), keyed by
the profile's files, the code and the step selection: the commands a user runs one after another
on a profile (``profile`` ends with the summary, then ``advise``, ``report``) evaluate it once.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..advice import AdviceRun
    from ..analysis.core.context import ProfileData
    from ..store.results_cache import ResultsCache

CACHE_KIND = "advice"


def advise(data: ProfileData) -> AdviceRun:
    """Run every rule on ``data``: the findings (largest saving first, with their what-if chain
    where the replay models the fix), the rules that could not run and why, and those that found
    nothing. Errors inside the rules are bugs and propagate."""
    from .. import advice

    cache, params = _cache_of(data), {"selection": asdict(data.selection)}
    kept = cache.get(CACHE_KIND, params) if cache is not None else None
    if kept is not None:
        try:
            return advice.AdviceRun.from_record(kept)
        except (KeyError, TypeError, ValueError, AttributeError):  # damaged or foreign: evaluated again
            pass
    run = advice.run(data)
    _link_tries(run)
    if cache is not None:
        cache.put(CACHE_KIND, params, run.to_record())
    return run


def _cache_of(data: ProfileData) -> ResultsCache | None:
    """The results cache of the profile ``data`` opened (None for anything but one profile's folder)."""
    from ..store.results_cache import ResultsCache

    meta = data.path / "meta.json"
    if not meta.is_file():
        return None
    return ResultsCache(data.path, [meta, *(f for files in data.stored.files.values() for f in files)])


def _link_tries(run: AdviceRun) -> None:
    """Each finding with the ``dlscope try`` fixes that test it, or why no run can (its rule's reason, or the
    reason its own evidence is beyond the rule's fixes)."""
    from .. import advice
    from ..capture.fixes import fixes_for

    rules = {r.id: r for r in advice.RULES}
    for f in run.findings:
        rule = rules.get(f.id)
        beyond = rule.untestable(f) if rule is not None else None  # this finding's cause is not what they change
        f.try_fixes = [] if beyond else fixes_for(f.id)
        f.try_none = (
            None
            if f.try_fixes
            else (
                beyond
                or (rule.no_try_fix if rule is not None and rule.no_try_fix else None)
                or "no fix dlscope can inject answers this finding yet"
            )
        )
