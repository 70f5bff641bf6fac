"""A CPU training loop that records, every step, what dlscope try's fixes change (argv: JSON-lines
file). Environment: PROBE_STEPS (steps to run, default 40), PROBE_FAIL_UNDER_AUTOCAST=1 (raise
when a forward runs under autocast: a fix that breaks the program), PROBE_AMP_SWITCH=1 (forward
and loss inside the program's own ``torch.autocast(enabled=False)``: an AMP switch left off),
PROBE_SLOW_INPUT_MS (each batch's loading sleeps that long on the training thread: input_bound fires),
PROBE_SLOW_LABEL=NAME (the runs of try's NAME, e.g. tf32, sleep PROBE_SLOW_S, default 3, before they start:
a slower kind of run)."""

import contextlib
import json
import os
import sys
import time

STARTED = time.time()  # before torch loads: when this program's own code started
# modules this program imports only after its first step: in sys.modules already at its start only where
# dlscope try imported them ahead of the run's turn, as an earlier run had imported them (torch's: yes;
# the interpreter's library: no, dlscope imports only the frameworks' packages ahead)
WAVE_AT_START = "wave" in sys.modules
LATE_TORCH_AT_START = "torch.utils.show_pickle" in sys.modules


def _process_started() -> float:
    """When this process started (wall clock): earlier than STARTED for a run dlscope try started
    ahead of its turn (its interpreter waited, torch imported, before the program ran)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


PROCESS_STARTED = _process_started()
if os.environ.get("PROBE_SLOW_EXIT_S"):  # a run slow to end after its last step (a CUDA context's teardown)
    import atexit

    def _slow_exit() -> None:
        time.sleep(float(os.environ["PROBE_SLOW_EXIT_S"]))
        with open(os.environ["PROBE_EXIT_RECORDS"], "a") as f:
            f.write(json.dumps({"run": run, "exited": time.time()}) + "\n")

    atexit.register(_slow_exit)

import torch  # noqa: E402 - after STARTED
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset, default_collate  # noqa: E402

torch.manual_seed(0)
out_path = sys.argv[1]
run = json.loads(os.environ.get("DLSCOPE_SESSION", "{}")).get("profile_dir", "")
run = os.path.basename(run)
steps = int(os.environ.get("PROBE_STEPS", "40"))
if os.environ.get("PROBE_SLOW_LABEL") and run.startswith(os.environ["PROBE_SLOW_LABEL"] + "."):
    time.sleep(float(os.environ.get("PROBE_SLOW_S", "3")))
seen: dict = {}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 4)

    def forward(self, x):
        seen["autocast"] = torch.is_autocast_enabled("cpu")
        seen["input_channels_last"] = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        if seen["autocast"] and os.environ.get("PROBE_FAIL_UNDER_AUTOCAST"):
            raise RuntimeError("this program cannot run under autocast")
        h = torch.relu(self.conv(x)).flatten(1)
        seen["fc_in"] = h.detach()
        return self.fc(h)


data = TensorDataset(torch.randn(16 * 64, 3, 8, 8), torch.randint(0, 4, (16 * 64,)))
slow_input_s = float(os.environ.get("PROBE_SLOW_INPUT_MS", "0")) / 1000


def slow_collate(batch):
    time.sleep(slow_input_s)  # loading that takes time on the training thread: input_bound fires
    return default_collate(batch)


loader = DataLoader(data, batch_size=16, collate_fn=slow_collate if slow_input_s else None)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
records = []
step = 0
while step < steps:
    for x, y in loader:
        switch = (
            torch.autocast("cpu", enabled=False) if os.environ.get("PROBE_AMP_SWITCH") else contextlib.nullcontext()
        )
        with switch:
            out = model(x)
        # the output against the current weights, cast to bf16 outside any autocast: a weight-cast
        # cache kept from an earlier step would serve old weights and differ
        w, b = model.fc.weight.detach(), model.fc.bias.detach()
        if out.dtype == torch.bfloat16:
            ref = nn.functional.linear(seen["fc_in"].bfloat16(), w.bfloat16(), b.bfloat16())
        else:
            ref = nn.functional.linear(seen["fc_in"], w, b)
        stale = float((out.detach().float() - ref.float()).abs().max())
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        import wave  # noqa: F401 - late, on purpose (WAVE_AT_START)

        import torch.utils.show_pickle  # noqa: F401 - late, on purpose (LATE_TORCH_AT_START)

        records.append(
            {
                "run": run,
                "step": step,
                "workers": loader.num_workers,
                "persistent": loader.persistent_workers,
                "autocast": seen["autocast"],
                "out_dtype": str(out.dtype),
                "stale": stale,
                "matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "weight_channels_last": model.conv.weight.is_contiguous(memory_format=torch.channels_last),
                "input_channels_last": seen["input_channels_last"],
                "fused": opt.defaults.get("fused"),
                # where dlscope try placed the run (its GPU and CPUs) and when the step ended
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "cpus": sorted(os.sched_getaffinity(0)),
                "t": time.time(),
                "started": STARTED,
                "process_started": PROCESS_STARTED,
                "wave_at_start": WAVE_AT_START,
                "late_torch_at_start": LATE_TORCH_AT_START,
            }
        )
        with open(out_path, "a") as f:  # every step: a run stopped by dlscope try keeps its records
            f.write(json.dumps(records[-1]) + "\n")
        if os.environ.get("PROBE_PRINT"):  # a program that logs to stdout, as most do
            print(f"step {step} loss {float(loss):.4f}", flush=True)
        step += 1
        if step >= steps:
            break
