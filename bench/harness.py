"""What every runner in bench/ shares: settling the page cache between sides, warming the page
cache up once, naming the library version measured, and the load average."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def settle(drop_caches: bool) -> bool:
    """os.sync(), then (as root, if asked) drop the clean page cache; True if it was dropped."""
    os.sync()
    if drop_caches:
        try:
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
            return True
        except OSError:
            pass
    return False


def warm_up(work: Path, mib: int) -> None:
    """Write and delete `mib` MiB once (first touch of guest memory for the page cache is slow
    on this VM and would otherwise fall on whichever side runs first)."""
    block = os.urandom(1 << 20)
    path = work / "warm-up"
    with open(path, "wb") as f:
        f.writelines(block for _ in range(mib))
        f.flush()
        os.fdatasync(f.fileno())
    path.unlink()


def library_version() -> str:
    """The commit of the library measured, and whether pravega_embedded/ differs from it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "pravega_embedded", "csrc"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"commit {head}" + (" + uncommitted changes in pravega_embedded/ or csrc/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"
