#!/usr/bin/env python3
"""The layer test: every include in include/gpusel is one docs/layers.md allows.

    tests/hardening/layers.py [--root DIR]

Reads the two tables of docs/layers.md (which layer may include which, and the
layer of every header) and every `#include` of every header under
include/gpusel. Fails, naming each one, for
  - a header that is not in the table, or a table row whose header is gone;
  - an include of a gpusel header from a layer the including layer may not use;
  - a CUDA header (<cuda*.h>, <cuda_runtime*.h>, <cuda/...>) included by a
    header of a layer without CUDA, or by a header marked CUDA-free;
  - <nvml.h> anywhere (NVML is declared by hand and loaded with dlopen).
Includes are followed as written, not transitively: each edge is checked
where it is made, so a failure names the line to change.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
CUDA_HEADER_RE = re.compile(r"^(cuda[^/]*\.h|cuda/.*|nv[^/]*\.h|cub/.*|thrust/.*)$")
NVML_HEADER = "nvml.h"  # gpusel declares what it needs of NVML (detail/machine/nvml.hpp); the header has no place here


def table_rows(text, first_column):
    """The rows of the markdown table whose header row starts with `first_column`."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            inside = False
            continue
        if cells[0] == first_column:
            inside = True
            continue
        if inside and not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def read_layers(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    allowed, cuda_ok = {}, {}
    for layer, may_include, cuda in table_rows(text, "layer"):
        allowed[layer] = {name.strip() for name in may_include.split(",")}
        if "every layer" in allowed[layer]:
            allowed[layer] = None  # the top layer may include anything
        cuda_ok[layer] = cuda == "yes"
    headers = {}
    for header, layer, cuda_free in table_rows(text, "header"):
        headers[header.strip("`")] = (layer, cuda_free == "yes")
    return allowed, cuda_ok, headers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=ROOT)
    args = parser.parse_args()
    include_dir = os.path.join(args.root, "include")
    allowed, cuda_ok, headers = read_layers(os.path.join(args.root, "docs", "layers.md"))
    problems = []
    for layer in {layer for layer, _ in headers.values()}:
        if layer not in allowed:
            problems.append(f"docs/layers.md: layer {layer!r} is not in the table of layers")

    on_disk = []
    for directory, _, files in os.walk(os.path.join(include_dir, "gpusel")):
        on_disk += [os.path.relpath(os.path.join(directory, f), include_dir) for f in files if f.endswith(".hpp")]
    for header in sorted(set(headers) - set(on_disk)):
        problems.append(f"docs/layers.md: {header} is in the table but not in include/")

    for header in sorted(on_disk):
        if header not in headers:
            problems.append(f"include/{header}: not in docs/layers.md; give it a layer there")
            continue
        layer, cuda_free = headers[header]
        with open(os.path.join(include_dir, header), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE_RE.match(line)
                if not match:
                    continue
                included = match.group(2)
                where = f"include/{header}:{number}: {layer} header includes"
                if included.startswith("gpusel/"):
                    target = headers.get(included)
                    if target is None:
                        problems.append(f"{where} {included}, which is not in docs/layers.md")
                    elif allowed.get(layer) is not None and target[0] not in allowed[layer]:
                        problems.append(f"{where} {included} ({target[0]} layer), which {layer} may not use")
                elif included == NVML_HEADER:
                    problems.append(f"{where} <{included}>: NVML is loaded with dlopen, through detail/machine/nvml.hpp")
                elif CUDA_HEADER_RE.match(included):
                    if not cuda_ok.get(layer, False):
                        problems.append(f"{where} <{included}>, but the {layer} layer has no CUDA")
                    elif cuda_free:
                        problems.append(f"{where} <{included}>, but docs/layers.md marks it CUDA-free")
    for problem in problems:
        print(problem)
    print(f"{len(on_disk)} headers checked against docs/layers.md: "
          f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
