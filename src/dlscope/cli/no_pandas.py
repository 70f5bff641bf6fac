"""Keep pandas out of the analysis commands' process.

pyarrow imports pandas (0.6 s, 50 MB) the first time it checks whether an argument is a
DataFrame: on ``pa.array(list)``, ``Array.to_numpy()`` and more. dlscope's commands never hand
it one, so for them pandas is made unimportable and pyarrow takes the "no pandas" path. Commands
that run the user's code, or the Dask recipe, are left alone (``Command.without_pandas``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _PandasBlocker:
    """A meta path finder that refuses pandas (pyarrow catches the ImportError)."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name} is not loaded by dlscope's analysis commands")
        return None


def block_pandas() -> None:
    """Make ``import pandas`` fail in this process, unless pandas is already loaded."""
    if "pandas" not in sys.modules and not any(isinstance(f, _PandasBlocker) for f in sys.meta_path):
        sys.meta_path.insert(0, _PandasBlocker())
