#!/usr/bin/env python3
"""Host-link probe for the GPU machine: pinned host->GPU copy bandwidth of each GPU alone and of
all GPUs at once (one stream per GPU, copies issued together). Tells whether the GPUs share one
host-memory path, which bounds multi-GPU scaling of load-bound training. Prints one JSON line."""
import json
import time

import torch


def copy_bandwidth(devices, size_bytes=2 << 30, repeats=3):
    n = size_bytes // 4
    host = [torch.empty(n, dtype=torch.float32).pin_memory() for _ in devices]
    dev = [torch.empty(n, dtype=torch.float32, device=f"cuda:{d}") for d in devices]
    streams = [torch.cuda.Stream(device=f"cuda:{d}") for d in devices]
    best = 0.0
    for _ in range(repeats):
        for d in devices:
            torch.cuda.synchronize(d)
        start = time.perf_counter()
        for h, g, s in zip(host, dev, streams):
            with torch.cuda.stream(s):
                g.copy_(h, non_blocking=True)
        for d in devices:
            torch.cuda.synchronize(d)
        seconds = time.perf_counter() - start
        best = max(best, len(devices) * size_bytes / seconds / 1e9)
    return best


def main():
    count = torch.cuda.device_count()
    result = {"gpus": count}
    for d in range(count):
        result[f"h2d_gpu{d}_alone_GBps"] = round(copy_bandwidth([d]), 1)
    if count > 1:
        result["h2d_all_gpus_together_GBps"] = round(copy_bandwidth(list(range(count))), 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
