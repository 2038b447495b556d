"""python decode_peak.py MODEL MMPROJ IMAGE_FILE: decode one image through the projector as the
server does (engine/vision.py), and print what it cost as JSON: the peak RSS it added (VmHWM,
reset just before) and the CPU seconds. One image a process: a freed buffer would otherwise be
reused by the next decode, and its peak would read low."""

from __future__ import annotations

import json
import sys
import time

from localserve.models.catalogue import ModelEntry
from localserve.models.loaded import load
from localserve.ops.metrics import ServerMetrics
from localserve.settings import Settings


def vm(name: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(name)


def main(model: str, mmproj: str, image: str) -> None:
    data = open(image, "rb").read()
    loaded = load(ModelEntry("m", model), Settings(model=model, mmproj=mmproj), ServerMetrics(), threads=1)
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before, started = vm("VmHWM"), time.process_time()
    loaded.engine.projector.image_segments(data)
    print(json.dumps({"peak": vm("VmHWM") - before, "cpu": time.process_time() - started}))


if __name__ == "__main__":
    main(*sys.argv[1:])
