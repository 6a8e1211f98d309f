#!/usr/bin/env python3
"""hack/kmm/upgrade-times.py: the driver upgrade's times on the local node, from hack/kmm/upgrade.sh's
two stamped watches (each line "<seconds since the epoch> <event>").

  upgrade-times.py --since T --pods PREFIX STEPS_LOG PODS_LOG

STEPS_LOG: "step=<the node's slicer.dev/driver-upgrade label>" per Node event; PODS_LOG:
"<name> <phase> <deletionTimestamp>" per Pod event. Only events after T (the spec change) count,
and only the first rollout after it: from the label's first Drain to its removal after Verify.
Pods named PREFIX* are the Deployment's: the first one deleted after T is the first eviction,
the last of those running at T to be deleted is the one that waited for its budget, and the
first pod not running at T that runs is the first back on a slice.
"""
import argparse
import sys


def read(path, since):
    out = []
    with open(path) as f:
        for line in f:
            t, _, ev = line.rstrip("\n").partition(" ")
            out.append((float(t), ev))
    return [(t, ev) for t, ev in out if t >= since], [(t, ev) for t, ev in out if t < since]


def steps(events):
    """(step, start) in order: the first rollout's steps, and its end (step "")."""
    seen, last = [], None
    for t, ev in events:
        step = ev.removeprefix("step=")
        if step == last:
            continue
        if not seen and step == "":
            last = step
            continue
        seen.append((step, t))
        last = step
        if step == "":
            break
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--since", type=float, required=True)
    ap.add_argument("--pods", required=True)
    ap.add_argument("steps_log")
    ap.add_argument("pods_log")
    a = ap.parse_args()

    st, _ = read(a.steps_log, a.since)
    seq = steps(st)
    if not seq or seq[0][0] != "Drain" or seq[-1][0] != "":
        sys.exit(f"upgrade-times: no rollout from Drain to done in {a.steps_log}: {seq}")
    start, end = seq[0][1], seq[-1][1]
    print(f"upgrade time on the node (step Drain set to the label removed after Verify): {end - start:.1f}s")
    for (step, t), (_, nxt) in zip(seq, seq[1:]):
        print(f"  {step}: {nxt - t:.1f}s")
    print(f"  (the spec change to Drain: {start - a.since:.1f}s)")

    after, before = read(a.pods_log, a.since)
    state = {}
    for _, ev in before:
        name, phase, *deleting = ev.split(" ")
        state[name] = (phase, bool(deleting and deleting[0]))
    running_at_spec = {n for n, (ph, dl) in state.items() if n.startswith(a.pods) and ph == "Running" and not dl}
    deleted, back = {}, None
    for t, ev in after:
        name, phase, *deleting = ev.split(" ")
        if not name.startswith(a.pods):
            continue
        if deleting and deleting[0] and name in running_at_spec:
            deleted.setdefault(name, t)
        if back is None and deleted and name not in running_at_spec and phase == "Running" and not (deleting and deleting[0]):
            back = t
    if len(deleted) != len(running_at_spec) or not deleted or back is None:
        sys.exit(f"upgrade-times: pods running at the spec change {sorted(running_at_spec)}, deleted {deleted}, back {back}")
    first, last = min(deleted.values()), max(deleted.values())
    print(f"the PDB-protected pod waited for its budget: {last - first:.1f}s (the first eviction to its deletion)")
    print(f"the node without a slice to offer (the first eviction to a MIG pod running again): {back - first:.1f}s")
    print(f"  of it none of the Deployment's pods on a slice (the last deletion to the first back): {back - last:.1f}s")


if __name__ == "__main__":
    main()
