"""Where a bench writes its figures: OUT/NAME.json (everything) and OUT/NAME.md (the table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(out: str | Path, name: str, summary: dict[str, Any], lines: list[str]) -> Path:
    """Write `summary` as OUT/NAME.json and `lines` as OUT/NAME.md; print the lines; the .md path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(summary, indent=1, default=str))
    md = out / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return md
