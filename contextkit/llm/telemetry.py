"""OpenTelemetry spans and metrics: moved to :mod:`contextkit.core.telemetry`; this name stays for users.

The name is the same module object (``sys.modules``), so its names, its private helpers and
anything patched on it are the floor's own. contextkit's code imports ``contextkit.core.telemetry``.
"""

import sys

from contextkit.core import telemetry as _floor
from contextkit.core.telemetry import *  # noqa: F403 - the names, for type checkers and IDEs
from contextkit.core.telemetry import __all__  # noqa: F401

sys.modules[__name__] = _floor
