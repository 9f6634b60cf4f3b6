#!/usr/bin/env python3
"""PyTorch doing the work tests/bench/buffer_bench.cpp measures, under the same
names with torch_ in place of gpusel_, so the two outputs join on (name, args).

    transfer_torch.py [--repeats N] [--groups transfers,make_drop,modules]
                      [--sizes 4096,65536,...] [--shapes tests/bench/model_shapes.txt]

Run on a GPU machine where `import torch` works. tests/gpu/check.sh runs it in
rounds, alternating with buffer_bench (gpusel's side, filtered), since the two
cannot share a process; the summary takes the ratio round by round and the
median over rounds. Prints one parseable line per measurement:

    torch <name> <args> <median seconds per call> <samples>

(args "-" when the gpusel benchmark has none). Each sample times enough calls
to last about 20 ms (one call for the slow ones) after a first, untimed call
that also warms the caching allocator (a first call over 0.2 s is the first
sample instead). Every measurement checks that the bytes
arrived. Exits 0 with a "torch transfers skipped: ..." line when torch or a GPU
is missing.

The modules are nn.Modules with one float32 nn.Parameter per line of
model_shapes.txt (the file buffer_bench's gpusel::Modules are built from;
'.' in names becomes '_', as there), filled with small integers.
"""
import argparse
import math
import os
import statistics
import sys
import time

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SMALL = [4 * KIB, 64 * KIB]
LARGE = [40 * MIB, 1 * GIB]
SAMPLE_SECONDS = 0.02
SLOW_SECONDS = 0.2
MODELS = ["resnet50", "bert_base"]
HERE = os.path.dirname(os.path.abspath(__file__))


def report(name, args, seconds, samples):
    print(f"torch {name} {args if args else '-'} {seconds:.6g} {samples}", flush=True)


def timed(function, sync, repeats):
    """(median seconds per call, samples, the last call's result): a first call
    untimed, then `repeats` samples of enough calls to last about SAMPLE_SECONDS.
    A first call slower than SLOW_SECONDS counts as the first sample instead
    (1 GiB into new host memory takes most of a second: a round cannot afford
    a warm-up of it, and the median of three tolerates one cold call)."""
    start = time.perf_counter()
    result = function()
    sync()
    once = time.perf_counter() - start
    samples = [once] if once > SLOW_SECONDS else []
    calls = max(1, math.ceil(SAMPLE_SECONDS / max(once, 1e-9)))
    while len(samples) < repeats:
        start = time.perf_counter()
        for _ in range(calls):
            result = None  # dropped first, as buffer_bench drops its last result
            result = function()
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples), len(samples), result


