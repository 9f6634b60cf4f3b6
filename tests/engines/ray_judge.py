"""ctest engines_ray: gpusel inside Ray's workers, judged by Ray's own record, ray.get_gpu_ids().

    python ray_judge.py <gpusel> <rank device program> <work directory> [train]

Run by check_ray.sh, which sets the fake NVML's 4-GPU machine (GPUSEL_NVML_LIBRARY,
GPUSEL_FAKE_NVML_CONFIG), a lease directory and RAY_TMPDIR of the test's own. Starts a
one-node Ray that declares 4 CPUs and 4 GPUs (the machine has none), and in each shape -- 
tasks of one GPU, a task of two, actors of one, two actors of half a GPU each, and with
"train" a Ray Train TorchTrainer of two workers (gloo) -- asks `gpusel explain --json`,
`gpusel pick --json`, and gpusel::local_rank_device() (the rank device program), and checks
that each chose Ray's GPUs and named Ray. Prints a line per check and "N passed, N failed".
Ends the Ray it started by the pids Ray reports, never with `ray stop`.
"""
import json
import os
import signal
import subprocess
import sys
import time

import ray

GPUSEL, RANK_DEVICE, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
WITH_TRAIN = len(sys.argv) > 4 and sys.argv[4] == "train"
UUIDS = ["GPU-fa4e0000-0000-0000-0000-00000000000%d" % i for i in range(4)]  # the fake NVML's default


