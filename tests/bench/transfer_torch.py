#!/usr/bin/env python3
"""PyTorch's transfer speeds for the sizes tests/bench/buffer_bench.cpp measures.

Run on a GPU machine where `import torch` works (tests/gpu/check.sh runs it
beside buffer_bench, in the same session, so the table shows gpusel / raw /
PyTorch side by side). Prints one parseable line per measurement:

    torch <name> <bytes> <GB/s>

with the names of buffer_bench's benchmarks, so the two outputs join on
(name, bytes). Every measurement checks that the bytes arrived. Exits 0 with a
"skipped" line when torch or a GPU is missing.
"""
import statistics
import sys
import time

SIZES = [4 << 10, 64 << 10, 40 << 20, 1 << 30]
LARGE = {40 << 20, 1 << 30}
REPEATS = 5


def timed(function, synchronize):
    """Median seconds of REPEATS calls of function (after one warm-up)."""
    function()
    synchronize()
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = function()
        synchronize()
        samples.append(time.perf_counter() - start)
        del result
    return statistics.median(samples)


def report(name, nbytes, seconds):
    print(f"torch {name} {nbytes} {nbytes / seconds / 1e9:.3f}", flush=True)


def main():
    try:
        import torch
    except ImportError as error:
        print(f"torch transfers skipped: {error}")
        return 0
    if not torch.cuda.is_available():
        print("torch transfers skipped: torch.cuda.is_available() is False")
        return 0
    device = torch.device("cuda:0")
    sync = torch.cuda.synchronize
    for nbytes in SIZES:
        host = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
        # pageable host -> device: x.to("cuda:0"), as PyTorch scripts do
        seconds = timed(lambda: host.to(device), sync)
        assert torch.equal(host.to(device).cpu(), host), "host->device bytes differ"
        report("torch_pageable_to_device", nbytes, seconds)
        if nbytes in LARGE:
            pinned = host.pin_memory()
            seconds = timed(lambda: pinned.to(device), sync)
            assert torch.equal(pinned.to(device).cpu(), host), "pinned->device bytes differ"
            report("torch_pinned_to_device", nbytes, seconds)
        on_gpu = host.to(device)
        # device -> a new host tensor: .to("cpu")
        seconds = timed(lambda: on_gpu.to("cpu"), sync)
        assert torch.equal(on_gpu.to("cpu"), host), "device->host bytes differ"
        report("torch_device_to_new_host", nbytes, seconds)
        if nbytes in LARGE:
            seconds = timed(lambda: on_gpu.clone(), sync)
            assert torch.equal(on_gpu.clone().cpu(), host), "device->device bytes differ"
            report("torch_device_to_device", nbytes, seconds)
        del host, on_gpu
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
