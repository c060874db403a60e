#!/usr/bin/env python3
"""Reads TensorBoard event files with the `tensorboard` package and prints their scalars, to check
that the files train/tensorboard_writer.cc writes are ones TensorBoard reads.

    pip install tensorboard
    build/tests/libai_train_tests --gtest_filter='TensorBoardWriter.*'
    .venv/bin/python tools/check_tensorboard.py build/tests/metrics_test_out/tensorboard
    .venv/bin/python tools/check_tensorboard.py <output_dir>/tensorboard --expect train/loss

Prints one line per tag and event: `tag step value`. Exits with status 1 when the folder holds no
scalars, or lacks a tag named with --expect. TensorBoard's reader checks both CRCs of every
record and stops quietly at the first bad one, so a wrong CRC shows as missing events: expect a
tag that only the last record carries (flipping one bit of the C++ test's last record drops
eval/loss here).
"""
import argparse
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log_dir", help="a folder with events.out.tfevents.* files")
    parser.add_argument("--expect", action="append", default=[], help="a tag that must be present")
    args = parser.parse_args()

    accumulator = EventAccumulator(args.log_dir, size_guidance={"scalars": 0})  # 0: keep every event
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    if not tags:
        print(f"no scalars in {args.log_dir}", file=sys.stderr)
        return 1
    for tag in sorted(tags):
        for event in accumulator.Scalars(tag):
            print(f"{tag} {event.step} {event.value:.6g}")
    missing = [tag for tag in args.expect if tag not in tags]
    if missing:
        print(f"missing tags: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
