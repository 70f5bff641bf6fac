"""Uses the API under `dlscope profile` and exits with the code given on the command line."""

import sys
import time

import dlscope

with dlscope.profile("ignored.dlscope", batch_size=4) as prof:
    for _ in range(4):
        with prof.phase("run"):
            time.sleep(0.002)
        prof.step()
print("program output unchanged")
sys.exit(int(sys.argv[1]))
