"""Ships the contract with the package: docs/SPEC.md and docs/implementers.md are
copied into ``harness/_docs/`` of every build (wheel or sdist install), so that
an installed harness has the documents its errors and reports cite
(``python -m harness docs``). Everything else is in pyproject.toml."""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

#: The documents an installed harness carries, from docs/.
SHIPPED_DOCS = ("SPEC.md", "implementers.md")


class BuildPyWithDocs(build_py):
    """build_py, plus the shipped documents under harness/_docs/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads them from docs/ in the checkout
        target = os.path.join(self.build_lib, "harness", "_docs")
        os.makedirs(target, exist_ok=True)
        for name in SHIPPED_DOCS:
            shutil.copyfile(os.path.join("docs", name), os.path.join(target, name))


setup(cmdclass={"build_py": BuildPyWithDocs})
