"""The records the stages pass along: moved to :mod:`contextkit.core.records`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.records``.
"""

import sys

from contextkit.core import records as _floor
from contextkit.core.records import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.records import __all__  # noqa: F401

sys.modules[__name__] = _floor
