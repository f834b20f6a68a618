"""Every public error class: moved to :mod:`contextkit.core.errors`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.errors``.
"""

import sys

from contextkit.core import errors as _floor
from contextkit.core.errors import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.errors import __all__  # noqa: F401

sys.modules[__name__] = _floor
