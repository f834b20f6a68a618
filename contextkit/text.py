"""Sentences and duplicates: moved to :mod:`contextkit.core.text`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.text``.
"""

import sys

from contextkit.core import text as _floor
from contextkit.core.text import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.text import __all__  # noqa: F401

sys.modules[__name__] = _floor
