#!/usr/bin/env bash
# Builds the components around topogang from Go modules, once, into a cache of their own next to
# the control plane's (so adding or bumping one never rebuilds Kubernetes):
#
#   ${TOPOGANG_CACHE:-~/.cache/topogang}/components/<key>/
#       bin/jobset-controller     sigs.k8s.io/jobset                       (JOBSET_VERSION)
#       bin/lws-controller        sigs.k8s.io/lws/cmd                      (LWS_VERSION)
#       bin/training-operator     github.com/kubeflow/training-operator/cmd/training-operator.v1
#       bin/trainer-controller-manager  github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
#       bin/kueue                 sigs.k8s.io/kueue/cmd/kueue              (KUEUE_VERSION)
#       bin/helm                  helm.sh/helm/v4/cmd/helm                 (HELM_VERSION)
#       crds/<component>/*.yaml   the CustomResourceDefinitions each module ships
#       webhooks/<component>.yaml the webhook configurations each module ships (the e2e harness
#                                 points them at the controller on 127.0.0.1)
#       .stamp                    written last; a directory without it is never used
#
# Same pattern as build.sh (the shared part is cache.sh): versions in versions.env, <key> made of
# them, the platform and RECIPE, a temporary directory renamed into place only after every binary
# ran, one build per key at a time. With the cache present this only checks the stamp.
#
# Usage: build-components.sh              build if needed, then print where they are
#        build-components.sh --print-dir  print the cache directory (built or not)
#        build-components.sh --check      exit 0 if built, 1 if not
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

RECIPE=2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/versions.env"
for v in JOBSET_VERSION LWS_VERSION TRAINING_OPERATOR_VERSION TRAINER_VERSION KUEUE_VERSION HELM_VERSION; do
  [[ -n "${!v:-}" ]] || { echo "versions.env must set $v" >&2; exit 1; }
done

cache_root=${TOPOGANG_CACHE:-$HOME/.cache/topogang}/components
key="jobset-${JOBSET_VERSION}_lws-${LWS_VERSION}_to-${TRAINING_OPERATOR_VERSION}_trainer-${TRAINER_VERSION}_kueue-${KUEUE_VERSION}_helm-${HELM_VERSION}_$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)_r${RECIPE}"
dest="$cache_root/$key"
binaries=(jobset-controller lws-controller training-operator trainer-controller-manager kueue helm)
crd_sets=(jobset lws training-operator trainer kueue)

is_built() {
  [[ -f "$dest/.stamp" ]] || return 1
  local b
  for b in "${binaries[@]}"; do [[ -x "$dest/bin/$b" ]] || return 1; done
  for b in "${crd_sets[@]}"; do compgen -G "$dest/crds/$b/*.yaml" >/dev/null || return 1; done
  for b in jobset lws trainer kueue; do [[ -f "$dest/webhooks/$b.yaml" ]] || return 1; done
}

case "${1:-}" in
  --print-dir) echo "$dest"; exit 0 ;;
  --check) is_built; exit ;;
  "") ;;
  *) echo "usage: $0 [--print-dir|--check]" >&2; exit 2 ;;
esac

if is_built; then
  echo "components are built: $dest ($(sed -n 's/^built=//p' "$dest/.stamp"))"
  exit 0
fi

source "$here/cache.sh"
cache_begin build-components.sh
mkdir -p "$tmp/bin" "$tmp/src" "$tmp/crds" "$tmp/webhooks"
echo "building the components ($key) into $dest"
echo "  $(go version); GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)"

# Builds PACKAGE (inside MODULE@VERSION) as bin/NAME from a wrapper module that requires only
# MODULE@VERSION, so every dependency is at the version MODULE's own go.mod asks for. None of
# these modules has replace directives (checked: the wrapper fails to build if one is needed).
build_one() {
  local name=$1 module=$2 version=$3 package=$4 ldflags=${5:-}
  local dir="$tmp/src/$name"
  mkdir -p "$dir"
  (
    cd "$dir"
    quietly go mod init "topogang.local/components/$name"
    quietly go get "$package@$version"
    go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp/bin/$name" "$package"
  )
  echo "  $name: $module $version done after $(($(date +%s) - start))s"
}

module_dir() {
  (cd "$tmp" && go mod download -json "$1@$2") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

# Copies the CRD files of MODULE@VERSION's directory SUBDIR into crds/SET/.
copy_crds() {
  local set=$1 module=$2 version=$3 subdir=$4 dir
  dir=$(module_dir "$module" "$version")
  mkdir -p "$tmp/crds/$set"
  local f
  for f in "$dir/$subdir"/*.yaml; do
    [[ $(basename "$f") == kustomization.yaml ]] && continue
    install -m 0644 "$f" "$tmp/crds/$set/"
  done
}

build_one helm helm.sh/helm/v4 "$HELM_VERSION" helm.sh/helm/v4/cmd/helm \
  "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
build_one jobset-controller sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
copy_crds jobset sigs.k8s.io/jobset "$JOBSET_VERSION" config/components/crd/bases
install -m 0644 "$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")/config/components/webhook/manifests.yaml" "$tmp/webhooks/jobset.yaml"
build_one lws-controller sigs.k8s.io/lws "$LWS_VERSION" sigs.k8s.io/lws/cmd
copy_crds lws sigs.k8s.io/lws "$LWS_VERSION" config/crd/bases
install -m 0644 "$(module_dir sigs.k8s.io/lws "$LWS_VERSION")/config/webhook/manifests.yaml" "$tmp/webhooks/lws.yaml"
build_one training-operator github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION" \
  github.com/kubeflow/training-operator/cmd/training-operator.v1
copy_crds training-operator github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION" manifests/base/crds
build_one trainer-controller-manager github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" \
  github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
copy_crds trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" manifests/base/crds
install -m 0644 "$(module_dir github.com/kubeflow/trainer/v2 "$TRAINER_VERSION")/manifests/base/webhook/manifests.yaml" "$tmp/webhooks/trainer.yaml"
build_one kueue sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue \
  "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
copy_crds kueue sigs.k8s.io/kueue "$KUEUE_VERSION" config/components/crd/bases
install -m 0644 "$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")/config/components/webhook/manifests.yaml" "$tmp/webhooks/kueue.yaml"

"$tmp/bin/helm" version --short
for b in jobset-controller lws-controller training-operator trainer-controller-manager kueue; do
  "$tmp/bin/$b" --help >/dev/null 2>&1 || { echo "build-components.sh: $b --help failed" >&2; exit 1; }
done
seconds=$(($(date +%s) - start))
{
  echo "key=$key"
  echo "jobset=$JOBSET_VERSION"
  echo "lws=$LWS_VERSION"
  echo "training-operator=$TRAINING_OPERATOR_VERSION"
  echo "trainer=$TRAINER_VERSION"
  echo "kueue=$KUEUE_VERSION"
  echo "helm=$HELM_VERSION"
  echo "go=$(go env GOVERSION)"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) in ${seconds}s"
} >"$tmp/.stamp"
cache_finish
