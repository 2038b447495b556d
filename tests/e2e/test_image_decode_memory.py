"""A decode's peak memory stays under what image_headers.py estimates from the header (the
figure MAX_DECODE_BYTES holds, docs/images.rst): each image decoded through the real
projector (libmtmd, stb_image) in a process of its own, its peak RSS read from /proc."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import hostile_images
import imagefiles
from localserve.image_headers import read_facts
from tinyvision import write_tiny_mmproj

ROOT = Path(__file__).resolve().parents[2]


def png(width: int, height: int, depth: int, color: int) -> bytes:
    """Rows of varied bytes (four of them repeated), compressed fast."""
    samples = {0: 1, 2: 3, 6: 4}[color] * depth // 8
    rows = [b"\x00" + bytes((i * 7 + k * 13) % 251 for k in range(width * samples)) for i in range(4)]
    raw = b"".join(rows[i % 4] for i in range(height))
    return hostile_images.png_with(struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0), zlib.compress(raw, 1))


IMAGES = {
    "PNG RGB": lambda: png(1500, 1000, 8, 2),
    "PNG RGBA 16-bit": lambda: png(1200, 1000, 16, 6),
    "PNG gray": lambda: png(1500, 1000, 8, 0),
    "JPEG baseline": lambda: imagefiles.jpeg(1600, 1200),
    "JPEG progressive": lambda: imagefiles.progressive_jpeg(1600, 1200, ac_scans=5),
    "GIF": lambda: imagefiles.gif(700, 600),
    "BMP": lambda: imagefiles.bmp(800, 600),
}


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    return write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-tiny.gguf")


@pytest.mark.parametrize("kind", sorted(IMAGES))
def test_a_decode_stays_under_its_estimate(tiny_model, mmproj, tmp_path, kind):
    data = IMAGES[kind]()
    media_type = "image/" + kind.split()[0].lower()
    estimate = read_facts(data, media_type).decode_bytes
    path = tmp_path / "image"
    path.write_bytes(data)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "decode_peak.py"), str(tiny_model),
                           str(mmproj), str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peak"]
    assert peak <= estimate, (kind, peak >> 20, estimate >> 20)
    assert estimate < 3 * peak + (4 << 20), (kind, peak >> 20, estimate >> 20)      # and close to it
