"""Raises inside an open phase."""

import dlscope

with dlscope.phase("doomed"):
    raise RuntimeError("the program failed")
