"""A "server" that never reads stdin, so stdin EOF does not stop it.

With `--ignore-sigterm` it also ignores SIGTERM, leaving only SIGKILL. It says "ready" on
stderr once its signal disposition is set, then sleeps (bounded) until it is killed.
"""

from __future__ import annotations

import signal
import sys
import time

if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", file=sys.stderr, flush=True)
time.sleep(300)
