"""Imported: appends the importing process's pid to ``$HARNESS_PRELOAD_MARKER``."""

import os

_path = os.environ.get("HARNESS_PRELOAD_MARKER")
if _path:
    with open(_path, "a") as _f:
        _f.write(f"{os.getpid()}\n")
