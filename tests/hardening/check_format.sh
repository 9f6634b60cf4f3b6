#!/usr/bin/env bash
# Formatting: every tracked C++ file is as the checked-in .clang-format says, read by
# clang-format 14 (Debian bookworm's; later versions format a few constructs otherwise).
# Vendored files are left as their authors wrote them: the DLPack header written from the
# specification (tests/dlpack/spec_dlpack.h). Run from anywhere; exits non-zero naming the files.
set -euo pipefail
cd "$(dirname "$0")/../.."
clang_format=${CLANG_FORMAT:-clang-format}
version=$("$clang_format" --version)
[[ $version == *"version 14."* ]] || { echo "check_format.sh wants clang-format 14; $clang_format is: $version"; exit 1; }
vendored=(tests/dlpack/spec_dlpack.h)
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.cu' '*.h' | grep -vxF -f <(printf '%s\n' "${vendored[@]}"))
if ! "$clang_format" --dry-run -Werror "${files[@]}"; then
  echo "Not formatted as .clang-format says (above): run clang-format -i on them (clang-format 14)"
  exit 1
fi
echo "${#files[@]} C++ files formatted as .clang-format says (clang-format 14; vendored: ${vendored[*]})"
