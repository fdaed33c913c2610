"""The wheel says what it holds (Note [The wheel's tag and torch pin] in setup.py): it is tagged for
this CPython and platform, requires the torch release it was built against, and once installed
into a fresh environment runs on openreg without the source tree.

The wheel is built from this tree, reusing the CMake build in build/release (nothing recompiles),
and its tag, requirement and contents are checked in every run. The tests that install it run
with OPENREG_WHEEL_TEST set (`make test-wheel`, which `make test` runs): they install the wheel
into a fresh environment and run tests/installed_smoke.py there, from a directory outside the
checkout.
- OPENREG_WHEEL_TEST=link: the fresh environment gets this environment's torch and its
  dependencies through a .pth file that lists a directory of links to them, so pip sees torch
  2.13.0+cpu as installed and resolves the wheel's requirement against it, with no index.
- OPENREG_WHEEL_TEST=pip: pip installs torch into the fresh environment, as a user would (minutes).
"""

import email.parser
import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = Path(os.environ.get("OPENREG_CMAKE_BUILD_DIR", ROOT / "build" / "release"))
TORCH_RELEASE = torch.__version__.split("+")[0]
TORCH_MAJOR, TORCH_MINOR = (int(part) for part in TORCH_RELEASE.split(".")[:2])
# What the wheel must be tagged with: this interpreter (cp311-cp311) and platform (linux_x86_64).
PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
PLATFORM_TAG = sysconfig.get_platform().replace("-", "_").replace(".", "_")
TAG = f"{PYTHON_TAG}-{PYTHON_TAG}-{PLATFORM_TAG}"
INSTALL = os.environ.get("OPENREG_WHEEL_TEST", "")
installs = pytest.mark.skipif(INSTALL not in ("link", "pip"), reason="installs: `make test-wheel` runs it")


# The fresh environment's processes see neither this tree (PYTHONPATH; its torch_openreg.egg-info
# would count as installed) nor a setting that turns autoload off.
FRESH = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
# pip with no configuration (this machine's lists a directory of wheels to find packages in), for
# installs that may use nothing but what is installed: with --no-index it then has no source at all.
ISOLATED_PIP = {k: v for k, v in FRESH.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}


def run(args: list, env: dict = FRESH, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900, env=env, **kwargs)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (BUILD_DIR / "CMakeCache.txt").exists():
        pytest.fail(f"no CMake build in {BUILD_DIR}: run `make build` (or set OPENREG_CMAKE_BUILD_DIR)")
    out = tmp_path_factory.mktemp("wheel")
    env = dict(os.environ, OPENREG_CMAKE_BUILD_DIR=str(BUILD_DIR))  # this environment's pip and torch
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "--disable-pip-version-check", "-w", out, ROOT], env=env)
    (built,) = out.glob("*.whl")
    return built


def read_metadata(wheel: Path, name: str):
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [n for n in archive.namelist() if re.fullmatch(rf"torch_openreg-[^/]+\.dist-info/{name}", n)]
        return email.parser.Parser().parsestr(archive.read(path).decode())


def test_the_wheel_is_tagged_for_this_interpreter_and_platform(wheel):
    assert wheel.name == f"torch_openreg-0.1.0-{TAG}.whl"
    info = read_metadata(wheel, "WHEEL")
    assert info.get_all("Tag") == [TAG]
    assert info["Root-Is-Purelib"] == "false"  # shared objects: installed into platlib


def test_the_wheel_requires_the_torch_minor_release_it_was_built_against(wheel):
    (requirement,) = [Requirement(r) for r in read_metadata(wheel, "METADATA").get_all("Requires-Dist")]
    assert requirement.name == "torch"
    assert requirement.specifier == SpecifierSet(f">={TORCH_MAJOR}.{TORCH_MINOR},<{TORCH_MAJOR}.{TORCH_MINOR + 1}")
    # Every patch release and flavour of the minor release is admitted, no other minor.
    for admitted in (f"{TORCH_MAJOR}.{TORCH_MINOR}.0", f"{TORCH_MAJOR}.{TORCH_MINOR}.9", TORCH_RELEASE):
        assert requirement.specifier.contains(admitted), admitted
    for refused in (f"{TORCH_MAJOR}.{TORCH_MINOR - 1}.9", f"{TORCH_MAJOR}.{TORCH_MINOR + 1}.0"):
        assert not requirement.specifier.contains(refused), refused


