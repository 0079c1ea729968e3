"""Writing the product's figures. A PNG is written with a 256-colour palette: these plots are lines,
markers, flat fills and text, and matplotlib's RGBA output of them is about three times larger (the
training-pairs step plot: 390 KiB against 130 KiB), which is what the evidence folders keep in git. Other
formats are written as matplotlib writes them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> None:
    """Write `fig` to `path`; `savefig`: matplotlib's savefig options (dpi, bbox_inches, ...)."""
    if Path(path).suffix.lower() != ".png":
        fig.savefig(path, **savefig)
        return
    # matplotlib's own dependency; imported here, like matplotlib, to keep start-up light
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(256).save(path, format="PNG", optimize=True)
