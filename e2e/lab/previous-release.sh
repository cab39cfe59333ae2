#!/usr/bin/env bash
# previous-release.sh - the chart and the operator image of the previous release, the commit pinned in
# e2e/lab/previous-release, for e2e/test_upgrade.py. Its source comes from `git archive` of that commit
# (cached under ~/.cache/slurmpool/previous-<commit>/src); its image is built by that commit's own
# deploy/docker/build-images.sh, named slurmpool.local/slurmpool:previous-<12 hex> (so it never takes
# the current image's name), and cached by that script under ~/.cache/slurmpool/images. Prints
# COMMIT=, CHART= (the old chart's directory) and IMAGE=NAME=ARCHIVE. Exit 3 with a reason when the
# commit is not in this clone (a shallow clone): the test skips.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
commit=$(sed -n 's/^commit=//p' "$here/previous-release")
[ -n "$commit" ] || { echo "no commit= in e2e/lab/previous-release" >&2; exit 1; }
git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null ||
  { echo "commit $commit (e2e/lab/previous-release) is not in this clone (shallow?): git fetch --unshallow" >&2; exit 3; }
cache=${SLURMPOOL_CACHE:-$HOME/.cache/slurmpool}
dir=$cache/previous-${commit:0:12}
if [ ! -e "$dir/src/.complete" ]; then
  rm -rf "$dir/src" "$dir/src.tmp"; mkdir -p "$dir/src.tmp"
  git -C "$repo" archive "$commit" | tar -C "$dir/src.tmp" -xf -
  touch "$dir/src.tmp/.complete"; mv "$dir/src.tmp" "$dir/src"
fi
name=slurmpool.local/slurmpool:previous-${commit:0:12}
# its own build script (no pyxis variant then), the operator line of its output
out=$(OPERATOR_IMAGE=$name SLURMD_PYXIS=0 "$dir/src/deploy/docker/build-images.sh")
image=$(grep "^$name=" <<< "$out") || { echo "build-images.sh of $commit printed no $name" >&2; exit 1; }
echo "COMMIT=$commit"
echo "CHART=$dir/src/deploy/helm/slurmpool"
echo "IMAGE=$image"
