#!/usr/bin/env bash
# Run COMMAND as root in a throwaway copy of this machine: an overlay over its root file system
# (every write lands in SCRATCH and is gone with it), the checkout at /fresh/checkout, an empty
# HOME, a fresh /tmp, and PACKAGES purged first, so a set-up command meets a machine without them.
# The network and the package configuration (apt sources, pip's indexes) stay the machine's own.
#   usage: fresh_root.sh SCRATCH CHECKOUT "PACKAGES" COMMAND     (root only; Debian/Ubuntu)
set -euo pipefail
scratch=$1 checkout=$2 packages=$3 command=$4
mkdir -p "$scratch/upper" "$scratch/work" "$scratch/root"
exec unshare --mount --propagation private --fork bash -s "$scratch" "$checkout" "$packages" "$command" <<'INNER'
set -euo pipefail
scratch=$1 checkout=$2 packages=$3 command=$4
root=$scratch/root
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/tmp"
mkdir -p "$root/fresh/checkout" "$root/fresh/home"
mount --bind "$checkout" "$root/fresh/checkout"
# pip's settings from the environment (a local wheelhouse or index), as this machine's pip sees them
pip_env=()
while IFS= read -r line; do pip_env+=("$line"); done < <(env | grep -E '^PIP_' || true)
# pivot_root rather than chroot: the kernel refuses user namespaces (bwrap's) to a chrooted process,
# which a real fresh machine is not.
mkdir -p "$root/.oldroot"
cd "$root"
pivot_root . .oldroot
cd /
umount -l /.oldroot
exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/fresh/home LANG=C.UTF-8 CI=true "${pip_env[@]}" bash -c '
    set -euo pipefail
    if [ -n "$1" ]; then
      DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $1 >/dev/null 2>&1
      echo "fresh_root: purged $1"
    fi
    ! command -v bwrap >/dev/null || echo "fresh_root: bwrap is still installed"
    cd /fresh/checkout
    exec bash -c "$2"' fresh_root "$packages" "$command"
INNER
