"""Tests of contextkit.chunking (a package, so its test module names may repeat those of other folders)."""
