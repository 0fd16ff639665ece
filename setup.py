"""Ships the contract with the package: docs/SPEC.md, docs/implementers.md and
the example backend the guide walks through (examples/pipes.py) are copied into
``harness/_docs/`` of every build (wheel or sdist install), so that an installed
harness has the documents its errors and reports cite (``python -m harness
docs``). Everything else is in pyproject.toml."""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

#: The documents an installed harness carries (harness.contract.SHIPPED_SOURCES; a unit test keeps the two alike).
SHIPPED = ("docs/SPEC.md", "docs/implementers.md", "examples/pipes.py")


class BuildPyWithDocs(build_py):
    """build_py, plus the shipped documents under harness/_docs/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads them from docs/ in the checkout
        target = os.path.join(self.build_lib, "harness", "_docs")
        os.makedirs(target, exist_ok=True)
        for source in SHIPPED:
            shutil.copyfile(source, os.path.join(target, os.path.basename(source)))


setup(cmdclass={"build_py": BuildPyWithDocs})
