#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel list`: the table and its JSON, on machines of every kind.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_list.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: list, memory, odd_uuids, mixed_models, compute_modes, impossible_readings.
. "$(dirname "$0")/helpers.sh"

case $scenario in
  list)
    run 0 list
    expect stdout "CUDA    PHYS  SMI  NAME         UUID"
    expect stdout "cuda:0  0     0    NVIDIA H200  GPU-0a1b2c3d-0000-4000-8000-000000000000  00000000:17:00.0  117.2 GiB / 140.4 GiB   97%   free   pid 4000000001, owner unknown"
    expect stdout "cuda:1  1     1    NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001  00000000:18:00.0  2.0 GiB / 140.4 GiB     3%    free   pid $$ of $(id -un)"
    expect stdout "GPU-2c3d4e5f-0000-4000-8000-000000000002  00000000:3A:00.0  0 B / 140.4 GiB         0%    free   unknown"
    expect stdout "MIG mode; none"
    expect stdout "Caution: GPU 3 is in MIG mode"
    CUDA_VISIBLE_DEVICES=2,0 run 0 list
    expect stdout "cuda:1  0     0 "
    expect stdout "hidden  1     1 "
    expect stdout "cuda:0  2     2 "
    ;;
  memory)
    # NVML's v2 memory call: "used" as nvidia-smi shows it, the driver's reservation apart; v1 where v2 is missing.
    cat >"$work/reserved.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 pci=00000000:17:00.0 used_mib=0 reserved_mib=615
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 pci=00000000:18:00.0 used_mib=0 reserved_mib=615 memory_v2=unsupported
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/reserved.txt"
    run 0 list
    expect stdout "00000000:17:00.0  0 B / 140.4 GiB         0%    free   615.0 MiB reserved by the driver; none"
    expect stdout "00000000:18:00.0  615.0 MiB / 140.4 GiB   0%    free   none"
    run 0 list --json
    expect_json
    expect stdout '"memory_reserved_bytes": 644874240'
    expect stdout '"memory_reserved_bytes": null'
    ;;
  odd_uuids)
    export GPUSEL_FAKE_NVML_CONFIG="$work/odd.txt"
    run 0 list
    expect stdout "cuda:0  0     0    NVIDIA H200  GPU-5a5a5a5a-0000-4000-8000-000000000000  00000000:17:00.0  1000.0 MiB"
    expect stdout "cuda:1  1     1    NVIDIA H200  GPU-5a5a5a5a-0000-4000-8000-000000000000  00000000:18:00.0  2.0 GiB"
    expect stdout "cuda:2  2     2    NVIDIA H200                                            00000000:19:00.0  2.9 GiB"
    expect stdout "cuda:3  3     3    NVIDIA H200                                            00000000:1A:00.0  3.9 GiB"
    run 0 list --json
    expect_json
    for bus in 17 18 19 1A; do expect stdout "\"pci_bus_id\": \"00000000:$bus:00.0\""; done
    # GPU 1 reports GPU 0's UUID: one GPU counted twice (Note [One UUID, one GPU]), picked once and said so
    run 0 pick --all --order index --format index
    [ "$out" = "0,2,3" ] || { echo "FAILED: expected the duplicate once, 0,2,3, got [$out]"; failures=$((failures + 1)); }
    run 1 pick -n 2 --format uuid --exclude 2,3
    [ -z "$out" ] || { echo "FAILED: one UUID is one GPU, printed twice as [$out]"; failures=$((failures + 1)); }
    expect stderr "NVML reports the UUID of GPU 0 for it too (GPU-5a5a5a5a-0000-4000-8000-000000000000), so gpusel counts the two as one GPU, GPU 0"
    run 0 list
    expect stdout "Caution: NVML reports GPU-5a5a5a5a-0000-4000-8000-000000000000 for GPUs 0 and 1: pick counts them as one GPU"
    run 0 pick --min-free 139GiB
    [ "$out" = 0 ] || { echo "FAILED: only GPU 0 has 139 GiB free"; failures=$((failures + 1)); }
    ;;
  mixed_models)
    export GPUSEL_FAKE_NVML_CONFIG="$work/mixed.txt"
    run 0 list
    expect stdout "cuda:0  0     1    NVIDIA H200"
    expect stdout "cuda:1  1     2    NVIDIA L4"
    expect stdout "cuda:2  2     0    NVIDIA A100-SXM4-80GB"
    expect stdout "Caution: this machine has GPUs of different models"
    run 0 pick
    [ "$out" = 0 ] || { echo "FAILED: the H200 is CUDA's physical 0 under FASTEST_FIRST"; failures=$((failures + 1)); }
    expect stderr "--format uuid names the GPUs exactly"
    CUDA_DEVICE_ORDER=PCI_BUS_ID run 0 pick --format index
    [ "$out" = 1 ] || { echo "FAILED: under PCI_BUS_ID the H200 is physical 1"; failures=$((failures + 1)); }
    [ -z "$err" ] || { echo "FAILED: no caution is due under PCI_BUS_ID"; failures=$((failures + 1)); }
    run 0 pick --min-free 100GiB --format uuid
    [ "$out" = GPU-b2000000-0000-4000-8000-000000000000 ] || { echo "FAILED: only the H200 has 100 GiB"; failures=$((failures + 1)); }
    ;;
  compute_modes)
    # The driver's own exclusivity (nvidia-smi -c): list shows a mode that is not Default,
    # and pick never takes a Prohibited GPU, nor an Exclusive_Process one that runs a
    # compute process, whatever --share-own and --allow-other-users say.
    cat >"$work/modes.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 compute_mode=prohibited
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 compute_mode=exclusive_process
gpu uuid=GPU-2c000000-0000-4000-8000-000000000000 compute_mode=exclusive_process
process gpu=1 pid=4000000001 used_mib=512
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/modes.txt"
    run 0 list
    expect stdout "Prohibited mode; none"
    expect stdout "Exclusive_Process mode; pid 4000000001"
    run 0 list --json
    expect_json
    expect_in_json '[g["compute_mode"] for g in d["gpus"]] == ["Prohibited", "Exclusive_Process", "Exclusive_Process"]'
    run 0 pick -n 1 --share-own --allow-other-users
    expect_line stdout "2"
    run 1 pick -n 2 --share-own --allow-other-users
    expect stderr "its compute mode is Prohibited: CUDA creates no context on it"
    expect stderr "its compute mode is Exclusive_Process and a compute process runs on it (pid 4000000001"
    ;;
  impossible_readings)
    # An NVML whose readings cannot be true: 3000000000% utilization (once shown as
    # -1294967296% and picked under --max-util 0), more memory free than in total.
    cat >"$work/absurd.txt" <<EOF
gpu uuid=GPU-0a000000-0000-4000-8000-000000000000 utilization=3000000000
gpu uuid=GPU-1b000000-0000-4000-8000-000000000000 memory_mib=1024 used_mib=2048
gpu uuid=GPU-2c000000-0000-4000-8000-000000000000 utilization=5 process_count=4294967295
EOF
    export GPUSEL_FAKE_NVML_CONFIG="$work/absurd.txt"
    run 0 list
    if grep -qE -- "-[0-9]+%" <<<"$out"; then echo "FAILED: a negative utilization is shown"; failures=$((failures + 1)); fi
    expect stdout "readings cannot be true: NVML reports 3000000000% utilization"
    run 1 pick --max-util 0 --allow-other-users
    expect stderr "GPU-0a000000-0000-4000-8000-000000000000), 140.4 GiB free: its readings cannot be true (NVML reports 3000000000% utilization"
    run 1 pick --min-free 1GiB --allow-other-users
    expect stderr "its readings cannot be true (NVML reports"
    expect stderr "4294967295 compute processes, more than the 4096 gpusel reads"
    run 0 list --json
    expect_json
    expect stdout '"impossible_readings": "NVML reports 3000000000% utilization'
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