def test_the_wheel_holds_every_module_of_the_tree_the_shared_objects_and_the_entry_point(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "torch_openreg").rglob("*.py")}
    assert modules, "no Python file under torch_openreg/"
    missing = sorted(modules - names)
    assert not missing, f"in the tree but not in the wheel: {missing}"
    for required in ("torch_openreg/lib/libtorch_openreg.so", "torch_openreg/lib/libopenreg.so",
                     "torch_openreg/_build_info.py", "torch_openreg_autoload.py"):
        assert required in names, required
    assert any(re.fullmatch(r"torch_openreg/_C\..*\.so", n) for n in names), sorted(names)
    assert re.search(r"^openreg = torch_openreg_autoload:load$", entry_points, re.M), entry_points
    assert re.search(r"^openreg = torch_openreg_autoload:vllm_platform$", entry_points, re.M), entry_points


def make_venv(path: Path, *dists: str) -> tuple[Path, Path]:
    """A fresh environment of the base interpreter (not the shared venv's: its packages stay out)
    in which `dists` and the distributions they require, as installed here, are visible with their
    metadata, so pip counts them as installed: a directory of links to their files, listed in a
    .pth file. pip itself is one of them (the environment is made without pip, which saves the
    time of installing it)."""
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", path])
    python = path / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    links = path / "linked"
    links.mkdir()
    # (name, extras): a requirement with extras (torch's CUDA builds ask for cuda-toolkit[cudart, ...])
    # brings the distributions its extras require too.
    todo, seen = [(d, frozenset()) for d in dists], set()
    while todo:
        name, extras = todo.pop()
        dist = importlib.metadata.distribution(name)
        key = (canonicalize_name(dist.metadata["Name"]), extras)
        if key in seen:
            continue
        seen.add(key)
        requirements = [Requirement(r) for r in dist.requires or []]
        todo += [
            (r.name, frozenset(r.extras))
            for r in requirements
            if not r.marker or any(r.marker.evaluate({"extra": e}) for e in {"", *extras})
        ]
        for top in {Path(f).parts[0] for f in dist.files if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (links / top).exists():
                (links / top).symlink_to(source)
    (site / "openreg-test-links.pth").write_text(f"{links}\n")
    return python, site


@installs
def test_the_wheel_installs_into_a_fresh_environment_and_passes_the_smoke_suite_there(wheel, tmp_path):
    linked = ["pip", "pytest", *(["torch"] if INSTALL == "link" else [])]
    python, _ = make_venv(tmp_path / "venv", *linked)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if INSTALL == "pip":
        run([*pip, f"torch=={TORCH_RELEASE}"])
    # --no-index: the wheel's requirement must be met by the torch that is there.
    run([*pip, "--no-index", wheel], env=ISOLATED_PIP)
    # A directory outside the checkout, holding nothing but the smoke suite.
    outside = tmp_path / "user"
    outside.mkdir()
    (outside / "test_installed.py").write_text((ROOT / "tests" / "installed_smoke.py").read_text())
    result = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_installed.py"], cwd=outside)
    assert re.search(r"\b6 passed\b", result.stdout), result.stdout


@installs
def test_pip_refuses_the_wheel_next_to_another_torch_release(wheel, tmp_path):
    # The unpinned wheel paired itself with any torch, which the import guard then refused.
    python, site = make_venv(tmp_path / "venv", "pip")
    fake = site / "torch-2.99.0.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0\n")
    result = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
                             "--dry-run", wheel], capture_output=True, text=True, timeout=300, env=ISOLATED_PIP)
    assert result.returncode != 0, result.stdout
    wanted = f"torch<{TORCH_MAJOR}.{TORCH_MINOR + 1},>={TORCH_MAJOR}.{TORCH_MINOR}"
    assert wanted in result.stdout + result.stderr, result.stdout + result.stderr
