#!/usr/bin/env bash
# What a GPU-machine call carries beside the working tree (ignored by git; name them in the device
# tool's `carry`): .whl/ (pure-Python wheels the machine lacks, for its Python 3.12), .deb/ (bubblewrap,
# unpacked there by gpu_env.sh), .kb/ (the KernelBench copy beside the checkout), and with OLD=<commit>
# .old/src and .old/benchmarks (that commit's package and scripts, for same-run comparisons against
# the code before a change), and with RAY=1 .ray/ (Ray core, slimmed by slim_ray_wheel.py, and those of
# its dependencies the machine lacks: for the Ray service's steps).
#   bash benchmarks/gpu_carry.sh            # then carry [".whl", ".deb", ".kb"] (and ".old")
#   RAY=1 bash benchmarks/gpu_carry.sh      # then carry [".whl", ".deb", ".kb", ".ray"]
# It fails when the working tree and the carried folders pass CARRY_LIMIT_MB (60; the tool takes 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-"typer==0.20.0 click==8.3.1 shellingham==1.5.4 rich==14.2.0 markdown-it-py==4.0.0 mdurl==0.1.2
  pygments==2.19.2 pydantic==2.12.5 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2
  typing-extensions==4.15.0"}
# Ray core's requirements that torch, transformers and pyarrow do not bring there (filelock, packaging
# and pyyaml they do; click is in WHEELS)
RAY_VERSION=${RAY_VERSION:-2.60.0}
RAY_WHEELS=${RAY_WHEELS:-"msgpack==1.2.4 protobuf==7.36.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 requests==2.34.2 urllib3==2.8.0 idna==3.20
  charset-normalizer==3.5.3 certifi==2026.10.19.post1"}
download() {   # download DIR SPEC...: wheels for the GPU machine's Python 3.12
  local dir=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dir" "$@"
}
rm -rf .whl && mkdir -p .whl
download .whl $WHEELS
rm -rf .deb && mkdir -p .deb
(cd .deb && apt-get download -qq bubblewrap)
rm -rf .kb && cp -r ../shared/kernelbench .kb
if [ -n "${OLD:-}" ]; then
  rm -rf .old && mkdir -p .old && git archive "$OLD" src benchmarks | tar -x -C .old   # each code with its own scripts
fi
rm -rf .ray
if [ -n "${RAY:-}" ]; then
  mkdir -p .ray/full
  python3 -c "import wheel" 2>/dev/null || python3 -m pip install -q wheel   # slim_ray_wheel.py's one need
  download .ray/full "ray==$RAY_VERSION"
  python3 benchmarks/slim_ray_wheel.py .ray/full/ray-*.whl -o .ray --strip
  rm -rf .ray/full
  download .ray $RAY_WHEELS
fi
carried=".whl .deb .kb${OLD:+ .old}${RAY:+ .ray}"
du -sh $carried
tree=$(git ls-files -z -co --exclude-standard | { du -cb --files0-from=- 2>/dev/null || true; } | tail -1 | cut -f1)
dirs=$(du -scb $carried | tail -1 | cut -f1)
total=$(( (tree + dirs) / 1000000 ))
echo "carried in all: $total MB (working tree $(( tree / 1000000 )) MB, $carried $(( dirs / 1000000 )) MB)"
if [ "$total" -gt "${CARRY_LIMIT_MB:-60}" ]; then
  echo "ERROR: $total MB to carry is over ${CARRY_LIMIT_MB:-60} MB (the device tool takes 64 MiB with the tree)" >&2
  exit 1
fi
