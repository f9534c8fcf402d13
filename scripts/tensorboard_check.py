#!/usr/bin/env python3
"""Reads a run's TensorBoard folder (mantissa-train --tensorboard=DIR) with TensorBoard's own reader,
EventAccumulator, and prints each tag with its number of points, first and last steps and a few values, so
that one can see that TensorBoard reads mantissa's files as it reads SummaryWriter's. It applies TensorBoard's
restart rule (a SessionLog START drops the earlier points at steps >= its step), as `tensorboard --logdir`
does, and exits 1 when a tag has a step twice after it, when a tag has no point, or when the folder has no
events file.

Runs in the --bench environment (scripts/install-deps.sh --bench pins tensorboard there); the library, its
tests and CI never need Python:
  build/bench-venv/bin/python scripts/tensorboard_check.py runs/mlp
"""
import argparse
import glob
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def fmt(v):
    return f"{v:.6g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="the folder given to --tensorboard")
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.dir, "events.out.tfevents.*")))
    if not files:
        print(f"tensorboard_check: no events.out.tfevents.* file in {args.dir}", file=sys.stderr)
        return 1
    print(f"{args.dir}: {len(files)} events file(s)")
    for f in files:
        print(f"  {os.path.basename(f)}  {os.path.getsize(f)} bytes")

    # 0: keep every point (the default samples 10000 scalars and 500 histograms per tag).
    acc = event_accumulator.EventAccumulator(
        args.dir,
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0},
        purge_orphaned_data=True,
    )
    acc.Reload()
    tags = acc.Tags()
    print(f"file_version {acc.file_version}")
    bad = []
    print(f"{len(tags['scalars'])} scalar tags:")
    for tag in sorted(tags["scalars"]):
        points = acc.Scalars(tag)
        steps = [p.step for p in points]
        if not points or len(set(steps)) != len(steps):
            bad.append(tag)
        shown = ", ".join(f"{p.step}: {fmt(p.value)}" for p in points[:2])
        last = f" ... {points[-1].step}: {fmt(points[-1].value)}" if len(points) > 2 else ""
        span = f"steps {steps[0]}..{steps[-1]}" if steps else "no steps"
        print(f"  {tag:26s} {len(points):6d} points, {span:16s} {shown}{last}")
    print(f"{len(tags['histograms'])} histogram tags:")
    for tag in sorted(tags["histograms"]):
        points = acc.Histograms(tag)
        steps = [p.step for p in points]
        if not points or len(set(steps)) != len(steps):
            bad.append(tag)
        print(f"  {tag:26s} {len(points):6d} points, steps {steps[0]}..{steps[-1]}" if steps else f"  {tag}: none")
        if points:
            h = points[-1].histogram_value
            mean = h.sum / h.num if h.num else float("nan")
            print(
                f"    step {points[-1].step}: num {h.num:.0f}, min {fmt(h.min)}, max {fmt(h.max)}, mean {fmt(mean)},"
                f" {len(h.bucket)} buckets"
            )
    if bad:
        print(f"tensorboard_check: repeated steps or no points in: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
