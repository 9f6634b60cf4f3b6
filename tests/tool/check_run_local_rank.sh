#!/usr/bin/env bash
# ctest tool_<scenario> of `gpusel run --local-rank`: each rank of a launcher's job on its own GPU, leased.
# End to end on machines described to the fake NVML; helpers.sh holds what the scripts share.
#   check_run_local_rank.sh <gpusel program> <fake NVML library> <scenario> <job picks> <rank device program>
# Scenarios: run_local_rank, run_local_rank_library (<rank device program>, tests/tool/rank_device.cpp, takes
# the rank's GPU through gpusel::local_rank_device()), run_local_rank_round_robin, slurm_numbers (Slurm's
# numbers on a node of two models and with gres.conf out of PCI order) and salloc_shell (a job without a step).
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
    cuda_shows=4
    # More ranks than GPUs: sharing is asked for, each in its own API's words.
    side_by_side idle4.txt "local rank 5 has no GPU of its number" "gpusel run --local-rank --round-robin" \
      "Placement::round_robin" LOCAL_RANK=5 LOCAL_WORLD_SIZE=6
    # A task of srun -n2 --gpus-per-task=1 whose LOCAL_RANK repeats SLURM_LOCALID (set by hand): its own GPU.
    side_by_side idle4.txt "$(gpu 1)" "" "" SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=1 SLURM_GPUS_ON_NODE=2 \
      CUDA_VISIBLE_DEVICES=1 LOCAL_RANK=1
    ;;
  run_local_rank_round_robin)
    # --round-robin shares GPUs between more ranks than there are: rank 5 of 6 on 4 GPUs takes GPU 1.
    printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/idle4.txt"
    export GPUSEL_FAKE_NVML_CONFIG="$work/idle4.txt"
    LOCAL_RANK=5 LOCAL_WORLD_SIZE=6 run 125 run --local-rank -- true
    expect stderr "to share GPUs between ranks, ask for it: gpusel run --local-rank --round-robin"
    expect_not stderr "gpusel::"
    LOCAL_RANK=5 LOCAL_WORLD_SIZE=6 run 0 run --local-rank --round-robin --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
    [ "$out" = GPU-fa4e0000-0000-0000-0000-000000000001 ] || { echo "FAILED: rank 5 of 6 takes GPU 1"; failures=$((failures + 1)); }
    run 2 run --round-robin -- true
    expect stderr "--round-robin shares GPUs between a job's ranks, so it goes with --local-rank"
    ;;
  slurm_numbers)
    # A node of two models declared to Slurm by type (Note [Slurm's GPU numbers]): Slurm's 0 is
    # /dev/nvidia0, the first A100, which CUDA's default order would read as an H100.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/a100-h100.machine
    mkdir -p "$work/slurm"
    printf 'AutoDetect=off\nName=gpu Type=a100 File=/dev/nvidia[0-1]\nName=gpu Type=h100 File=/dev/nvidia[2-3]\n' \
      >"$work/slurm/gres.conf"
    a100=GPU-a1000000-0000-4000-8000-0000000000a0
    task=(SLURM_CONF="$work/slurm/slurm.conf" SLURM_JOB_ID=12 SLURM_STEP_ID=0 SLURM_LOCALID=0 SLURM_GPUS_ON_NODE=1
      SLURM_STEP_GPUS=0 GPU_DEVICE_ORDINAL=0 CUDA_VISIBLE_DEVICES=0)
    launcher=(env "${task[@]}")
    run 0 explain
    expect_line stdout "Slurm's 0 (/dev/nvidia0) is $a100 (NVIDIA A100-SXM4-80GB, 00000000:17:00.0)."
    expect stdout "Caution: Slurm wrote CUDA_VISIBLE_DEVICES=0 in its own numbers"
    expect stdout "export CUDA_DEVICE_ORDER=PCI_BUS_ID where the program starts"
    expect stdout "; as CUDA reads it, not Slurm: cuda:0 is GPU-b1000000"
    # The command gives its command Slurm's GPU, and says so; the library refuses, naming what to set.
    for options in "--local-rank" "-n 1"; do
      run 0 run $options --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
      [ "$out" = "$a100" ] || { echo "FAILED: run $options must give Slurm's GPU 0, the A100"; failures=$((failures + 1)); }
      expect stderr "gpusel: reading CUDA_VISIBLE_DEVICES=0 in Slurm's numbers"
    done
    run 0 pick --format uuid
    [ "$out" = "$a100" ] || { echo "FAILED: pick must choose Slurm's GPU 0, the A100"; failures=$((failures + 1)); }
    env "${task[@]}" "$rank_device" 4 >"$work/out" 2>"$work/err"
    grep -qF "gpusel::local_rank_device(): Slurm wrote CUDA_VISIBLE_DEVICES=0" "$work/err" ||
      { echo "FAILED: local_rank_device() must refuse: $(cat "$work/err")"; failures=$((failures + 1)); }
    grep -qF "CUDA_DEVICE_ORDER=PCI_BUS_ID" "$work/err" || { echo "FAILED: ... naming PCI_BUS_ID"; failures=$((failures + 1)); }
    [ ! -s "$work/out" ] || { echo "FAILED: local_rank_device() took a GPU"; failures=$((failures + 1)); }
    env "${task[@]}" "$job_picks" pick 1 >"$work/out" 2>"$work/err"
    grep -qF "gpusel::pick: Slurm wrote CUDA_VISIBLE_DEVICES=0" "$work/err" ||
      { echo "FAILED: gpusel::pick must refuse: $(cat "$work/err")"; failures=$((failures + 1)); }
    # With CUDA_DEVICE_ORDER=PCI_BUS_ID both read Slurm's GPU alike.
    launcher=(env "${task[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID)
    run 0 explain
    expect_line stdout "CUDA reads CUDA_VISIBLE_DEVICES as the same GPUs."
    [ "$(env "${task[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID "$rank_device" 4 2>&1)" = "$a100" ] ||
      { echo "FAILED: under PCI_BUS_ID local_rank_device() takes the A100"; failures=$((failures + 1)); }
    # File= lines out of PCI order, on a node of one model: Slurm's 0 is /dev/nvidia3 whatever the order.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/h200x4.machine
    printf 'Name=gpu File=/dev/nvidia3\nName=gpu File=/dev/nvidia[0-2]\n' >"$work/slurm/gres.conf"
    fourth=GPU-c06a5e21-9f3b-a4d8-61e7-0b5d3c2f8e94
    for order in FASTEST_FIRST PCI_BUS_ID; do
      launcher=(env "${task[@]}" CUDA_DEVICE_ORDER=$order)
      run 0 run --local-rank --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
      [ "$out" = "$fourth" ] || { echo "FAILED: Slurm's 0 is /dev/nvidia3 ($order)"; failures=$((failures + 1)); }
      run 0 explain
      expect stdout "name Slurm's GPUs by UUID (CUDA_VISIBLE_DEVICES=$fourth)"
    done
    # A CUDA_VISIBLE_DEVICES that is not Slurm's (gpusel run's, inside a step) is read as CUDA reads it.
    launcher=(env "${task[@]}" CUDA_VISIBLE_DEVICES=2 CUDA_DEVICE_ORDER=PCI_BUS_ID)
    run 0 run --local-rank --no-lease -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
    [ "$out" = GPU-4b1c0d3e-77a2-5c19-0e4d-2f8b9a6c1d07 ] || { echo "FAILED: gpusel run's value is CUDA's"; failures=$((failures + 1)); }
    expect_not stderr "Slurm's numbers"
    ;;
  salloc_shell)
    # salloc --gpus=2's own shell: in job 72, in no step, with no GPU named. Choosing among the
    # machine's GPUs might take another job's: refused, asking for srun; --whole-machine still chooses.
    export GPUSEL_FAKE_NVML_CONFIG=$(dirname "$0")/../../examples/machines/h200x4.machine
    launcher=(env SLURM_JOB_ID=72 SLURM_GPUS=2)
    for command in "run -- true" "run --local-rank -- true" "pick"; do
      run "$([ "$command" = pick ] && echo 1 || echo 125)" $command
      expect stderr "Slurm gave job 72 GPUs (SLURM_GPUS=2), but this process is in no step of it"
      expect stderr "run it under srun"
    done
    expect stderr "--whole-machine"
    run 0 explain
    expect stdout "Slurm gave job 72 GPUs (SLURM_GPUS=2), but this process is in no step of it"
    run 0 run --whole-machine --no-lease -n 1 -- true
    env SLURM_JOB_ID=72 SLURM_GPUS=2 "$rank_device" 4 >"$work/out" 2>"$work/err"
    grep -qF "gpusel::local_rank_device(): Slurm gave job 72 GPUs" "$work/err" ||
      { echo "FAILED: local_rank_device() must refuse: $(cat "$work/err")"; failures=$((failures + 1)); }
    # The batch script: Slurm names the job's GPUs there.
    launcher=(env SLURM_JOB_ID=72 SLURM_GPUS=2 SLURM_JOB_GPUS=2,3 CUDA_VISIBLE_DEVICES=2,3)
    run 0 run --no-lease -n 1 -- true
    ;;
  *)
    unknown_scenario
    ;;
esac
finish
