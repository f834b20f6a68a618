"""Tests of contextkit.embedders (a package, so its test module names may repeat those of other folders)."""
