#!/usr/bin/env python3
"""The race test's verdict (check_race.sh): reads the holders' intervals and outcomes.

    overlaps.py <log> <outcomes> <errors>

<log>: "<uuid> <start ns> <end ns> <holder>" lines, each an interval a holder held the GPU.
<outcomes>: "lib <uid> <holds> <refusals> <errors>" (race_leaser) and "<run|wait> <uid> <status>".
<errors>: what went wrong other than a GPU leased by another job.
Prints the counts, the first overlaps, and whether every user held GPUs every way.
"""
import collections
import sys


def main(log, outcomes, errors):
    by_gpu = collections.defaultdict(list)
    with open(log) as lines:
        for line in lines:
            parts = line.split()
            if len(parts) == 4:
                by_gpu[parts[0]].append((int(parts[1]), int(parts[2]), parts[3]))
    overlaps, shown = 0, 0
    for uuid, intervals in sorted(by_gpu.items()):
        intervals.sort()
        active = []  # (end, holder) of intervals that may still overlap the next
        for start, end, holder in intervals:
            active = [(e, h) for e, h in active if e > start]
            for other_end, other in active:
                if other != holder:
                    overlaps += 1
                    if shown < 5:
                        shown += 1
                        print(f"  overlap on {uuid}: {other} until {other_end}, {holder} from {start}")
            active.append((end, holder))
    held = collections.Counter()
    for line in open(outcomes):
        parts = line.split()
        if parts[0] == "lib" and len(parts) == 5 and int(parts[2]) > 0:
            held[("lib", parts[1])] += int(parts[2])
        elif parts[0] in ("run", "wait") and len(parts) == 3 and parts[2] == "0":
            held[(parts[0], parts[1])] += 1
    users = sorted({uid for _, uid in held} | {line.split()[1] for line in open(outcomes) if len(line.split()) > 1})
    for uid in users:
        print(f"  uid {uid}: {held[('lib', uid)]} library holds, {held[('run', uid)]} run jobs, "
              f"{held[('wait', uid)]} --wait jobs")
    said = open(errors).read()
    error_count = said.count(" exited ") + said.count("race_leaser ") + said.count("--clean failed")
    if said:
        print("  errors (the first 20 lines):")
        print("\n".join("    " + line for line in said.splitlines()[:20]))
    print(f"intervals: {sum(len(i) for i in by_gpu.values())}")
    print(f"overlaps: {overlaps}")
    print(f"errors: {error_count}")
    every = len(users) == 3 and all(held[(kind, uid)] > 0 for uid in users for kind in ("lib", "run", "wait"))
    print(f"every user held GPUs every way: {'yes' if every else 'no'}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