def pattern(torch, nbytes):
    """Host bytes with a period of 1 MiB + 4099 (an odd number), so a chunk
    copied to the wrong place shows."""
    block = torch.randint(0, 256, (MIB + 4099,), dtype=torch.uint8)
    reps = -(-nbytes // block.numel())
    return block.repeat(reps)[:nbytes].clone()


def transfers(torch, device, sizes, repeats):
    """Each result is checked where it lies: on the host against the pattern,
    on the GPU against a device copy checked once through pinned memory (so no
    check pays for a slow copy into new host memory)."""
    sync = torch.cuda.synchronize
    for nbytes in sizes:
        host = pattern(torch, nbytes)
        pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        on_gpu = host.to(device)
        pinned.copy_(on_gpu)
        assert torch.equal(pinned, host), "host->device bytes differ"
        destination = torch.zeros(nbytes, dtype=torch.uint8, device=device)

        # pageable host -> existing device memory: dst.copy_(host) (gpusel: copy_from)
        seconds, n, _ = timed(lambda: destination.copy_(host), sync, repeats)
        assert torch.equal(destination, on_gpu), "host->device bytes differ"
        report("torch_pageable_to_device", nbytes, seconds, n)
        if nbytes in LARGE:
            # x.to("cuda"), allocation included (gpusel: Buffer::to(cuda(0)))
            seconds, n, last = timed(lambda: host.to(device), sync, repeats)
            assert torch.equal(last, on_gpu), "host->new device bytes differ"
            report("torch_to_cuda", nbytes, seconds, n)
            del last
            pinned.copy_(host)
            destination.zero_()
            seconds, n, _ = timed(lambda: destination.copy_(pinned), sync, repeats)
            assert torch.equal(destination, on_gpu), "pinned->device bytes differ"
            report("torch_pinned_to_device", nbytes, seconds, n)
            pinned.zero_()
            seconds, n, _ = timed(lambda: pinned.copy_(on_gpu), sync, repeats)
            assert torch.equal(pinned, host), "device->pinned bytes differ"
            report("torch_device_to_pinned", nbytes, seconds, n)
            destination.zero_()
            seconds, n, _ = timed(lambda: destination.copy_(on_gpu), sync, repeats)
            assert torch.equal(destination, on_gpu), "device->device bytes differ"
            report("torch_device_to_device", nbytes, seconds, n)
        else:
            existing = torch.zeros(nbytes, dtype=torch.uint8)
            seconds, n, _ = timed(lambda: existing.copy_(on_gpu), sync, repeats)
            assert torch.equal(existing, host), "device->host bytes differ"
            report("torch_device_to_host", nbytes, seconds, n)
        # device -> a new host tensor: .to("cpu")
        seconds, n, last = timed(lambda: on_gpu.to("cpu"), sync, repeats)
        assert torch.equal(last, host), "device->new host bytes differ"
        report("torch_device_to_new_host", nbytes, seconds, n)
        del host, pinned, on_gpu, destination, last
        torch.cuda.empty_cache()


def make_drop(torch, device, repeats):
    nbytes = MIB

    def once():
        temporary = torch.empty(nbytes, dtype=torch.uint8, device=device)
        del temporary

    seconds, n, _ = timed(once, torch.cuda.synchronize, repeats)
    expected = pattern(torch, nbytes)
    last = torch.empty(nbytes, dtype=torch.uint8, device=device)
    last.copy_(expected)
    assert torch.equal(last.cpu(), expected), "a new device tensor did not hold its bytes"
    report("torch_make_drop", nbytes, seconds, n)


def read_shapes(path):
    models = {}
    with open(path, encoding="utf-8") as file:
        for line in file:
            fields = line.split("#", 1)[0].split()
            if len(fields) >= 2:
                models.setdefault(fields[0], []).append((fields[1], [int(d) for d in fields[2:]]))
    return models


def modules(torch, device, shapes_path, repeats):
    models = read_shapes(shapes_path)
    sync = torch.cuda.synchronize

    class Shaped(torch.nn.Module):
        def __init__(self, tensors):
            super().__init__()
            for index, (name, shape) in enumerate(tensors):
                generator = torch.Generator().manual_seed(index + 1)
                values = torch.empty(shape, dtype=torch.float32).random_(-1000, 1000, generator=generator)
                self.register_parameter(name.replace(".", "_"), torch.nn.Parameter(values))

    for model in MODELS:
        if model not in models:
            raise SystemExit(f"transfer_torch.py: {shapes_path} has no model {model}")
        net = Shaped(models[model])
        expected = [p.detach().clone() for p in net.parameters()]

        def to_cuda():
            net.to(device)
            sync()

        def to_cpu():
            net.to("cpu")

        # to("cuda") timed, back to the cpu untimed (one sample = one call: tens of ms)
        samples = []
        to_cuda()
        to_cpu()  # warms the caching allocator, as gpusel's first repetition warms its caches
        for _ in range(repeats):
            start = time.perf_counter()
            to_cuda()
            samples.append(time.perf_counter() - start)
            to_cpu()
        report(f"torch_module_to_cuda_{model}", "", statistics.median(samples), len(samples))
        samples = []
        for _ in range(repeats):
            to_cuda()
            start = time.perf_counter()
            to_cpu()
            sync()
            samples.append(time.perf_counter() - start)
        report(f"torch_module_to_cpu_{model}", "", statistics.median(samples), len(samples))
        for got, want in zip(net.parameters(), expected):
            assert got.device.type == "cpu" and torch.equal(got.detach(), want), f"{model}: bytes differ"
        del net, expected
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per measurement")
    parser.add_argument("--groups", default="transfers,make_drop,modules")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SMALL + LARGE),
                        help="transfer sizes in bytes (of 4096, 65536, 41943040, 1073741824)")
    parser.add_argument("--shapes", default=os.environ.get("GPUSEL_BENCH_MODEL_SHAPES")
                        or os.path.join(HERE, "model_shapes.txt"))
    options = parser.parse_args()
    try:
        import torch
    except ImportError as error:
        print(f"torch transfers skipped: {error}")
        return 0
    if not torch.cuda.is_available():
        print("torch transfers skipped: torch.cuda.is_available() is False")
        return 0
    print(f"torch version {torch.__version__} cuda {torch.version.cuda}", flush=True)
    device = torch.device("cuda:0")
    groups = set(options.groups.split(","))
    if "transfers" in groups:
        transfers(torch, device, [int(s) for s in options.sizes.split(",") if s], options.repeats)
    if "make_drop" in groups:
        make_drop(torch, device, options.repeats)
    if "modules" in groups:
        modules(torch, device, options.shapes, options.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
