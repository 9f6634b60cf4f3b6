#!/usr/bin/env python3
"""The layer test: every include in include/gpusel follows docs/layers.md's rule.

    tests/hardening/layers.py [--root DIR] [--list]

A header's layer is read from its path where a folder names it: a component's
folder, gpusel/<component>/ with its detail rooms gpusel/<component>/detail/<room>/
(COMPONENTS), or the first folder under gpusel/detail/ (gpusel/detail/<layer>/,
or a room of it, gpusel/detail/<layer>/<room>/); a header in gpusel/ itself says
its layer in a `// Layer: <layer>` line. Fails, naming the line to change, for
  - a header with no layer, or with a layer that does not exist;
  - a detail header outside the rooms its layer has (ROOMS), or one that
    includes a header of a room above its own: a layer's rooms are ordered
    like the layers, and a room includes only itself and rooms below it;
  - an include of a header from a layer the including layer may not use;
  - an arrow back up: a detail header that includes a public header which
    itself leads, directly or not, back into that layer's detail folder (detail/ lies
    beneath what it serves; a public header that leads nowhere into it, such
    as copy_engine_options.hpp for the engine, is a leaf it may read). The
    rule is about declarations: definitions (-inl.hpp files) come after every
    declaration they define, so an -inl.hpp may include any header of its
    layer, and an include of an -inl.hpp leads nowhere;
  - a CUDA header (<cuda*.h>, <cuda/...>, ...) included by a core or machine
    header, or by one that says "This header includes no CUDA header";
  - a `// Layer:` line in a component's folder that names another layer;
  - <nvml.h> anywhere (NVML is declared by hand and loaded with dlopen);
  - a folder of gpusel/detail/ holding more than MAX_FILES_PER_FOLDER files
    (-inl.hpp files counted): a folder that grows past it is split into rooms;
  - definitions out of place (Note [Compile-once mode]): an -inl.hpp that
    includes another -inl.hpp (a helper two definitions files share is
    declared in a header), an -inl.hpp included by anything but its own
    header and the implementation lists, and an -inl.hpp listed in no
    implementation list, in both, or in the one of other layers;
  - an include in the command (tools/) of anything but a public core or
    machine header.
Includes are checked where they are made, not transitively. --list prints each
header with its layer and whether it is CUDA-free.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The components with a folder of their own, gpusel/<component>/, and the layer
# of every header in it; its detail headers are in gpusel/<component>/detail/.
COMPONENTS = {"machine": "machine"}
# What each layer may include; the order is bottom to top.
MAY_INCLUDE = {
    "core": {"core"},
    "machine": {"core", "machine"},
    "cuda": {"core", "cuda"},
    "data": {"core", "cuda", "data"},
    "top": {"core", "machine", "cuda", "data", "top"},
}
CUDA_FREE_LAYERS = {"core", "machine"}
# What the gpusel command (tools/) may include: public headers of the CUDA-free layers.
COMMAND_MAY_INCLUDE = ["core", "machine"]
# The most files one folder of gpusel/detail/ holds, -inl.hpp files counted.
MAX_FILES_PER_FOLDER = 12
# The implementation lists (Note [Compile-once mode]): each holds the definitions
# files of its layers.
IMPLEMENTATION_LISTS = {
    "gpusel/machine/implementation.hpp": {"core", "machine"},
    "gpusel/runtime_implementation.hpp": {"cuda", "data", "top"},
}
# The rooms of a layer's detail folder (gpusel/detail/<layer>/<room>/, or
# gpusel/<component>/detail/<room>/), bottom to top; a layer not named here keeps
# its detail headers in its folder itself.
ROOMS = {
    "machine": ["system", "leases", "picking"],
    "data": ["memory", "engine", "buffer"],
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LAYER_LINE_RE = re.compile(r"^// Layer: ([a-z]+)\b")
DETAIL_RE = re.compile(r"^gpusel/detail/([a-z]+)/(?:([a-z_]+)/)?[^/]+\.hpp$")
COMPONENT_DETAIL_RE = re.compile(r"^gpusel/([a-z]+)/detail/(?:([a-z_]+)/)?[^/]+\.hpp$")
COMPONENT_RE = re.compile(r"^gpusel/([a-z]+)/[^/]+\.hpp$")
CUDA_FREE_PROMISE_RE = re.compile(r"^//.*[Ii]ncludes? no CUDA header")
CUDA_HEADER_RE = re.compile(r"^(cuda[^/]*\.h|cuda/.*|nv[^/]*\.h|cub/.*|thrust/.*)$")


class Header:
    def __init__(self, include_dir, name):
        self.name = name
        with open(os.path.join(include_dir, name), encoding="utf-8") as f:
            self.lines = f.read().splitlines()
        detail = DETAIL_RE.match(name)
        component_detail = COMPONENT_DETAIL_RE.match(name)
        component = COMPONENT_RE.match(name)
        self.is_detail = detail is not None or component_detail is not None or "/detail/" in name
        self.is_definitions = name.endswith("-inl.hpp")
        self.room = None
        self.marks = [m.group(1) for m in map(LAYER_LINE_RE.match, self.lines) if m]
        if detail:
            self.layer, self.room = detail.group(1), detail.group(2)
        elif component_detail and component_detail.group(1) in COMPONENTS:
            self.layer, self.room = COMPONENTS[component_detail.group(1)], component_detail.group(2)
        elif component and component.group(1) in COMPONENTS:
            self.layer = COMPONENTS[component.group(1)]
        else:
            self.layer = self.marks[0] if len(self.marks) == 1 else None
        promise = any(CUDA_FREE_PROMISE_RE.match(line) for line in self.lines)
        self.cuda_free = promise or self.layer in CUDA_FREE_LAYERS

    def where(self, number):
        return f"include/{self.name}:{number}: {self.layer} header"


def read_headers(include_dir):
    names = []
    for directory, _, files in os.walk(os.path.join(include_dir, "gpusel")):
        names += [os.path.relpath(os.path.join(directory, f), include_dir) for f in files if f.endswith(".hpp")]
    return {name: Header(include_dir, name) for name in sorted(names)}


def folder_of(header):
    """A detail header's layer folder, gpusel/<component>/detail or gpusel/detail/<layer> (rooms are inside)."""
    component = next((c for c, layer in COMPONENTS.items() if layer == header.layer), None)
    return f"gpusel/{component}/detail" if component else f"gpusel/detail/{header.layer}"


