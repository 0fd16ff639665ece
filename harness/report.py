"""The conformance matrix: clause x backend variant -> outcome; terminal, JSON, Markdown.

Outcomes per cell, worst wins when several tests check one clause:
``FAIL`` > ``pass`` > ``declared`` (the backend says it does not support it) >
``skipped`` (with the reason, e.g. too few GPUs).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.contract import CLAUSES

__all__ = ["ClauseMatrix", "Outcome"]

Outcome = str  # "pass" | "FAIL" | "declared" | "skipped"
_RANK = {"FAIL": 3, "pass": 2, "declared": 1, "skipped": 0}


@dataclass
class ClauseMatrix:
    cells: dict[tuple[str, str], tuple[Outcome, list[str]]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def add(self, clause: str, column: str, outcome: Outcome, note: str = "") -> None:
        old, notes = self.cells.get((clause, column), ("skipped", []))
        if (clause, column) not in self.cells or _RANK[outcome] > _RANK[old]:
            old = outcome
        if note and note not in notes:
            notes = [*notes, note]
        self.cells[(clause, column)] = (old, notes)

    @property
    def columns(self) -> list[str]:
        return sorted({c for _, c in self.cells})

    @property
    def clauses(self) -> list[str]:
        present = {cl for cl, _ in self.cells}
        return [c for c in CLAUSES if c in present]

    def failed(self) -> list[tuple[str, str]]:
        return [key for key, (o, _) in self.cells.items() if o == "FAIL"]

    def outcome(self, clause: str, column: str) -> Outcome | None:
        cell = self.cells.get((clause, column))
        return cell[0] if cell else None

    def render_terminal(self) -> str:
        cols = self.columns
        if not cols:
            return "no clause was checked"
        width = max(9, *(len(c) for c in cols))
        head = f"{'clause':<7}" + "".join(f"{c:>{width + 2}}" for c in cols) + "   summary"
        lines = [head, "-" * len(head)]
        for clause in self.clauses:
            row = f"{clause:<7}"
            for col in cols:
                row += f"{self.outcome(clause, col) or '-':>{width + 2}}"
            lines.append(row + "   " + CLAUSES[clause])
        notes = self._notes()
        if notes:
            lines.append("")
            lines += [f"  {clause} [{col}] {kind}: {text}" for clause, col, kind, text in notes]
        return "\n".join(lines)

    def _notes(self) -> list[tuple[str, str, str, str]]:
        out = []
        for clause in self.clauses:
            for col in self.columns:
                cell = self.cells.get((clause, col))
                if cell and cell[0] in ("declared", "skipped", "FAIL"):
                    for note in cell[1]:
                        out.append((clause, col, cell[0], note))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "clauses": {
                clause: {
                    col: {"outcome": self.cells[(clause, col)][0], "notes": self.cells[(clause, col)][1]}
                    for col in self.columns
                    if (clause, col) in self.cells
                }
                for clause in self.clauses
            },
            "failed": [f"{cl} [{col}]" for cl, col in self.failed()],
        }

    def render_markdown(self) -> str:
        cols = self.columns
        lines = ["# Conformance report", ""]
        if self.settings:
            lines += [f"- **{k}**: {v}" for k, v in self.settings.items()] + [""]
        lines.append("| clause | " + " | ".join(cols) + " | summary |")
        lines.append("|---|" + "---|" * len(cols) + "---|")
        for clause in self.clauses:
            cells = [self.outcome(clause, c) or "-" for c in cols]
            lines.append(f"| {clause} | " + " | ".join(cells) + f" | {CLAUSES[clause]} |")
        notes = self._notes()
        if notes:
            lines += ["", "## Declared gaps, skips and failures", ""]
            lines += [f"- {clause} [{col}] {kind}: {text}" for clause, col, kind, text in notes]
        return "\n".join(lines) + "\n"

    def write(self, json_path: str | None, md_path: str | None) -> None:
        if json_path:
            with open(json_path, "w", encoding="utf-8") as f:
                json.dump(self.to_json(), f, indent=2)
        if md_path:
            with open(md_path, "w", encoding="utf-8") as f:
                f.write(self.render_markdown())


def machine_settings(
    extra: Mapping[str, Any] | None = None, modules: Iterable[str] = ("torch", "ray", "vllm")
) -> dict[str, Any]:
    """The settings a report header shows: versions and the machine."""
    import importlib.metadata
    import os

    out: dict[str, Any] = dict(extra or {})
    for mod in modules:
        try:
            out[mod] = importlib.metadata.version(mod)
        except importlib.metadata.PackageNotFoundError:
            out[mod] = "not installed"
    out["python"] = platform.python_version()
    out["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}"
    return out
