#!/usr/bin/env bash
# clang-tidy over gpusel's headers, with the checked-in .clang-tidy; zero warnings allowed.
#
#   tests/hardening/clang_tidy.sh [build directory, default build/tidy]
#
# Configures (only) a clang build that exports compile_commands.json, then
# checks the generated unit that includes every public header
# (tests/hardening/CMakeLists.txt), so every header in include/gpusel/ is read
# with the flags a real build uses. Warnings outside include/gpusel/ (CUDA,
# the standard library) are not ours and are not shown.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/tidy}
tidy=${CLANG_TIDY:-clang-tidy}

cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DGPUSEL_BUILD_BENCHMARKS=OFF -DGPUSEL_BUILD_EXAMPLES=OFF -DGPUSEL_WARNINGS_AS_ERRORS=ON >/dev/null
unit="$build/tests/hardening/header_units/all_headers.cpp"
[[ -f $unit ]] || { echo "clang_tidy.sh: $unit was not generated" >&2; exit 1; }
echo "$("$tidy" --version | grep -i version | head -1); $(grep -c '#include' "$unit") public headers"
# "N warnings generated" counts the warnings in headers that are not ours, which are not shown: left out.
status=0
output=$("$tidy" --quiet --config-file=.clang-tidy -p "$build" "$unit" 2>&1) || status=$?
grep -v -E '^[0-9]+ warnings? generated\.$' <<< "$output" || true
if ((status != 0)); then
  echo "clang-tidy: warnings in include/gpusel/ (see above); fix them or, where a check is wrong, NOLINT with the reason"
  exit "$status"
fi
echo "clang-tidy: no warnings in include/gpusel/"
