"""Where the data files benchctl reads at run time are: ``sql/`` (the view files) and ``state_machines/``
(the campaign ASL).

In the repository and in the Lambda code asset they sit next to the package (``<root>/sql``,
``<root>/state_machines``); an installed wheel carries them inside it (``benchctl/_data/<name>``, see
``pyproject.toml``), so a non-editable install finds them too. May import only the standard library.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DATA_DIRS = ("sql", "state_machines")


def data_dir(name: str) -> Path:
    """The directory ``name`` (one of :data:`DATA_DIRS`): inside the installed package, else next to it."""
    if name not in DATA_DIRS:
        raise ValueError(f"unknown data directory {name!r}; valid: {', '.join(DATA_DIRS)}")
    inside = PACKAGE / "_data" / name
    return inside if inside.is_dir() else PACKAGE.parent / name
