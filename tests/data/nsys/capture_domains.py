"""Workload for tests/data/nsys/h100_nsys_domains.*: NVTX in several styles and domains, unclosed
ranges, marks, and every kind of copy, set and wait, so that the importer and the nsys-equivalent
reports meet what the MLP fixture lacks. Run on the GPU machine by capture_domains.sh."""

import threading

import nvtx
import torch

dev = torch.device("cuda")
side = torch.cuda.Stream()
pinned = torch.randn(1 << 20).pin_memory()
pageable = torch.randn(1 << 18)
done = torch.cuda.Event()

for step in range(4):
    torch.cuda.nvtx.range_push("iteration")  # push/pop, default domain
    with nvtx.annotate("load", domain="data"):  # push/pop, domain 'data'
        a = pinned.to(dev, non_blocking=True)  # HtoD pinned
        b = pageable.to(dev)  # HtoD pageable
    handle = torch.cuda.nvtx.range_start("async_window")  # start/end, default domain
    rng = nvtx.start_range(message="prefetch", domain="data")  # start/end, domain 'data'
    with nvtx.annotate("compute", domain="model"):
        c = (a[: b.numel()] * b).relu()
        d = torch.empty_like(c)
        d.copy_(c)  # DtoD
        z = torch.zeros(4096, device=dev)  # memset or fill kernel
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.current_stream())  # stream wait event
            e = d.sum()
            done.record(side)
        done.synchronize()  # event sync
    torch.cuda.nvtx.mark(f"step {step} launched")  # mark, default domain
    nvtx.mark(message="checkpoint", domain="model")  # mark, domain 'model'
    host = e.cpu()  # DtoH + stream sync

    def finish(h=handle, r=rng):  # a start/end range ended elsewhere
        torch.cuda.nvtx.range_end(h)
        nvtx.end_range(r)

    t = threading.Thread(target=finish)
    t.start()
    t.join()
    torch.cuda.nvtx.range_pop()

torch.cuda.nvtx.range_push("never_closed")  # ends with the process
torch.cuda.synchronize()  # context sync
print("done", float(host))