def includes_of(header):
    return [m.group(2) for m in map(INCLUDE_RE.match, header.lines) if m and m.group(2).startswith("gpusel/")]


def reach(start, headers):
    """The layer folders of every detail header that `start` includes, directly or not, through declarations."""
    seen, todo = set(), [start.name]
    while todo:
        for name in includes_of(headers[todo.pop()]):
            if name in headers and name not in seen and not headers[name].is_definitions:
                seen.add(name)
                todo.append(name)
    return {folder_of(headers[name]) for name in seen if headers[name].is_detail}


def room_problem(header):
    """Why a detail header is outside the rooms of its layer, or None."""
    rooms = ROOMS.get(header.layer)
    if rooms is None and header.room is not None:
        return f"include/{header.name}: the {header.layer} layer has no rooms; it goes in {folder_of(header)}/"
    if rooms is not None and header.room not in rooms:
        return (f"include/{header.name}: the {header.layer} layer's detail headers live in its rooms, "
                f"{folder_of(header)}/<room>/, one of {', '.join(rooms)} (ROOMS in this test)")
    if not header.name.startswith(folder_of(header) + "/"):
        return f"include/{header.name}: the {header.layer} layer's detail headers live in {folder_of(header)}/"
    return None


def includes_a_room_above(header, target):
    """Whether `header` includes `target` from a room above its own, in the same layer."""
    rooms = ROOMS.get(header.layer)
    if not (header.is_detail and target.is_detail and rooms and target.layer == header.layer):
        return False
    if header.room not in rooms or target.room not in rooms:
        return False  # said by room_problem
    return rooms.index(target.room) > rooms.index(header.room)


def problems_of(header, headers):
    if header.layer not in MAY_INCLUDE:
        place = "its folder, gpusel/detail/<layer>/," if header.is_detail else "a `// Layer: <layer>` line"
        return [f"include/{header.name}: no layer; give it one with {place} one of {', '.join(MAY_INCLUDE)}"]
    problems = []
    if any(mark != header.layer for mark in header.marks):
        problems.append(f"include/{header.name}: its `// Layer:` line says {header.marks[0]}, but its folder "
                        f"says {header.layer}")
    if header.is_detail and room_problem(header):
        problems.append(room_problem(header))
    for number, line in enumerate(header.lines, 1):
        match = INCLUDE_RE.match(line)
        if not match:
            continue
        included, where = match.group(2), header.where(number)
        if included.startswith("gpusel/"):
            target = headers.get(included)
            if target is None:
                problems.append(f"{where} includes {included}, which does not exist")
            elif target.layer not in MAY_INCLUDE[header.layer]:
                problems.append(f"{where} includes {included} ({target.layer} layer), which {header.layer} may not use")
            elif includes_a_room_above(header, target):
                rooms = " < ".join(ROOMS[header.layer])
                problems.append(f"{where} in room {header.room} includes {included}, of room {target.room} above it "
                                f"({rooms}): a room includes only itself and the rooms below it")
            elif (header.is_detail and not header.is_definitions and not target.is_detail
                  and folder_of(header) in reach(target, headers)):
                problems.append(f"{where} includes {included}, which leads back into {folder_of(header)}/: "
                                f"detail/ lies beneath what it serves (forward-declare, or move what it needs "
                                f"into {folder_of(header)}/)")
        elif included == "nvml.h":
            problems.append(f"{where} includes <nvml.h>: NVML is loaded with dlopen, through machine/detail/system/nvml.hpp")
        elif CUDA_HEADER_RE.match(included) and header.cuda_free:
            why = f"the {header.layer} layer has no CUDA" if header.layer in CUDA_FREE_LAYERS else "it says so"
            problems.append(f"{where} includes <{included}>, but it includes no CUDA header ({why})")
    return problems


