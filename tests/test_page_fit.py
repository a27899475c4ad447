"""Every line of code and of printed output in the book fits the text column at 1280 px.

The book's column holds 77 characters of its monospace font at a 1280 px wide window (measured
in headless Chromium: 652 px of text at 8.43 px a character); the browser test checks the
rendered pages, this test the sources, in a second and without a browser. Outputs that are
HTML (check reports, figures, explorers) lay themselves out and are not counted.
"""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLUMN = 77  # characters of code or output per line at 1280 px
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb"))


def _too_long(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line.rstrip()) > COLUMN]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_and_printed_output_fit_the_column(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    long = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        long += [f"cell {i} code: {line.strip()[:50]}..." for line in _too_long("".join(cell["source"]))]
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out["text"])
            elif "text/html" in out.get("data", {}) or "image/png" in out.get("data", {}):
                continue
            else:
                text = "".join(out.get("data", {}).get("text/plain", ""))
            long += [f"cell {i} output: {line.strip()[:50]}..." for line in _too_long(text)]
    assert not long, f"{len(long)} line(s) wider than {COLUMN} characters:\n" + "\n".join(long[:15])
