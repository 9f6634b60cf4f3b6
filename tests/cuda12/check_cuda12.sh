#!/usr/bin/env bash
# cuda12_runtime_wheels: gpusel built against CUDA 12, from PyPI's runtime wheels (wheels.txt), through CMake with
# CUDAToolkit_ROOT at a folder staged from them (stage_cuda.py); no nvcc 12 is needed, and PyPI has none that
# compiles (nvidia-cuda-nvcc-cu12 holds headers and a few tools, no cicc, no cudafe++).
#   check_cuda12.sh SOURCE_DIR WHEELHOUSE WORK_DIR
#  - 12.0, the oldest supported: the emulated suite's library and tests in one build, without sanitizers, and its
#    tests (ctest -L 'pure|emulated'); the README's first example, linked to libcudart.so.12 and run;
#  - 12.8, where the code branches last: every public header alone, header-only and compile-once;
#  - every build: CUDART_VERSION is the staged one, and no header comes from another CUDA (/usr/local/include may
#    hold the links of the installed CUDA's headers, which would fill in what a staged folder lacks).
# Skips (77) while WHEELHOUSE lacks one of the wheels; .ci/run downloads them and fails on the skip.
set -euo pipefail
source_dir=$1 wheelhouse=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }

wheel_of() {  # wheel_of nvidia-cuda-runtime-cu12==12.0.107 -> its file in the wheelhouse
  local name=${1%%==*} version=${1##*==}
  compgen -G "$wheelhouse/${name//-/_}-$version-*.whl" | head -1
}
mapfile -t wanted < <(grep -v '^#' "$here/wheels.txt")
for requirement in "${wanted[@]}"; do
  [ -n "$(wheel_of "$requirement")" ] || {
    echo "SKIP: $requirement is not in $wheelhouse (pip download --no-deps -d $wheelhouse '$requirement')"
    exit 77
  }
done
mkdir -p "$work"
for version in 12.0 12.8; do
  runtime=$(printf '%s\n' "${wanted[@]}" | grep "runtime-cu12==$version\.")
  nvcc=$(printf '%s\n' "${wanted[@]}" | grep "nvcc-cu12==$version\.")
  python3 "$here/stage_cuda.py" "$(wheel_of "$runtime")" "$(wheel_of "$nvcc")" "$work/rt-$version"
done
# No other CUDA on the way: no nvcc on PATH, no library path of the installed one.
PATH=$(tr ':' '\n' <<<"$PATH" | grep -v cuda | paste -sd:)
unset LIBRARY_PATH LD_LIBRARY_PATH CPATH CPLUS_INCLUDE_PATH CUDA_PATH CUDAToolkit_ROOT

# runtime_version ROOT -> CUDART_VERSION as its headers define it.
runtime_version() {
  printf '#include <cuda_runtime_api.h>\nint version = CUDART_VERSION;\n' | c++ -x c++ -E -P -I "$1/include" - |
    sed -n 's/^int version = \([0-9]*\);$/\1/p'
}
# no_other_cuda BUILD: every header the build compiled came from the staged CUDA, not another one.
no_other_cuda() {
  local leaked
  leaked=$(ninja -C "$1" -t deps | grep -E '^ +/usr/local/(include|cuda)' | sort -u || true)
  [ -z "$leaked" ] || fail "$1 compiled headers of another CUDA:"$'\n'"$leaked"
}
configure() {  # configure BUILD ROOT: the test configuration, against the staged CUDA
  cmake -S "$source_dir" -B "$1" -G Ninja -DCUDAToolkit_ROOT="$2" -DGPUSEL_BUILD_EXAMPLES=OFF \
    -DGPUSEL_BUILD_BENCHMARKS=OFF >"$1.configure.log" 2>&1 || { cat "$1.configure.log"; fail "configure $1"; }
  grep -qx "CUDA_CUDART:FILEPATH=$2/lib64/libcudart.so" "$1/CMakeCache.txt" || fail "$1 found another libcudart"
}

# 12.0: the emulated suite, built and run.
[ "$(runtime_version "$work/rt-12.0")" = 12000 ] || fail "the staged 12.0 is CUDART_VERSION $(runtime_version "$work/rt-12.0")"
configure "$work/build-12.0" "$work/rt-12.0"
cmake --build "$work/build-12.0" --target gpusel_emulated_suite >"$work/build-12.0.log" 2>&1 ||
  { tail -50 "$work/build-12.0.log"; fail "the emulated suite does not build against CUDA 12.0"; }
no_other_cuda "$work/build-12.0"
ctest --test-dir "$work/build-12.0" -L 'pure|emulated' -j "$(nproc)" --output-on-failure >"$work/ctest-12.0.log" ||
  { grep -v '^ *[0-9]*/[0-9]* Test' "$work/ctest-12.0.log" | tail -80; fail "the emulated suite fails against 12.0"; }
tail -3 "$work/ctest-12.0.log"

# 12.0: the README's first example, its compile line as written, linked to libcudart.so.12 and run.
python3 "$source_dir/tests/docs/check_first_example.py" "$source_dir/README.md" c++ "$work/rt-12.0/include" \
  "$work/rt-12.0/lib64" >"$work/first-example.log" || { cat "$work/first-example.log"; fail "the README's example"; }
grep -q '^0 GPU(s); running on cpu\|^[0-9]* GPU(s); running on cuda:' "$work/first-example.log" ||
  fail "the README's example did not run"
awk '/^```cpp$/ {inside = 1; next} inside && /^```$/ {exit} inside' "$source_dir/README.md" >"$work/app.cpp"
c++ -std=c++17 "$work/app.cpp" -I"$source_dir/include" -I"$work/rt-12.0/include" -L"$work/rt-12.0/lib64" -lcudart \
  -MD -MF "$work/app.d" -o "$work/app"
readelf -d "$work/app" | grep -q 'NEEDED.*\[libcudart\.so\.12\]' || fail "the example does not link libcudart.so.12"
! grep -E '/usr/local/(include|cuda)' "$work/app.d" || fail "the example compiled headers of another CUDA"

# 12.8: every public header alone, in both modes (tests/hardening's header units).
[ "$(runtime_version "$work/rt-12.8")" = 12080 ] || fail "the staged 12.8 is CUDART_VERSION $(runtime_version "$work/rt-12.8")"
configure "$work/build-12.8" "$work/rt-12.8"
cmake --build "$work/build-12.8" --target gpusel_header_units gpusel_header_units_compile_once \
  >"$work/build-12.8.log" 2>&1 || { tail -50 "$work/build-12.8.log"; fail "a header does not compile against 12.8"; }
no_other_cuda "$work/build-12.8"
echo "cuda12: 12.0 emulated suite and README example, 12.8 headers in both modes: pass"
