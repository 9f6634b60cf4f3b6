#!/usr/bin/env python3
"""Checks the vcpkg port's manifest: valid JSON, the fields vcpkg requires, the
dependencies the port needs, and the project's version.

    check_vcpkg_manifest.py <port directory> <project version>
"""
import json
import re
import sys


def main() -> int:
    port_dir, project_version = sys.argv[1], sys.argv[2]
    problems = []
    path = f"{port_dir}/vcpkg.json"
    try:
        with open(path, encoding="utf-8") as file:
            manifest = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        print(f"{path}: not valid JSON: {error}")
        return 1

    if manifest.get("name") != "gpusel":
        problems.append(f'"name" is {manifest.get("name")!r}, expected "gpusel"')
    # vcpkg accepts exactly one of these version fields.
    version_fields = [key for key in ("version", "version-semver", "version-date", "version-string") if key in manifest]
    if len(version_fields) != 1:
        problems.append(f"expected exactly one version field, found {version_fields}")
    elif manifest[version_fields[0]] != project_version:
        problems.append(f'"{version_fields[0]}" is {manifest[version_fields[0]]!r}, '
                        f"but the project (include/gpusel/version.hpp) is {project_version!r}")
    if "port-version" in manifest and not (isinstance(manifest["port-version"], int) and manifest["port-version"] >= 0):
        problems.append('"port-version" must be a non-negative integer')
    for field in ("description", "license"):
        if not manifest.get(field):
            problems.append(f'"{field}" is missing or empty')

    dependencies = {}
    for dependency in manifest.get("dependencies", []):
        if isinstance(dependency, str):
            dependencies[dependency] = False
        elif isinstance(dependency, dict) and isinstance(dependency.get("name"), str):
            dependencies[dependency["name"]] = bool(dependency.get("host", False))
        else:
            problems.append(f"a dependency is neither a name nor an object with a name: {dependency!r}")
    for name in dependencies:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
            problems.append(f"dependency {name!r} is not a valid port name")
    if dependencies.get("cuda") is not False:
        problems.append('the port must depend on "cuda" (as a target dependency)')
    for host_port in ("vcpkg-cmake", "vcpkg-cmake-config"):
        if dependencies.get(host_port) is not True:
            problems.append(f'the port must depend on {host_port!r} with "host": true')

    for problem in problems:
        print(f"{path}: {problem}")
    if not problems:
        print(f"{path}: gpusel {project_version}, depends on {sorted(dependencies)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
