#!/usr/bin/env bash
# Fill a folder with what a GPU machine without network needs to install specrun with no build: a
# llama-cpp-python wheel (scripts/gpu-wheel.sh makes CUDA ones) and wheels of every package that
# specrun, that wheel and the model writer (gguf, for scripts/shaped_gguf.py) need, except those the
# machine already has, and what they alone bring in. The project's own tree travels beside it and is
# installed from there (editable), so the bundle also holds its build backend (setuptools, wheel).
# It prints what it holds and the total size, which with the project's tree (its git-tracked files)
# must stay under 56 MiB, the most a metered GPU server takes in one copy with room to spare; it
# fails otherwise.
#
# Usage: bash scripts/gpu-bundle.sh [OPTIONS] DIR WHEEL
#   DIR     the bundle folder; its *.whl files and requirements.txt are replaced
#   WHEEL   the llama-cpp-python wheel, or a folder holding one (gpu-wheel.sh's OUTDIR)
# Options:
#   --python-version X.Y   the GPU machine's Python (default 3.12)
#   --present "NAME ..."   packages the machine already has (default: numpy typer rich
#                          huggingface-hub pytest cmake ninja scikit-build-core; "" for none)
#   --glibc 2.NN           the oldest glibc the wheels may need (default 2.28)
#   --limit-mib N          the size limit, bundle and tree together (default 56)
# Environment: PYTHON (the python3 whose pip downloads), LLAMA_SPEC as in scripts/setup.sh.
# Then, on the GPU machine, with the tree and DIR copied there:
#   SPECRUN_BUNDLE=DIR bash scripts/setup.sh      (or SPECRUN_BUNDLE=DIR bash scripts/gpu-check.sh)
# Bash 3.2 compatible, like setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

PYTHON=${PYTHON:-python3}
PY_VERSION=3.12
PRESENT="numpy typer rich huggingface-hub pytest cmake ninja scikit-build-core"
GLIBC=2.28
LIMIT_MIB=56
usage() {
    echo "usage: bash scripts/gpu-bundle.sh [--python-version X.Y] [--present \"NAME ...\"] [--glibc 2.NN] [--limit-mib N] DIR WHEEL" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --python-version) [ $# -ge 2 ] || usage; PY_VERSION=$2; shift 2 ;;
        --present) [ $# -ge 2 ] || usage; PRESENT=$2; shift 2 ;;
        --glibc) [ $# -ge 2 ] || usage; GLIBC=$2; shift 2 ;;
        --limit-mib) [ $# -ge 2 ] || usage; LIMIT_MIB=$2; shift 2 ;;
        -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
        -*) usage ;;
        *) break ;;
    esac
done
[ $# -eq 2 ] || usage
case "$PY_VERSION" in
    3.[0-9] | 3.[0-9][0-9]) ;;
    *) echo "gpu-bundle: --python-version $PY_VERSION is not of the form 3.NN" >&2; exit 2 ;;
esac
case "$GLIBC" in
    2.[0-9] | 2.[0-9][0-9]) ;;
    *) echo "gpu-bundle: --glibc $GLIBC is not of the form 2.NN" >&2; exit 2 ;;
esac
case "$LIMIT_MIB" in
    "" | *[!0-9]*) echo "gpu-bundle: --limit-mib $LIMIT_MIB is not a whole number" >&2; exit 2 ;;
esac
DIR=$1
WHEEL=$2
if [ -d "$WHEEL" ]; then
    found=""
    for candidate in "$WHEEL"/llama_cpp_python-*.whl; do
        [ -f "$candidate" ] && found="$found $candidate"
    done
    case "$found" in
        "") echo "gpu-bundle: $WHEEL holds no llama_cpp_python-*.whl; make one with scripts/gpu-wheel.sh $WHEEL" >&2; exit 2 ;;
        " "*" "*) echo "gpu-bundle: $WHEEL holds more than one llama_cpp_python-*.whl; name one" >&2; exit 2 ;;
    esac
    WHEEL=${found# }
fi
case "${WHEEL##*/}" in
    llama_cpp_python-*.whl) [ -f "$WHEEL" ] || { echo "gpu-bundle: $WHEEL is not a file" >&2; exit 2; } ;;
    *) echo "gpu-bundle: $WHEEL is not a llama_cpp_python-*.whl wheel" >&2; exit 2 ;;
esac

# pip takes the platform tags literally, so name every manylinux level up to the glibc given.
PLATFORMS=(--platform manylinux2014_x86_64)
minor=17
while [ "$minor" -le "${GLIBC#2.}" ]; do
    PLATFORMS+=(--platform "manylinux_2_${minor}_x86_64")
    minor=$((minor + 1))
