#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel run --local-rank`: each rank of a launcher's job on its own GPU, leased.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_run_local_rank.sh <gpusel program> <fake NVML library> <scenario>
# Scenarios: run_local_rank.
. "$(dirname "$0")/helpers.sh"

case $scenario in
  run_local_rank)
    # Each rank of a job gets the i-th GPU the job sees, leased; a GPU another job holds is that rank's error.
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
    for rank in 0 1; do
      LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=3,1 run 0 run --local-rank -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
      [ "$out" = "GPU-fa4e0000-0000-0000-0000-00000000000$([ $rank = 0 ] && echo 3 || echo 1)" ] ||
        { echo "FAILED: rank $rank must get cuda:$rank of the job"; failures=$((failures + 1)); }
    done
    OMPI_COMM_WORLD_LOCAL_RANK=2 run 0 run --local-rank --format index -- sh -c 'echo $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER'
    [ "$out" = "2 PCI_BUS_ID" ] || { echo "FAILED: Open MPI's rank 2 gets physical 2"; failures=$((failures + 1)); }
    LOCAL_RANK=2 CUDA_VISIBLE_DEVICES=3,1 run 125 run --local-rank -- true
    expect stderr "local rank 2 has no GPU of its number"
    LOCAL_RANK=x run 125 run --local-rank -- true
    expect stderr "LOCAL_RANK=\"x\" is not a non-negative decimal integer"
    run 2 run --local-rank -n 2 -- true
    expect stderr "--local-rank takes the rank's own GPU, so -n cannot apply"
    # no launcher variable: local rank 0 of 1, said on stderr
    run 0 run --local-rank -- true
    expect stderr "gpusel: no launcher variable is set (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), so this process runs as local rank 0 of 1"
    LOCAL_RANK=0 run 0 run --local-rank -- true
    if grep -qF "no launcher variable" <<<"$err"; then echo "FAILED: LOCAL_RANK is set"; failures=$((failures + 1)); fi
    # another user's job keeps the rank's GPU 97% busy: the rank's error, with the reason
    printf 'gpu\ngpu utilization=97 used_mib=100000\ngpu\ngpu\nprocess gpu=1 pid=4000000001 used_mib=100000\n' >"$work/busy4.txt"
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=1 run 125 run --local-rank -- touch "$work/started"
    expect stderr "local rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, GPU-fa4e0000-0000-0000-0000-000000000001), is busy: another user's compute process runs on it (pid 4000000001, owner unknown"
    [ ! -e "$work/started" ] || { echo "FAILED: the rank ran on a busy GPU"; failures=$((failures + 1)); }
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=1 run 0 run --local-rank --allow-other-users -- true
    GPUSEL_FAKE_NVML_CONFIG="$work/busy4.txt" LOCAL_RANK=0 run 0 run --local-rank -- true
    # another job holds physical 1: rank 1 fails, and does not take another GPU
    "$gpusel" run --exclude 0,2,3 -- sleep 30 &
    holder=$!
    for _ in $(seq 50); do "$gpusel" pick --exclude 0,2,3 >/dev/null 2>&1 || break; sleep 0.1; done
    LOCAL_RANK=1 run 125 run --local-rank -- touch "$work/started"
    expect stderr "its GPU, cuda:1 of the job (physical 1, GPU-fa4e0000-0000-0000-0000-000000000001), is leased by another job (pid $holder"
    [ ! -e "$work/started" ] || { echo "FAILED: the rank ran on another GPU"; failures=$((failures + 1)); }
    LOCAL_RANK=1 run 0 run --local-rank --no-lease -- true
    kill $holder
    wait $holder 2>/dev/null
    # a rank whose GPU is in MIG mode is not given the GPU whole (CUDA would show its instances), leased or not
    export GPUSEL_FAKE_NVML_CONFIG="$work/mig.txt"
    for lease in "" --no-lease; do
      LOCAL_RANK=1 run 125 run --local-rank $lease -- touch "$work/mig_started"
      expect stderr "local rank 1 (torchrun: LOCAL_RANK=1): its GPU, cuda:1 of the job (physical 1, GPU-3d4e5f60-0000-4000-8000-000000000003), is in MIG mode"
      [ ! -e "$work/mig_started" ] || { echo "FAILED: the rank ran on a GPU in MIG mode"; failures=$((failures + 1)); }
    done
    LOCAL_RANK=0 run 0 run --local-rank -- true
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
