#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel run --local-rank`: each rank of a launcher's job on its own GPU, leased.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_run_local_rank.sh <gpusel program> <fake NVML library> <scenario> <job picks> <rank device program>
# Scenarios: run_local_rank, run_local_rank_library (<rank device program>, tests/tool/rank_device.cpp, takes
# the rank's GPU through gpusel::local_rank_device()).
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
  run_local_rank_library)
    # gpusel::local_rank_device() and `gpusel run --local-rank` decide alike (Note [A rank's own GPU]): under
    # torchrun, Open MPI and Slurm, on the same machines, the same GPU or the same refusal, each refusal with
    # what to do in its own API's words.
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    printf 'gpu\ngpu\ngpu\ngpu\nprocess gpu=1 pid=4000000001 used_mib=100000\n' >"$work/busy4.txt"
    printf 'gpu\ngpu\ngpu\ngpu\nprocess gpu=2 pid=%s used_mib=100\n' $$ >"$work/own4.txt"  # this script's own
    gpu() { echo "GPU-fa4e0000-0000-0000-0000-00000000000$1"; }
    # side_by_side <machine file> <the GPU's UUID, or the refusal's reason> <command's advice> <library's advice>
    #   <variables...>: both, under the variables, on the machine (whose GPUs CUDA shows: $cuda_shows).
    cuda_shows=4
    side_by_side() {
      local machine=$1 expected=$2 command_advice=$3 library_advice=$4
      shift 4
      local variables=(GPUSEL_FAKE_NVML_CONFIG="$work/$machine" "$@")
      local command_out command_err library_out library_err
      command_out=$(env "${variables[@]}" "$gpusel" run --local-rank --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES' \
        2>"$work/command_err")
      command_err=$(cat "$work/command_err")
      library_out=$(env "${variables[@]}" "$rank_device" "$cuda_shows" 2>"$work/library_err")
      library_err=$(cat "$work/library_err")
      echo "\$ ${variables[*]}"
      echo "  gpusel run --local-rank: [$command_out] $command_err"
      echo "  local_rank_device():     [$library_out] $library_err"
      if [ -z "$command_advice" ]; then  # a GPU: both give it
        { [ "$command_out" = "$expected" ] && [ "$library_out" = "$expected" ]; } ||
          { echo "FAILED: expected $expected from both"; failures=$((failures + 1)); }
        return
      fi
      { [ -z "$command_out" ] && [ -z "$library_out" ]; } || { echo "FAILED: expected both to refuse"; failures=$((failures + 1)); }
      for said in "$command_err" "$library_err"; do
        grep -qF -- "$expected" <<<"$said" || { echo "FAILED: expected the reason: $expected"; failures=$((failures + 1)); }
      done
      grep -qF -- "$command_advice" <<<"$command_err" || { echo "FAILED: the command's advice"; failures=$((failures + 1)); }
      grep -qF -- "$library_advice" <<<"$library_err" || { echo "FAILED: the library's advice"; failures=$((failures + 1)); }
      if grep -qF -- "gpusel::" <<<"$command_err"; then echo "FAILED: the command names the library's API"; failures=$((failures + 1)); fi
      if grep -qF -- "--" <<<"$library_err"; then echo "FAILED: the library names the command's options"; failures=$((failures + 1)); fi
    }
    torchrun=(LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 CUDA_VISIBLE_DEVICES=3,1)
    mpi=(OMPI_COMM_WORLD_LOCAL_RANK=2 OMPI_COMM_WORLD_LOCAL_SIZE=4)
    slurm=(SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2 CUDA_VISIBLE_DEVICES=0,1)
    side_by_side idle4.txt "$(gpu 1)" "" "" "${torchrun[@]}"
    side_by_side idle4.txt "$(gpu 2)" "" "" "${mpi[@]}"
    side_by_side idle4.txt "$(gpu 1)" "" "" "${slurm[@]}"
    busy="its GPU, cuda:1 of the job (physical 1, $(gpu 1)), is busy: another user's compute process runs on it (pid 4000000001, owner unknown"
    side_by_side busy4.txt "local rank 1 of 2 (torchrun: LOCAL_RANK=1, LOCAL_WORLD_SIZE=2): $busy" \
      "--share-own or --allow-other-users" "gpusel::RankSharing" "${torchrun[@]}"
    side_by_side busy4.txt "$busy" "--share-own or --allow-other-users" "gpusel::RankSharing" "${slurm[@]}"
    side_by_side busy4.txt "$(gpu 2)" "" "" "${mpi[@]}"
    side_by_side own4.txt "its GPU, cuda:2 of the job (physical 2, $(gpu 2)), is busy: this user's own compute process runs on it (pid $$" \
      "--share-own or --allow-other-users" "gpusel::RankSharing" "${mpi[@]}"
    cuda_shows=2  # GPU 0, and one instance of GPU 1 (NVML cannot count what CUDA shows of a GPU in MIG mode)
    mig="its GPU, cuda:1 of the job (physical 1, GPU-3d4e5f60-0000-4000-8000-000000000003), is in MIG mode, and gpusel never gives a GPU in MIG mode whole"
    side_by_side mig.txt "$mig" "leave out --local-rank" "gpusel::use_free_gpus" LOCAL_RANK=1
    side_by_side mig.txt "$mig" "leave out --local-rank" "gpusel::use_free_gpus" "${slurm[@]}"
    side_by_side mig.txt "GPU-0a1b2c3d-0000-4000-8000-000000000000" "" "" LOCAL_RANK=0
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