def crowded_folders(include_dir):
    """A problem for each detail folder (gpusel/detail/, gpusel/<component>/detail/) over MAX_FILES_PER_FOLDER files."""
    problems = []
    for directory, _, files in sorted(os.walk(os.path.join(include_dir, "gpusel"))):
        in_detail = "detail" in os.path.relpath(directory, include_dir).split(os.sep)
        if in_detail and len(files) > MAX_FILES_PER_FOLDER:
            folder = os.path.relpath(directory, os.path.dirname(include_dir))
            problems.append(f"{folder}/: {len(files)} files, more than {MAX_FILES_PER_FOLDER}: give it rooms "
                            f"that say what they hold (ROOMS in this test, docs/layers.md)")
    return problems


def command_problems(root, headers):
    """The command (tools/) includes only core headers and the machine component's public headers."""
    problems = []
    tools = os.path.join(root, "tools")
    for name in sorted(os.listdir(tools)):
        if not name.endswith((".cpp", ".hpp")):
            continue
        with open(os.path.join(tools, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE_RE.match(line)
                if not match or not match.group(2).startswith("gpusel/"):
                    continue
                target = headers.get(match.group(2))
                if target is None or target.is_detail or target.layer not in COMMAND_MAY_INCLUDE:
                    layer = "missing" if target is None else ("detail" if target.is_detail else target.layer)
                    problems.append(f"tools/{name}:{number}: the command includes {match.group(2)} ({layer}); it "
                                    f"includes only public headers of the {' and '.join(COMMAND_MAY_INCLUDE)} layers")
    return problems


def own_header(definitions):
    """The header x.hpp whose definitions x-inl.hpp holds."""
    return definitions[: -len("-inl.hpp")] + ".hpp"


def definitions_problems(headers):
    """Where a definitions file (-inl.hpp) is included, or listed, out of its place."""
    problems = []
    listed = {name: [] for name in headers if headers[name].is_definitions}
    for header in headers.values():
        for number, line in enumerate(header.lines, 1):
            match = INCLUDE_RE.match(line)
            if not match or match.group(2) not in listed:
                continue
            included, where = match.group(2), header.where(number)
            if header.name in IMPLEMENTATION_LISTS:
                listed[included].append(header.name)
            elif header.is_definitions:
                problems.append(f"{where} includes {included}: definitions include headers, never other "
                                f"definitions; declare the helper it needs in a header (detail/<layer>/, "
                                f"Note [Compile-once mode]) and include that")
            elif header.name != own_header(included):
                problems.append(f"{where} includes {included}: definitions are included only by their own header "
                                f"({own_header(included)}) and by the implementation lists")
    for name, lists in listed.items():
        layer = headers[name].layer
        right = [list_name for list_name, layers in IMPLEMENTATION_LISTS.items() if layer in layers]
        if len(lists) != 1 or lists[0] not in right:
            where = f"listed in {' and '.join(lists)}" if lists else "listed in no implementation list"
            problems.append(f"include/{name}: {where}; a definitions file of the {layer} layer is listed once, in "
                            f"{' or '.join(right) or 'the list of its layer'}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=ROOT)
    parser.add_argument("--list", action="store_true", help="print each header's layer and CUDA-freedom")
    args = parser.parse_args()
    headers = read_headers(os.path.join(args.root, "include"))
    if args.list:
        for header in headers.values():
            print(f"{header.name} {header.layer} {'cuda-free' if header.cuda_free else 'cuda'}")
        return 0
    problems = [problem for header in headers.values() for problem in problems_of(header, headers)]
    problems += crowded_folders(os.path.join(args.root, "include"))
    problems += definitions_problems(headers)
    problems += command_problems(args.root, headers)
    for problem in problems:
        print(problem)
    print(f"{len(headers)} headers checked against docs/layers.md's rule: "
          f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
