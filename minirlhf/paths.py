"""Where things live, and which front end the notebooks are running for."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = Path(os.environ.get("MINIRLHF_OUTPUTS", ROOT / "outputs"))


def book_mode() -> bool:
    """True while the book is being built: explorers then draw precomputed frames behind a
    client-side slider instead of a live ipywidgets slider, since the page has no kernel."""
    return os.environ.get("MINIRLHF_BOOK") == "1"