def run(*arguments):
    done = subprocess.run(arguments, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def look(shape, n=1):
    """What gpusel says and chooses in this worker, beside Ray's own record."""
    explain = json.loads(run(GPUSEL, "explain", "--json")[1])
    pick_status, pick_out, pick_err = run(GPUSEL, "pick", "-n", str(n), "--json")
    library = run(RANK_DEVICE)
    return {
        "shape": shape,
        "ray_gpu_ids": [int(g) for g in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "engine": explain["allotment"]["engine"],
        "visible": [d["uuid"] for d in explain.get("visible", explain.get("devices", []))],
        "pick_status": pick_status,
        "picked": [d["uuid"] for d in json.loads(pick_out).get("picked", [])] if pick_out else [],
        "pick_err": pick_err,
        "library": library[1].strip() or library[2].strip(),
        "local_rank": os.environ.get("LOCAL_RANK"),
        "run_local_rank": run(GPUSEL, "run", "--local-rank", "--no-lease", "--", "sh", "-c",
                              "echo $CUDA_VISIBLE_DEVICES") if "LOCAL_RANK" in os.environ else None,
    }


@ray.remote(num_gpus=1, num_cpus=0.5)
def one_gpu_task():
    time.sleep(0.5)  # so that the tasks overlap and Ray gives them different GPUs
    return look("task, num_gpus=1")


@ray.remote(num_gpus=2, num_cpus=0.5)
def two_gpu_task():
    return look("task, num_gpus=2", 2)


@ray.remote(num_gpus=1, num_cpus=0.5)
class OneGpu:
    def look(self):
        return look("actor, num_gpus=1")


@ray.remote(num_gpus=0.5, num_cpus=0.5)
class HalfGpu:
    def look(self):
        return look("actor, num_gpus=0.5")


passed = failed = 0


def check(ok, what, seen):
    global passed, failed
    passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
    print(("ok      " if ok else "FAILED  ") + what + ("" if ok else ": " + json.dumps(seen)), flush=True)


def judge(seen, engine="Ray", role="a task or actor", worker=None):
    ray_uuids = [UUIDS[g] for g in seen["ray_gpu_ids"]]
    what = seen["shape"] + " on Ray's GPUs " + str(seen["ray_gpu_ids"])
    check(len(ray_uuids) >= 1, what + ": Ray gave GPUs", seen)
    check(seen["visible"] == ray_uuids or sorted(seen["visible"]) == sorted(ray_uuids) or seen["local_rank"] is not None,
          what + ": explain shows Ray's GPUs", seen)
    check(seen["engine"] is not None and seen["engine"]["name"] == engine and seen["engine"]["role"] == role,
          what + ": explain names " + engine, seen)
    check(seen["engine"] is not None and (seen["engine"].get("worker") or "").startswith(worker or "ray::"),
          what + ": explain names its Ray worker, " + (worker or "ray::..."), seen)
    check(seen["pick_status"] == 0 and set(seen["picked"]) <= set(seen["visible"]) and seen["picked"],
          what + ": pick chose among them", seen)
    if seen["local_rank"] is None:
        check(seen["library"] == ray_uuids[0], what + ": local_rank_device() took Ray's first GPU", seen)


def main():
    os.environ["RAY_AUTH_MODE"] = "disabled"  # no token written to ~/.ray
    started = time.time()
    context = ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False,
                       _temp_dir=os.environ["RAY_TMPDIR"])
    print("ray.init: %.1f s, %s" % (time.time() - started, context.address_info.get("gcs_address")), flush=True)
    try:
        tasks = ray.get([one_gpu_task.remote() for _ in range(4)])
        for seen in tasks:
            judge(seen, worker="ray::one_gpu_task")
        check(len({tuple(t["ray_gpu_ids"]) for t in tasks}) >= 2, "overlapping tasks got different GPUs", tasks)
        judge(ray.get(two_gpu_task.remote()), worker="ray::two_gpu_task")
        actors = [OneGpu.remote() for _ in range(2)]
        for seen in ray.get([a.look.remote() for a in actors]):
            judge(seen, worker="ray::OneGpu.look")
        for a in actors:
            ray.kill(a)
        halves = [HalfGpu.remote() for _ in range(2)]
        shared = ray.get([h.look.remote() for h in halves])
        for seen in shared:
            judge(seen, worker="ray::HalfGpu.look")
        check(shared[0]["ray_gpu_ids"] == shared[1]["ray_gpu_ids"], "two num_gpus=0.5 actors share one GPU", shared)
        for h in halves:
            ray.kill(h)
        if WITH_TRAIN:
            train(started)
    finally:
        end_ray()
    print("ray: %.1f s in all" % (time.time() - started))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def train_loop():
    import ray.train
    import ray.train.torch
    seen = look("Ray Train worker")
    seen["get_device"] = str(ray.train.torch.get_device())
    with open(os.path.join(WORK, "train.%s.json" % seen["local_rank"]), "w") as out:
        json.dump(seen, out)


def train(started):
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    before = time.time()
    TorchTrainer(train_loop, torch_config=TorchConfig(backend="gloo"),
                 scaling_config=ScalingConfig(num_workers=2, use_gpu=True,
                                              resources_per_worker={"CPU": 1, "GPU": 1})).fit()
    print("Ray Train: %.1f s" % (time.time() - before), flush=True)
    for rank in (0, 1):
        with open(os.path.join(WORK, "train.%d.json" % rank)) as f:
            seen = json.load(f)
        judge(seen, "Ray Train", "a worker")
        own = UUIDS[seen["ray_gpu_ids"][0]]
        status, out, err = seen["run_local_rank"]
        check(status == 0 and out.strip() == own, "Ray Train local rank %d (CUDA_VISIBLE_DEVICES=%s, get_device() %s): "
              "gpusel run --local-rank took Ray's GPU %s" % (rank, seen["cuda_visible_devices"], seen["get_device"], own),
              seen)
        check(seen["library"] == own, "Ray Train local rank %d: local_rank_device() took Ray's GPU" % rank, seen)


def descendants(roots):
    """The pids of `roots` and of every process below them, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
        except (ValueError, OSError, IndexError):
            continue
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def alive(pid):
    """Whether `pid` still runs: a child of this process that ended is reaped, and a zombie counts as ended."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_ray():
    """Ends every process of the Ray this test started, by pid: the node's (GCS, raylet, agents) and every
    worker below them; never `ray stop`, which ends every user's Ray. Checks that none is left."""
    node = ray._private.worker._global_node
    roots = [p.process.pid for processes in node.all_processes.values() for p in processes] if node else []
    pids = descendants(roots) - {os.getpid()}
    ray.shutdown()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    check(not left, "every process of this test's Ray (%d) ended by its pid" % len(pids), left)


if __name__ == "__main__":
    sys.exit(main())
