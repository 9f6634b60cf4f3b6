#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel pick`: the GPUs that fit, printed, and why the others do not; MIG instances, topology.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_pick.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: pick, pick_fails, exclude_numbering, mig, topology.
. "$(dirname "$0")/helpers.sh"

case $scenario in
  pick)
    GPUSEL_FAKE_NVML_LOG="$work/looks" run 0 pick --share-own
    [ "$out" = 1 ] || { echo "FAILED: pick printed [$out], expected 1"; failures=$((failures + 1)); }
    expect_looks 1 "gpusel pick"  # Note [One look per attempt]
    # By default this user's own process (the shell running this script, not gpusel) makes GPU 1 busy too,
    # and the report says which process did.
    run 1 pick
    [ -z "$out" ] || { echo "FAILED: GPU 1 runs this user's process: nothing is free"; failures=$((failures + 1)); }
    expect stderr "0 of 4 GPUs fit, 1 is needed (at least 1 GPU (at most 1); no compute process (this user's own included); most free memory first)"
    expect stderr "GPU-1b2c3d4e-0000-4000-8000-000000000001), 138.4 GiB free, 3% utilized: this user's own compute process runs on it (pid $$ of $(id -un)"
    run 1 pick --json
    expect_json
    expect_in_json "d['assessed'][1]['busy_processes'][0]['pid'] == $$ and d['assessed'][0]['busy_processes'][0]['pid'] == 4000000001"
    expect_in_json "d['assessed'][2]['busy_processes'] == []"
    run 0 pick -n 2 --min-free 8GiB --max-util 10 --allow-other-users --exclude 3
    [ "$out" = "2,1" ] || { echo "FAILED: expected 2,1 (most free memory first)"; failures=$((failures + 1)); }
    run 0 pick --format uuid --exclude GPU-1b2c --allow-other-users --max-util 99 --order util --all
    [ "$out" = "GPU-2c3d4e5f-0000-4000-8000-000000000002,GPU-0a1b2c3d-0000-4000-8000-000000000000" ] ||
      { echo "FAILED: unexpected UUIDs"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=0,2 run 0 pick --allow-other-users --all
    [ "$out" = "2,0" ] || { echo "FAILED: expected 2,0: only the GPUs CUDA_VISIBLE_DEVICES shows"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=0,2 run 0 pick --allow-other-users --all --whole-machine --order index
    [ "$out" = "0,1,2" ] || { echo "FAILED: expected 0,1,2 with --whole-machine"; failures=$((failures + 1)); }
    ;;
  pick_fails)
    run 1 pick -n 2 --min-free 8GiB --max-util 10 --share-own
    [ -z "$out" ] || { echo "FAILED: nothing may be printed on stdout when nothing fits"; failures=$((failures + 1)); }
    expect stderr "gpusel: 1 of 4 GPUs fit, 2 are needed (at least 2 GPUs (at most 2); at least 8.0 GiB free; at most 10% utilized; no other user's compute process; most free memory first):"
    expect stderr "GPU 0 (nvidia-smi 0, NVIDIA H200, GPU-0a1b2c3d-0000-4000-8000-000000000000), 23.2 GiB free, 97% utilized: 97% utilized, at most 10% allowed; another user's compute process runs on it (pid 4000000001, owner unknown: not visible from this PID namespace, 116.2 GiB)"
    expect stderr "GPU-1b2c3d4e-0000-4000-8000-000000000001), 138.4 GiB free, 3% utilized: fits"
    expect stderr "its compute processes are unknown (NVML could not list them)"
    expect stderr "MIG mode is enabled"
    run 2 pick --exclude 9
    expect stderr "gpusel: cannot exclude \"9\": there is no GPU with that number (4 GPUs)"
    # a GPU CUDA_VISIBLE_DEVICES hides is no candidate: excluding it is a mistake too, said as such
    CUDA_VISIBLE_DEVICES=2,3 run 2 pick --exclude 1
    expect stderr "cannot exclude \"1\": it names GPU 1 (nvidia-smi 1, GPU-1b2c3d4e-0000-4000-8000-000000000001), which CUDA_VISIBLE_DEVICES=2,3 hides, so it is no candidate anyway"
    CUDA_VISIBLE_DEVICES=2,3 run 2 pick --json --exclude 1
    expect_json
    expect stdout '"error": "usage"'
    CUDA_VISIBLE_DEVICES=0,1 run 1 pick --exclude 1 --share-own
    expect stderr "excluded (\"1\" names it)"
    ;;
  exclude_numbering)
    # What pick prints, --exclude takes: on mixed models CUDA's physical 0 is the H200, nvidia-smi's 0 the A100.
    export GPUSEL_FAKE_NVML_CONFIG="$work/mixed.txt"
    run 0 pick
    [ "$out" = 0 ] || { echo "FAILED: expected physical 0, the H200"; failures=$((failures + 1)); }
    run 0 pick --exclude 0 --format uuid
    [ "$out" != GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: --exclude 0 must exclude what pick printed"; failures=$((failures + 1)); }
    run 0 pick --exclude smi:0,smi:2 --format uuid
    [ "$out" = GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: smi:N names nvidia-smi's GPU N"; failures=$((failures + 1)); }
    run 2 pick --exclude smi:7
    expect stderr "cannot exclude \"smi:7\": nvidia-smi numbers no GPU so (3 GPUs)"
    ;;
  mig)
    export GPUSEL_FAKE_NVML_CONFIG="$work/mig.txt"
    # Listed under their GPU, with their UUIDs, ids and memory, in text and JSON.
    run 0 list
    expect stdout "MIG GI 1 CI 0  MIG-4a5b6c7d-0000-4000-8000-000000000000                    29.3 GiB / 70.0 GiB"
    expect stdout "MIG GI 2 CI 1  MIG-6c7d8e9f-0000-4000-8000-000000000002                    1.0 GiB / 35.0 GiB"
    run 0 list --json
    expect_json
    expect_in_json 'd["gpus"][1]["mig_instances"][1] == {"uuid": "MIG-5b6c7d8e-0000-4000-8000-000000000001", "gpu_instance_id": 2, "compute_instance_id": 0, "memory_total_bytes": 35840 << 20, "memory_used_bytes": 0, "memory_free_bytes": 35840 << 20, "processes": [], "lease": d["gpus"][1]["mig_instances"][1]["lease"]}'
    expect_in_json 'd["gpus"][1]["mig_instances"][1]["lease"]["text"] == "free"'
    expect_in_json 'd["gpus"][1]["mig_instances"][0]["processes"][0]["pid"] == 4000000001'
    # Each instance is one GPU for -n, judged by its own memory and processes, printed as its MIG- UUID.
    run 0 pick --min-free 30GiB
    [ "$out" = MIG-5b6c7d8e-0000-4000-8000-000000000001 ] ||
      { echo "FAILED: expected the free MIG instance, got [$out]"; failures=$((failures + 1)); }
    run 1 pick -n 3 --min-free 30GiB
    expect stderr "MIG instance MIG-4a5b6c7d-0000-4000-8000-000000000000 (GI 1, CI 0) of GPU 1"
    expect stderr "another user's compute process runs on it (pid 4000000001"
    run 0 pick -n 2 --exclude 0 --format index
    [ "$out" = MIG-5b6c7d8e-0000-4000-8000-000000000001,MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: expected two MIG instances of GPU 1, got [$out]"; failures=$((failures + 1)); }
    expect stderr "CUDA 11 and 12 show one process a single MIG instance"
    run 0 pick --exclude 0,MIG-5b6c
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: --exclude MIG-5b6c should leave the other instance, got [$out]"; failures=$((failures + 1)); }
    CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f run 0 explain
    expect stdout "names a MIG instance (\"MIG-6c7d8e9f\"), an instance of physical GPU 1 (nvidia-smi 1; GI 2, CI 1)"
    CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f-0000-4000-8000-000000000002 run 0 pick
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: only the instance CUDA_VISIBLE_DEVICES names is visible, got [$out]"; failures=$((failures + 1)); }
    # run: the command's CUDA_VISIBLE_DEVICES is the MIG- UUID, and a lease on one instance
    # leaves the GPU's other instance to a second job.
    "$gpusel" run --exclude 0 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES" >"$1"; sleep 3' sh "$work/first" 2>/dev/null &
    first=$!
    for _ in $(seq 50); do [ -s "$work/first" ] && break; sleep 0.1; done
    run 0 run --exclude 0 -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
    [ "$(cat "$work/first")" = MIG-5b6c7d8e-0000-4000-8000-000000000001 ] ||
      { echo "FAILED: the first job should get MIG-5b6c7d8e..., got [$(cat "$work/first")]"; failures=$((failures + 1)); }
    [ "$out" = MIG-6c7d8e9f-0000-4000-8000-000000000002 ] ||
      { echo "FAILED: the second job should get the other instance, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: running sh with CUDA_VISIBLE_DEVICES=MIG-6c7d8e9f-0000-4000-8000-000000000002"
    run 125 run --exclude 0 --allow-other-users -n 3 -- true
    expect stderr "leased by another job"
    wait "$first"
    unset GPUSEL_FAKE_NVML_CONFIG
    ;;
  topology)
    export GPUSEL_FAKE_NVML_CONFIG="$work/topology.txt"
    # NUMA node and CPUs, as ranges, so host threads can be pinned.
    run 0 list
    expect stdout "NUMA  CPUS         LEASE  PROCESSES"
    expect stdout "0%    1     16-31,48-63  free   none"
    run 0 list --json --links
    expect_json
    expect_in_json 'd["gpus"][0]["numa_node"] == 0 and d["gpus"][0]["cpu_affinity"] == "0-15,32-47"'
    expect_in_json 'd["gpus"][0]["links"] == [{"nvml_index": 1, "link": "nvlink"}, {"nvml_index": 2, "link": "system"}, {"nvml_index": 3, "link": "system"}]'
    # links grow as the square of the GPUs: only when asked for (list --links), never in pick's document
    run 0 list --json
    expect_json
    expect_in_json 'all(g["links"] is None for g in d["gpus"]) and d["gpus"][2]["numa_node"] == 1'
    run 0 list --links
    expect stdout "GPUs 0 and 1 are joined by NVLink"
    expect stdout "GPUs 1 and 3 are across NUMA nodes"
    run 2 pick --links
    expect stderr "--links is an option of list only, not of pick"
    run 0 pick -n 2 --connected --json
    expect_json
    expect_in_json 'all(c["links"] is None for c in d["assessed"]) and d["connection"]["weakest_link"] == "nvlink"'
    # Without --connected, most free memory first: 0 and 2, across NUMA nodes; with it, an NVLink pair.
    run 0 pick -n 2
    [ "$out" = 0,2 ] || { echo "FAILED: expected 0,2 by free memory, got [$out]"; failures=$((failures + 1)); }
    run 0 pick -n 2 --connected
    [ "$out" = 0,1 ] || { echo "FAILED: expected the NVLink pair 0,1, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: connected: GPUs 0 and 1 are joined by NVLink"
    run 0 pick -n 2 --connected --exclude 1 --json
    expect_json
    expect_in_json 'd["connection"]["weakest_link"] == "nvlink" and d["cuda_visible_devices"] == "2,3"'
    expect stdout "excluding 1; connected GPUs preferred (NVLink, else one PCIe switch, else one host bridge, else one NUMA node)"
    # No connected set fits: the best one that does, with the reason.
    run 0 pick -n 2 --connected --exclude 1,3
    [ "$out" = 0,2 ] || { echo "FAILED: expected the fallback 0,2, got [$out]"; failures=$((failures + 1)); }
    expect stderr "GPUs 0 and 2 are across NUMA nodes (no 2 of the GPUs that fit are connected more closely)"
    # run takes it too.
    run 0 run -n 2 --connected --exclude 0 --format index -- sh -c 'echo "$CUDA_VISIBLE_DEVICES"'
    [ "$out" = 2,3 ] || { echo "FAILED: run --connected should give the NVLink pair 2,3, got [$out]"; failures=$((failures + 1)); }
    expect stderr "gpusel: connected: GPUs 2 and 3 are joined by NVLink"
    unset GPUSEL_FAKE_NVML_CONFIG
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
