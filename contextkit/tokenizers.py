"""Tokenizers: moved to :mod:`contextkit.core.tokenizers`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.tokenizers``.
"""

import sys

from contextkit.core import tokenizers as _floor
from contextkit.core.tokenizers import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.tokenizers import __all__  # noqa: F401

sys.modules[__name__] = _floor
