"""The use cases: the only layer that strings capture, analysis, advice and render together.

One module per use case, one function or class each (open, advise, diff, report, merge, ncu, ...).
The command line (``dlscope.cli``) and the notebook API are thin over it: they parse what they
are given, call a use case, and hand its result to ``dlscope.render``.
"""
