"""Runs numbered steps until killed, saying each finished step on stdout."""

import os
import sys
import time

import dlscope

print(f"pid {os.getpid()}", flush=True)
prof = dlscope.current()
assert prof is not None, "expected to run under dlscope profile"
for i in range(10**6):
    with prof.phase("work"):
        time.sleep(0.01)
    prof.step()
    print(f"step {i}", flush=True)
sys.exit(0)
