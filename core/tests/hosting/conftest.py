"""The engine-host tests import host_kit beside this file and the scheduler tests' sched_kit."""

from __future__ import annotations

import sys
from pathlib import Path

here = Path(__file__).parent
sys.path.insert(0, str(here.parent / "scheduler"))
sys.path.insert(0, str(here))
