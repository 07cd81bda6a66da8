# Shared by build.sh and build-components.sh (sourced, not run): the cache discipline both
# follow, so a change to it is made once.
#
# A build goes into ${cache_root}/.tmp-<key>.XXXXXX and is renamed to ${dest} only after the
# caller checked every binary and wrote the stamp; one build per key runs at a time (flock on
# ${cache_root}/.lock-<key>), and a second caller waits for it and then finds the stamp.
#
# The caller sets: cache_root, key, dest, and defines is_built (true when ${dest} is complete).
# shellcheck shell=bash disable=SC2154  # cache_root, key and dest come from the caller

# cache_begin NAME: takes the lock (waiting at most an hour), exits 0 if the build appeared
# meanwhile, clears what killed builds left, and sets tmp (removed on exit unless cache_finish
# moved it into place) and start. NAME prefixes messages ("build.sh").
cache_begin() {
  local name=$1 stale
  command -v go >/dev/null || { echo "$name: needs the go command (Go >= 1.26)" >&2; exit 1; }
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.lock-$key"
  if ! flock -n 9; then
    echo "waiting (at most an hour) for another build of $key to finish ..."
    flock -w 3600 9 || { echo "$name: gave up waiting for the other build" >&2; exit 1; }
  fi
  if is_built; then
    echo "built meanwhile by another run: $dest"
    exit 0
  fi
  # A directory without a stamp can only be left over by hand; never trust it. Temporary
  # directories of builds that were killed (we hold the lock, so none is running) go too.
  rm -rf "$dest"
  for stale in "$cache_root/.tmp-$key".*; do
    [[ -e "$stale" ]] || continue
    chmod -R u+w "$stale" 2>/dev/null || true
    rm -rf "$stale"
  done
  tmp=$(mktemp -d "$cache_root/.tmp-$key.XXXXXX")
  # Go's module cache is read-only: make it writable so the trap can remove it.
  trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
  export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  start=$(date +%s)
  _cache_name=$name
}

# quietly CMD...: runs CMD with its (long) output in a log file, shown only when it fails.
quietly() {
  local log
  log="$tmp/go-$(date +%s%N).log"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "$_cache_name: failed: $*" >&2
    exit 1
  fi
  rm -f "$log"
}

# cache_finish: moves the checked and stamped ${tmp} into place as ${dest}.
cache_finish() {
  local seconds=$(($(date +%s) - start))
  [[ -f "$tmp/.stamp" ]] || { echo "$_cache_name: no stamp written; not moving $tmp into place" >&2; exit 1; }
  chmod -R u+w,go-w "$tmp"
  chmod 755 "$tmp"
  mv -T "$tmp" "$dest"
  trap - EXIT
  echo "built: $dest"
  echo "cold build took $((seconds / 60))m$((seconds % 60))s"
}