done
TARGET=(--only-binary :all: --implementation cp --python-version "$PY_VERSION" "${PLATFORMS[@]}")
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/specrun-bundle.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
cp "$WHEEL" "$STAGE/"
WHEEL=$STAGE/${WHEEL##*/}

# The roots: specrun's dependencies, the model writer's gguf (from the test extra), the wheel's
# own requirements, and specrun's build backend. One requirement a line; "!" marks those bundled
# whether or not the machine has them (pip's isolated build environment sees only the bundle).
"$PYTHON" - "$WHEEL" >"$STAGE/roots.txt" <<'PY'
import re
import sys
import zipfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11: pip carries a copy
    from pip._vendor import tomli as tomllib

project = tomllib.loads(Path("pyproject.toml").read_text())
roots = [r for r in project["project"]["dependencies"] if not r.lower().startswith("llama-cpp-python")]
roots += [r for r in project["project"]["optional-dependencies"]["test"] if re.match(r"gguf\b", r)]
with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    roots += [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
              if line.startswith("Requires-Dist:") and "extra ==" not in line]
for requirement in roots:
    print(requirement)
for requirement in project["build-system"]["requires"]:
    print("!" + requirement)
PY

# Resolve everything for the GPU machine, then keep what it may lack: the packages reached from the
# roots without passing through one it has.
ROOTS=()
while IFS= read -r line; do
    ROOTS+=("${line#!}")
done <"$STAGE/roots.txt"
echo "gpu-bundle: resolving for Python $PY_VERSION on x86-64 Linux (glibc $GLIBC): ${ROOTS[*]}"
"$PYTHON" -m pip install --quiet --dry-run --ignore-installed --target "$STAGE/target" --report "$STAGE/report.json" \
    "${TARGET[@]}" "${ROOTS[@]}"
PINS=()
while IFS= read -r line; do
    PINS+=("$line")
done < <("$PYTHON" - "$STAGE/report.json" "$STAGE/roots.txt" "$PY_VERSION" "$PRESENT" <<'PY'
import json
import sys

from pip._vendor.packaging.markers import default_environment
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

report, roots_file, py_version, present = sys.argv[1:5]
resolved = {canonicalize_name(item["metadata"]["name"]): item["metadata"]
            for item in json.load(open(report))["install"]}
present = {canonicalize_name(name) for name in present.split()}
environment = {**default_environment(), "python_version": py_version, "python_full_version": py_version + ".0",
               "platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def applies(requirement, extras):
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras or {""})


chosen = {}
queue = []
for line in open(roots_file).read().split("\n"):
    if line:
        forced = line.startswith("!")
        queue.append((Requirement(line.lstrip("!")), {""}, forced))
while queue:
    requirement, extras, forced = queue.pop()
    name = canonicalize_name(requirement.name)
    if not applies(requirement, extras) or (name in present and not forced):
        continue
    wanted = set(requirement.extras) | {""}
    if name in chosen and wanted <= chosen[name]:
        continue
    if name not in resolved:  # its marker holds on the GPU machine's Python but not on this one
        sys.exit(f"gpu-bundle: {name} is needed on Python {py_version} but pip resolved on this machine's "
                 "Python without it; run with PYTHON set to a python" + py_version)
    chosen[name] = chosen.get(name, set()) | wanted
    for dependency in resolved[name].get("requires_dist") or []:
        queue.append((Requirement(dependency), chosen[name], forced))
for name in sorted(chosen):
    print(f"{name}=={resolved[name]['version']}")
PY
)
echo "gpu-bundle: leaving out what the machine has: ${PRESENT:-nothing}"
"$PYTHON" -m pip download --quiet --no-deps "${TARGET[@]}" -d "$STAGE/wheels" "${PINS[@]}"

# Into DIR: the wheels, and the extra requirements setup.sh installs beside specrun (gguf).
mkdir -p "$DIR"
rm -f "$DIR"/*.whl "$DIR/requirements.txt"
mv "$STAGE/wheels"/*.whl "$WHEEL" "$DIR/"
grep -E '^gguf' "$STAGE/roots.txt" >"$DIR/requirements.txt" || true

"$PYTHON" - "$DIR" "$REPO" "$LIMIT_MIB" <<'PY'
import subprocess
import sys
from pathlib import Path

folder, repo, limit_mib = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
mib = 1024 * 1024
files = sorted(folder.iterdir())
for path in files:
    print(f"  {path.stat().st_size / mib:7.2f} MiB  {path.name}")
bundle = sum(p.stat().st_size for p in files if p.is_file())
try:
    tracked = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    tree = sum((repo / name).stat().st_size for name in tracked.decode().split("\0") if name and (repo / name).is_file())
except (OSError, subprocess.CalledProcessError):
    sys.exit(f"gpu-bundle: cannot list the project's files (git ls-files in {repo}), so cannot tell whether "
             f"the bundle and the tree fit in {limit_mib} MiB; run it from a git checkout")
total = bundle + tree
print(f"gpu-bundle: {len(files)} files, {bundle / mib:.1f} MiB in {folder}; with the project's tree "
      f"({tree / mib:.1f} MiB) {total / mib:.1f} MiB of the {limit_mib} MiB allowed")
if total > limit_mib * mib:
    print(f"gpu-bundle: over {limit_mib} MiB: build the wheel for fewer CUDA architectures, or name more packages "
          "the machine has with --present", file=sys.stderr)
    sys.exit(1)
PY
echo "gpu-bundle: on the GPU machine, with the tree and $DIR copied there: SPECRUN_BUNDLE=$DIR bash scripts/setup.sh"
