"""Tests of contextkit.loaders (a package, so its test module names may repeat those of other folders)."""
