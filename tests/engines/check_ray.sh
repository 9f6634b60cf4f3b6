#!/usr/bin/env bash
# ctest engines_ray: gpusel inside a real Ray's tasks, actors and Ray Train workers (ray_judge.py says what
# it checks), on the fake NVML's 4-GPU machine.
#   check_ray.sh <python with ray> <gpusel> <fake NVML library> <rank device program> <RAY_TMPDIR>
# Ray Train runs where the Python also imports ray.train.torch (ray[train] and torch); GPUSEL_REQUIRE_RAY_TRAIN=1
# makes its absence a failure. Exits 77 (ctest SKIP_RETURN_CODE) with the reason where the Python lacks Ray.
set -uo pipefail
python=$1 gpusel=$2 fake_nvml=$3 rank_device=$4 ray_tmpdir=$5
if ! "$python" -c "import ray" 2>/dev/null; then
  echo "SKIPPED: $python cannot import ray (pip install ray==2.60.0; .ci/run puts it in build/venv-torch" \
    "and sets GPUSEL_ENGINES_PYTHON)"
  exit 77
fi
train=()
if "$python" -c "import ray.train.torch" 2>/dev/null; then
  train=(train)
elif [ "${GPUSEL_REQUIRE_RAY_TRAIN:-0}" = 1 ]; then
  echo "FAILED: $python cannot import ray.train.torch (ray[train] and torch), and GPUSEL_REQUIRE_RAY_TRAIN=1"
  exit 1
else
  echo "(Ray Train left out: $python cannot import ray.train.torch)"
fi
# Ray's sockets (RAY_TMPDIR/session_<date>_<time>_<pid>/sockets/plasma_store) must fit AF_UNIX's 107 bytes, which
# a deep build folder does not leave room for: then a short folder in /tmp of this test's own.
[ ${#ray_tmpdir} -le 40 ] || ray_tmpdir=$(mktemp -d /tmp/gpusel-ray.XXXXXX)
work=$(mktemp -d)
trap 'rm -rf "$work" "$ray_tmpdir"' EXIT
mkdir -p "$ray_tmpdir"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER LOCAL_RANK LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID RAY_JOB_ID RAY_RAYLET_PID \
  RAY_ADDRESS SLURM_JOB_ID SLURM_LOCALID OMPI_COMM_WORLD_LOCAL_RANK GPUSEL_JOB_LEASE
export GPUSEL_NVML_LIBRARY=$fake_nvml GPUSEL_LEASE_DIR=$work/leases RAY_TMPDIR=$ray_tmpdir
printf 'gpu\ngpu\ngpu\ngpu\n' >"$work/four.txt"
export GPUSEL_FAKE_NVML_CONFIG=$work/four.txt
"$python" "$(dirname "$0")/ray_judge.py" "$gpusel" "$rank_device" "$work" "${train[@]}"
