#!/usr/bin/env bash
# pip_install_command_and_headers: gpusel as a Python user gets it, from a clone, with pip.
#   check_pip.sh SOURCE_DIR FAKE_NVML WHEELHOUSE WORK_DIR PYTHON
# In a fresh venv: `pip wheel` and `pip install` of the clone (no CUDA Toolkit looked for; the build backend,
# scikit-build-core, comes from WHEELHOUSE and nothing else is fetched: pip runs with --no-index), then
#  - the wheel: py3-none-<platform>, the command in the scripts, the headers and the CMake package, no library,
#    no test; the command links no CUDA runtime;
#  - `gpusel list` on the fake machine, and without NVML the documented message and exit status 3;
#  - python -m gpusel --includes / --cmakedir against get_include() / get_cmake_dir();
#  - a CPython extension built by setuptools with include_dirs=[gpusel.get_include()], on the fake machine and on
#    its no-GPU path;
#  - a CMake consumer (tests/consumer/project) found through get_cmake_dir(), built and run on the no-GPU path.
# Skips (77) when WHEELHOUSE holds no scikit-build-core wheel: .ci/run fills it from PyPI
# (`pip download -d WHEELHOUSE scikit-build-core setuptools`) and fails on the skip.
set -euo pipefail
source_dir=$1 fake_nvml=$2 wheelhouse=$3 work=$4 python=$5

if ! compgen -G "$wheelhouse/scikit_build_core-*.whl" >/dev/null; then
  echo "SKIP: no scikit-build-core wheel in $wheelhouse (fill it: pip download -d $wheelhouse scikit-build-core setuptools)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$python" -m venv "$work/venv"
venv=$work/venv
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$wheelhouse PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
# The CMake build directory is kept between the two builds, so that `pip install` reuses what `pip wheel` compiled.
build_dir="--config-settings=build-dir=$work/cmake-build"

# 1. The wheel, and what it holds.
"$venv/bin/pip" wheel -q --no-deps -w "$work/dist" "$build_dir" "$source_dir"
version=$(sed -n 's/^#define GPUSEL_VERSION_STRING "\(.*\)"$/\1/p' "$source_dir/include/gpusel/version.hpp")
wheel=$(echo "$work"/dist/gpusel-*.whl)
[[ $(basename "$wheel") =~ ^gpusel-$version-py3-none-linux_[a-z0-9_]+\.whl$ ]] ||
  fail "the wheel is $(basename "$wheel"), not gpusel-$version-py3-none-linux_<arch>.whl"
"$venv/bin/python" -m zipfile -l "$wheel" | awk 'NR > 1 {print $1}' >"$work/wheel-files.txt"
for expected in gpusel/__init__.py gpusel/__main__.py gpusel/include/gpusel/gpusel.hpp \
  gpusel/include/gpusel/machine/inventory.hpp gpusel/share/gpusel/gpuselConfig.cmake \
  gpusel/share/gpusel/gpuselTargets.cmake "gpusel-$version.data/scripts/gpusel"; do
  grep -qx "$expected" "$work/wheel-files.txt" || fail "the wheel lacks $expected"
done
! grep -E '\.(so|a)(\.[0-9]+)*$|(^|/)tests?/' "$work/wheel-files.txt" || fail "the wheel holds a library or a test"
grep -q 'GPUSEL_BUILD_TESTS:BOOL=OFF' "$work/cmake-build/CMakeCache.txt" || fail "the wheel build configured tests"
[ ! -d "$work/cmake-build/_deps" ] || fail "the wheel build fetched something (FetchContent: $work/cmake-build/_deps)"
! grep -q '^CUDAToolkit_' "$work/cmake-build/CMakeCache.txt" || fail "the wheel build looked for the CUDA Toolkit"

# 2. pip install <the clone>, into the fresh venv: the command on the venv's PATH.
"$venv/bin/pip" install -q "$build_dir" "$source_dir"
export PATH="$venv/bin:$PATH"
[ "$(command -v gpusel)" = "$venv/bin/gpusel" ] || fail "gpusel is $(command -v gpusel), not the venv's"
! readelf -d "$venv/bin/gpusel" | grep -i 'NEEDED.*cuda' || fail "the command links a CUDA library"

