"""Plug-ins for other frameworks. Nothing here is imported by ``import contextkit``."""
