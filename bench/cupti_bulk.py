"""Benchmark: dlscope's own cost per CUPTI activity record, with records handled in bulk.

cupti-python's per-record buffer callback handles about 17k records/s on an H100 host
(tests/data/gpu/h100_probe_cupti.json: 297k records over 30 steps). dlscope instead walks each
raw buffer once and gathers records by kind with numpy (capture/cupti_records.py). This
benchmark times exactly that work, and the decoding at finalize, on raw buffers laid out as
CUPTI 13 lays them out (an API record then the kernel it launched, as a CUDA program produces
them), without a GPU. Writes bench/results/cupti_bulk.json.

    python bench/cupti_bulk.py [--records 400000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

from dlscope.capture import cupti_records as cr  # noqa: E402

API_SIZE, KERNEL_SIZE = 40, 224
BUFFER = 8 * 1024 * 1024
PER_RECORD_CALLBACK_RPS = 17_000  # cupti-python's per-record callbacks, measured on the H100 host

API_FIELDS = {
    "cbid": [4, "<u4"],
    "start": [8, "<u8"],
    "end": [16, "<u8"],
    "process_id": [24, "<u4"],
    "thread_id": [28, "<u4"],
    "correlation_id": [32, "<u4"],
}
KERNEL_FIELDS = {
    "start": [16, "<u8"],
    "end": [24, "<u8"],
    "device_id": [40, "<u4"],
    "stream_id": [48, "<u4"],
    "correlation_id": [92, "<u4"],
    "grid_x": [52, "<i4"],
    "grid_y": [56, "<i4"],
    "grid_z": [60, "<i4"],
    "block_x": [64, "<i4"],
    "block_y": [68, "<i4"],
    "block_z": [72, "<i4"],
    "registers_per_thread": [6, "<u2"],
    "static_shared_memory": [76, "<i4"],
    "dynamic_shared_memory": [80, "<i4"],
    "name": [104, "<i8"],
}


def make_buffer(pairs: int, first_corr: int) -> bytes:
    """``pairs`` (runtime API record, kernel record) pairs, back to back."""
    pair = API_SIZE + KERNEL_SIZE
    raw = np.zeros(pairs * pair, np.uint8)
    rec = raw.reshape(pairs, pair)
    api = rec[:, :API_SIZE]
    ker = rec[:, API_SIZE:]
    corr = np.arange(first_corr, first_corr + pairs, dtype=np.uint32)
    t = (np.arange(pairs, dtype=np.uint64) * 5000) + 10**12
    api[:, 0:4] = np.frombuffer(np.uint32(5).tobytes(), np.uint8)
    api[:, 4:8] = np.frombuffer(np.uint32(211).tobytes(), np.uint8)
    api[:, 8:16] = t.view(np.uint8).reshape(pairs, 8)
    api[:, 16:24] = (t + 900).view(np.uint8).reshape(pairs, 8)
    api[:, 32:36] = corr.view(np.uint8).reshape(pairs, 4)
    ker[:, 0:4] = np.frombuffer(np.uint32(10).tobytes(), np.uint8)
    ker[:, 16:24] = (t + 2000).view(np.uint8).reshape(pairs, 8)
    ker[:, 24:32] = (t + 6000).view(np.uint8).reshape(pairs, 8)
    ker[:, 92:96] = corr.view(np.uint8).reshape(pairs, 4)
    names = np.arange(pairs, dtype=np.int64) % 50 + 0x7F0000001000  # 50 distinct kernels
    ker[:, 104:112] = names.view(np.uint8).reshape(pairs, 8)
    return raw.tobytes()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "cupti_bulk.json"))
    args = ap.parse_args()
    pairs_per_buffer = BUFFER // (API_SIZE + KERNEL_SIZE)
    n_buffers = max(1, args.records // (2 * pairs_per_buffer))
    buffers = [make_buffer(pairs_per_buffer, 1 + i * pairs_per_buffer) for i in range(n_buffers)]
    records = 2 * pairs_per_buffer * n_buffers
    sizes = {5: API_SIZE, 10: KERNEL_SIZE}

    def record_side() -> list[bytes]:
        """What the worker thread does per buffer while the program runs."""
        out = []
        for buf in buffers:
            offs, end = cr.walk(buf, len(buf), sizes)
            assert end == len(buf)
            for k, o in offs.items():
                data = cr.gather(buf, o, sizes[k])
                if k == 10:
                    np.unique(cr.view(data, KERNEL_SIZE, KERNEL_FIELDS, ("name",))["name"])
                else:
                    np.unique(cr.view(data, API_SIZE, API_FIELDS, ("cbid",))["cbid"])
                out.append(cr.block(k, sizes[k], data))
        return out

    rec_times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        blocks_raw = record_side()
        rec_times.append(time.perf_counter() - t)
    blocks: dict[int, list[tuple[int, bytes]]] = {}
    for b in blocks_raw:
        kind, size, n, _ = cr.BLOCK.unpack_from(b, 0)
        blocks.setdefault(kind, []).append((size, b[cr.BLOCK.size :]))
    header = {
        "layouts": {
            "RUNTIME": {"kind": 5, "size": API_SIZE, "fields": API_FIELDS},
            "CONCURRENT_KERNEL": {"kind": 10, "size": KERNEL_SIZE, "fields": KERNEL_FIELDS},
        },
        "clock": {"cupti_to_mono_ns": 0},
        "enums": {},
    }
    names = {0x7F0000001000 + i: f"kernel_{i}" for i in range(50)}
    dec_times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        tables = cr.decode_tables(blocks, header, names, {(5, 211): "cudaLaunchKernel"}, rank=0, pid=1, offset_ns=0)
        dec_times.append(time.perf_counter() - t)
    assert tables["kernels"].num_rows == records // 2 and tables["api"].num_rows == records // 2
    rec_ns = statistics.median(rec_times) / records * 1e9
    dec_ns = statistics.median(dec_times) / records * 1e9
    report = {
        "benchmark": "cupti_bulk",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine.describe(),
        "python": sys.version.split()[0],
        "records": records,
        "buffers": n_buffers,
        "reps": args.reps,
        "record_side_ns_per_record": rec_ns,
        "record_side_records_per_s": 1e9 / rec_ns,
        "decode_ns_per_record": dec_ns,
        "decode_records_per_s": 1e9 / dec_ns,
        "per_record_callbacks_records_per_s": PER_RECORD_CALLBACK_RPS,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("| stage | ns/record | records/s |\n|---|---:|---:|")
    print(f"| while recording (walk, gather by kind, distinct names) | {rec_ns:.0f} | {1e9 / rec_ns:,.0f} |")
    print(f"| at finalize (decode to tables) | {dec_ns:.0f} | {1e9 / dec_ns:,.0f} |")
    print(
        f"| cupti-python per-record callbacks (H100 host, measured) | {1e9 / PER_RECORD_CALLBACK_RPS:,.0f} | "
        f"{PER_RECORD_CALLBACK_RPS:,} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
