"""This repository's own tests. The harness plugin itself loads through its
pytest11 entry point (the package is installed); pytester runs the plugin's
tests on small generated test files."""

pytest_plugins = ["pytester"]
