#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel explain`: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, the scheduler and the container.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_explain.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: explain, device_order, scheduler.
. "$(dirname "$0")/helpers.sh"

case $scenario in
  explain)
    CUDA_VISIBLE_DEVICES=1 run 0 explain
    expect stdout "CUDA_VISIBLE_DEVICES=1"
    expect stdout "1 CUDA device is visible"
    expect stdout "cuda:0  physical 1  nvidia-smi 1  NVIDIA H200  GPU-1b2c3d4e-0000-4000-8000-000000000001"
    expect stdout "Hidden from this process:"
    CUDA_VISIBLE_DEVICES=1,7,0 run 0 explain
    expect stdout "\"7\""
    expect stdout "ends the list"
    # A value that makes CUDA fail is an exit status a job script can test, with and without --json.
    CUDA_VISIBLE_DEVICES=0,0 run 1 explain
    expect stdout "names physical GPU 0 twice"
    CUDA_VISIBLE_DEVICES=0,0 run 1 explain --json
    expect_json
    expect stdout '"ok": false'
    CUDA_VISIBLE_DEVICES=-1 run 1 explain
    expect stdout "No CUDA device is visible"
    ;;
  device_order)
    # An invalid CUDA_DEVICE_ORDER makes the runtime fail: pick and run fail too, as explain says.
    CUDA_DEVICE_ORDER=pci_bus_id run 1 pick
    [ -z "$out" ] || { echo "FAILED: nothing may be printed"; failures=$((failures + 1)); }
    expect stderr "CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails with cudaErrorInvalidDevice"
    CUDA_DEVICE_ORDER=pci_bus_id run 1 pick --json
    expect_json
    expect stdout '"ok": false'
    CUDA_DEVICE_ORDER=pci_bus_id run 125 run -- true
    CUDA_DEVICE_ORDER=pci_bus_id run 1 explain --json
    expect stdout '"ok": false'
    # pick never prints an empty list: --at-least 0 is refused, and a visible set that hides everything fails
    run 2 pick --at-least 0
    expect stderr "--at-least expects a whole number of at least 1"
    [ -z "$out" ] || { echo "FAILED: nothing may be printed"; failures=$((failures + 1)); }
    run 2 pick --all --at-least 0
    CUDA_VISIBLE_DEVICES= run 1 pick --all --allow-other-users
    [ -z "$out" ] || { echo "FAILED: an empty list was printed"; failures=$((failures + 1)); }
    # MIG instance UUIDs: explain says what it knows and leaves the rest to CUDA
    CUDA_VISIBLE_DEVICES=MIG-4a5b6c7d-0000-4000-8000-000000000000 run 0 explain
    expect stdout "names a MIG instance"
    expect stdout "CUDA's to decide"
    ;;
  scheduler)
    # What CUDA ignores is said right under the headline, on examples/machines/h200x4.machine as in the docs.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/h200x4.machine
    CUDA_VISIBLE_DEVICES=1,,2 run 0 explain
    ignored='CUDA ignores ",2" of CUDA_VISIBLE_DEVICES: token 2, "", ends the list: it is not a number.'
    [ "$(sed -n 2p <<<"$out")" = "$ignored" ] || { echo "FAILED: line 2 is not: $ignored"; failures=$((failures + 1)); }
    # Without NVML, a token that ends the list on any machine is judged too.
    GPUSEL_NVML_LIBRARY=none CUDA_VISIBLE_DEVICES=1,,2 run 3 explain
    expect_line stdout 'CUDA ignores at least ",2" of CUDA_VISIBLE_DEVICES: token 2, "", ends the list on any machine: it is not a number.'
    # A task of srun -n2 --gpus-per-task=1 while another job holds GPUs 0 and 1: Slurm's names beside CUDA's.
    slurm=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2 SLURM_STEP_GPUS=3 CUDA_VISIBLE_DEVICES=3)
    launcher=("${slurm[@]}")
    run 0 explain
    expect_line stdout "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=3, in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel maps no GPU by them)."
    expect_line stdout "This task has GPUs of its own, 1 of the step's 2 (CUDA_VISIBLE_DEVICES lists 1): cuda:0 is GPU-c06a5e21-9f3b-a4d8-61e7-0b5d3c2f8e94."
    run 0 explain --json
    expect_json
    expect_in_json 'd["allotment"]["scheduler"] == "Slurm" and d["allotment"]["step"] == "12.0" and d["allotment"]["gpus_on_node"] == 2'
    expect_in_json 'd["allotment"]["slurm_step_gpus"] == "3" and d["allotment"]["slurm_job_gpus"] is None and d["allotment"]["known"]'
    expect_in_json 'd["allotment"]["text"].startswith("Slurm gave this step (12.0) 2 GPUs")'
    run 0 list
    expect_line stdout "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, SLURM_STEP_GPUS=3, in Slurm's names (node-wide; under ConstrainDevices not the driver's, so gpusel maps no GPU by them)."
    expect stdout "cuda:0  3 "
    run 0 list --json
    expect_json
    expect_in_json 'd["allotment"]["slurm_step_gpus"] == "3" and d["allotment"]["refusal"] == ""'
    # Slurm gave GPUs without saying which (srun -n2 --gpu-bind=none): explain says so, and exits 0.
    launcher=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2)
    run 0 explain
    expect stdout "Slurm gave this step 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) without saying which"
    run 0 list --json
    expect_in_json 'not d["allotment"]["known"] and "SLURM_STEP_GPUS are unset" in d["allotment"]["refusal"]'
    expect_in_json '"--gpu-bind" not in d["allotment"]["refusal"]'
    # A step given no GPU (srun -n2 without --gpus): explain, list and pick's report say so.
    launcher=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1)
    run 0 explain
    expect_line stdout "Slurm gave this step (12.0) no GPU; choosing as outside Slurm."
    run 0 list
    expect_line stdout "Slurm gave this step (12.0) no GPU; choosing as outside Slurm."
    run 0 pick
    expect stderr "gpusel: Slurm gave this step (12.0) no GPU; choosing as outside Slurm"
    run 0 pick --json
    expect_in_json 'd["allotment"]["scheduler"] == "Slurm" and d["allotment"]["gpus_on_node"] is None'
    expect stderr "gpusel: Slurm gave this step (12.0) no GPU; choosing as outside Slurm"
    launcher=()
    run 0 pick
    expect_not stderr "Slurm"
    # In a container: what NVIDIA_VISIBLE_DEVICES asked the container runtime for.
    launcher=(env NVIDIA_VISIBLE_DEVICES=GPU-948e02bd,3)
    run 0 explain
    expect stdout "NVIDIA_VISIBLE_DEVICES=GPU-948e02bd,3: in a container the NVIDIA container runtime mounted"
    run 0 list --json
    expect_in_json 'd["allotment"]["nvidia_visible_devices"] == "GPU-948e02bd,3" and d["allotment"]["scheduler"] is None'
    launcher=()
    run 0 explain
    expect_not stdout "Slurm"
    expect_not stdout "NVIDIA_VISIBLE_DEVICES"
    ;;
  engines)
    # Each engine named from its variables (Note [Naming the engine]), as torchrun 2.15, Ray 2.60 and Open MPI set
    # them (tests/engines checks them on the real engines): explain, list, pick and --json; nothing decided by them.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/h200x4.machine
    ray_said="RAY_JOB_ID=01000000, RAY_RAYLET_PID=4242"
    launcher=(env RAY_JOB_ID=01000000 RAY_RAYLET_PID=4242 CUDA_VISIBLE_DEVICES=2)
    run 0 explain
    expect_line stdout "Ray started this process as a task or actor ($ray_said) and gives it its GPUs by CUDA_VISIBLE_DEVICES; named from its variables, which decide nothing."
    run 0 list
    expect stdout "Ray started this process as a task or actor"
    run 0 pick
    expect stderr "gpusel: Ray started this process as a task or actor ($ray_said)"
    run 0 pick --json
    expect_in_json 'd["allotment"]["engine"]["name"] == "Ray" and d["allotment"]["engine"]["role"] == "a task or actor"'
    expect_in_json 'd["allotment"]["engine"]["gives_gpus"] and "RAY_RAYLET_PID=4242" in d["allotment"]["engine"]["said"]'
    launcher=(env RAY_JOB_ID=01000000 RAY_RAYLET_PID=4242 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=0,1)
    run 0 explain --json
    expect_in_json 'd["allotment"]["engine"]["name"] == "Ray Train" and d["allotment"]["engine"]["role"] == "a worker"'
    run 0 run --local-rank --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
    expect stdout "GPU-"
    launcher=(env TORCHELASTIC_RUN_ID=none LOCAL_RANK=3 LOCAL_WORLD_SIZE=4 RAY_JOB_ID=01000000)
    run 0 explain
    expect_line stdout "torchrun started this process as a rank (LOCAL_RANK=3, LOCAL_WORLD_SIZE=4, TORCHELASTIC_RUN_ID=none); torchrun gives no GPU: each rank takes the visible GPU of its number; named from its variables, which decide nothing."
    launcher=(env OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2)
    run 0 list --json
    expect_in_json 'd["allotment"]["engine"]["name"] == "Open MPI" and not d["allotment"]["engine"]["gives_gpus"]'
    # Slurm keeps its own line; outside every engine nothing is said, and the member is null.
    launcher=(env SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2 SLURM_STEP_GPUS=3 CUDA_VISIBLE_DEVICES=3)
    run 0 explain --json
    expect_in_json 'd["allotment"]["engine"]["name"] == "Slurm" and "started this process" not in d["allotment"]["text"]'
    launcher=()
    run 0 explain --json
    expect_in_json 'd["allotment"]["engine"] is None'
    run 0 pick
    expect_not stderr "started this process"
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
