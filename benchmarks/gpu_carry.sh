#!/usr/bin/env bash
# What a GPU-machine call carries beside the working tree (ignored by git; name them in the device
# tool's `carry`): .whl/ (pure-Python wheels the machine lacks, for its Python 3.12), .deb/ (bubblewrap,
# unpacked there by gpu_env.sh), .kb/ (the KernelBench copy beside the checkout), and with OLD=<commit>
# .old/src and .old/benchmarks (that commit's package and scripts, for same-run comparisons against
# the code before a change).
#   bash benchmarks/gpu_carry.sh            # then carry [".whl", ".deb", ".kb"] (and ".old")
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-"typer==0.20.0 click==8.3.1 shellingham==1.5.4 rich==14.2.0 markdown-it-py==4.0.0 mdurl==0.1.2
  pygments==2.19.2 pydantic==2.12.5 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2
  typing-extensions==4.15.0"}
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl $WHEELS
rm -rf .deb && mkdir -p .deb
(cd .deb && apt-get download -qq bubblewrap)
rm -rf .kb && cp -r ../shared/kernelbench .kb
if [ -n "${OLD:-}" ]; then
  rm -rf .old && mkdir -p .old && git archive "$OLD" src benchmarks | tar -x -C .old   # each code with its own scripts
fi
du -sh .whl .deb .kb ${OLD:+.old}