# 3. gpusel list on the fake machine, and without NVML.
mkdir -p "$work/leases"
GPUSEL_NVML_LIBRARY=$fake_nvml GPUSEL_FAKE_NVML_CONFIG=$source_dir/examples/machines/h200x8.machine \
  GPUSEL_LEASE_DIR=$work/leases gpusel list >"$work/list.txt"
grep -q '^cuda:7 .*NVIDIA H200' "$work/list.txt" || { cat "$work/list.txt"; fail "gpusel list did not list cuda:7"; }
no_nvml=(env -u GPUSEL_NVML_LIBRARY -u GPUSEL_FAKE_NVML_CONFIG)
if ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 '; then  # a driver here: name an NVML that is not
  no_nvml+=(GPUSEL_NVML_LIBRARY="$work/no-driver/libnvidia-ml.so.1")
fi
status=0
"${no_nvml[@]}" gpusel list >"$work/no-nvml.out" 2>"$work/no-nvml.err" || status=$?
[ "$status" = 3 ] || fail "without NVML gpusel list exited $status, not 3 (docs/command.md)"
grep -q '^gpusel: no NVIDIA driver to ask, so no GPU can be seen' "$work/no-nvml.err" ||
  { cat "$work/no-nvml.err"; fail "without NVML gpusel list did not say so"; }

# 4. The paths, spelled as pybind11 spells them.
include=$("$venv/bin/python" -c 'import gpusel; print(gpusel.get_include())')
cmake_dir=$("$venv/bin/python" -c 'import gpusel; print(gpusel.get_cmake_dir())')
[[ $include == "$venv"/lib/python3*/site-packages/gpusel/include ]] || fail "get_include() is $include"
[ -f "$include/gpusel/gpusel.hpp" ] && [ -f "$cmake_dir/gpuselConfig.cmake" ] || fail "no headers or CMake package"
[ "$("$venv/bin/python" -m gpusel --includes)" = "-I$include" ] || fail "python -m gpusel --includes"
[ "$("$venv/bin/python" -m gpusel --cmakedir)" = "$cmake_dir" ] || fail "python -m gpusel --cmakedir"

# 5. A CPython extension: setuptools with include_dirs=[gpusel.get_include()] (setuptools from the wheelhouse
# where the venv has none: Python 3.12 and newer).
"$venv/bin/python" -c 'import setuptools' 2>/dev/null || "$venv/bin/pip" install -q setuptools
cp -r "$source_dir/tests/pip/extension" "$work/extension"
(cd "$work/extension" && "$venv/bin/python" setup.py -q build_ext --inplace) >"$work/extension.log" 2>&1 ||
  { cat "$work/extension.log"; fail "the extension did not build"; }
probe='import gpusel_probe; count, why = gpusel_probe.gpus(); print(count, why, gpusel_probe.version())'
(cd "$work/extension" && GPUSEL_NVML_LIBRARY=$fake_nvml \
  GPUSEL_FAKE_NVML_CONFIG=$source_dir/examples/machines/h200x8.machine "$venv/bin/python" -c "$probe") \
  >"$work/probe.txt"
grep -q "^8 580\.[0-9.]* $version\$" "$work/probe.txt" || { cat "$work/probe.txt"; fail "the extension saw no 8 GPUs"; }
(cd "$work/extension" && "${no_nvml[@]}" "$venv/bin/python" -c "$probe") >"$work/probe-no-nvml.txt"
grep -q '^-1 .*no NVIDIA driver' "$work/probe-no-nvml.txt" ||
  { cat "$work/probe-no-nvml.txt"; fail "the extension's no-GPU path"; }

# 6. A CMake consumer through get_cmake_dir(): the installed headers, the consumer's own CUDA runtime.
cmake -S "$source_dir/tests/consumer/project" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -Dgpusel_DIR="$cmake_dir" -DGPUSEL_CONSUMER_COMPILED=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/consumer.log"
cmake --build "$work/consumer" >>"$work/consumer.log" || { cat "$work/consumer.log"; fail "the CMake consumer"; }
grep -q -- "-isystem $include\|-I$include" "$work/consumer/compile_commands.json" ||
  fail "the consumer did not compile with the wheel's headers ($include)"
"$work/consumer/consumer" | tee "$work/consumer.txt"
grep -Eq "^gpusel $version consumer \(header-only\) runs on (cpu|cuda:[0-9]+)\$" "$work/consumer.txt" ||
  fail "the consumer did not run"
echo "pip: wheel $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB), gpusel list, extension and CMake consumer pass"
