"""Whether files can be written at a place: the CLI's checks of its outputs (autoccl.cli.files) and
`autoccl doctor`'s of the table cache ask the same question."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable_folder(folder: str | Path) -> str | None:
    """Why no file can be written in FOLDER, nor FOLDER made: the nearest existing one at or above it is a
    file, or a directory this process cannot write in (a read-only mount, no permission). Else None."""
    start = Path(folder).expanduser().resolve()
    for at in (start, *start.parents):
        if at.exists():
            if not at.is_dir():
                return f"{at} is a file, not a directory"
            return None if os.access(at, os.W_OK | os.X_OK) else f"directory {at} is not writable"
    return None
