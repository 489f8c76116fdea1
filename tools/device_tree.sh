#!/usr/bin/env bash
# Make the working tree fit the device tool's carry limit (64 MiB of tracked and untracked files;
# the repository's tracked tree is larger) for the calls of a GPU session, then put it back:
#
#   bash tools/device_tree.sh drop      # untrack pretrained/, data/corpus/, results/, bench/results/ (kept on disk), exclude them
#   bash tools/device_tree.sh size      # what a device call would carry now, in MiB
#   bash tools/device_tree.sh estimate DIR...   # what it would carry after drop, with DIR... as its carry
#   bash tools/device_tree.sh restore   # track them again exactly as committed; drop the excludes
#
# The GPU runner needs none of them (no TVM there; plans and bundles carry their own data; a run
# that RESUMEs from results/gpu/run-* names that folder in the call's carry). Never
# commit between `drop` and `restore`: the commit would delete those folders from the repository.
# `drop` refuses to run with staged changes for the same reason.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PATHS=(pretrained data/corpus results bench/results)
EXCLUDE=.git/info/exclude
mib() {  # the bytes of the NUL-separated files on stdin (each once), in MiB
  sort -zu | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {s += $1} END {printf "%.1f MiB", s / 1048576}'
}
size() {  # tracked files plus untracked, not ignored ones: what the device tool carries
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | mib; echo
}
case "${1:-}" in
  drop)
    if ! git diff --cached --quiet; then echo "device_tree: staged changes; commit or unstage them first" >&2; exit 1; fi
    git rm -r -q --cached "${PATHS[@]}"
    for p in "${PATHS[@]}"; do echo "/$p/" >> "$EXCLUDE"; done
    echo "dropped ${PATHS[*]} from the index (files kept); carry now $(size); restore before any commit" ;;
  restore)
    git reset -q HEAD -- "${PATHS[@]}"
    for p in "${PATHS[@]}"; do [ -f "$EXCLUDE" ] && sed -i "\|^/$p/\$|d" "$EXCLUDE"; done
    echo "restored ${PATHS[*]}; carry $(size)" ;;
  size) size ;;
  estimate)  # what a call would carry after `drop`, with the paths given as its carry (nothing changes)
    shift
    { git ls-files -z -- . $(printf ":(exclude)%s " "${PATHS[@]}"); git ls-files -z --others --exclude-standard;
      [ $# -gt 0 ] && find "$@" -type f -print0; } | mib; echo " (the limit: 64 MiB)" ;;
  *) sed -n '5,8p' "$0"; exit 2 ;;
esac
