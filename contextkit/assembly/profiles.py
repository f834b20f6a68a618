"""Model profiles: moved to :mod:`contextkit.core.profiles`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.profiles``.
"""

import sys

from contextkit.core import profiles as _floor
from contextkit.core.profiles import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.profiles import __all__  # noqa: F401

sys.modules[__name__] = _floor
