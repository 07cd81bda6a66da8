#!/usr/bin/env bash
# `make e2e-kind`: the e2e scenarios of `make test` (e2e/test_extender.py) on a kind cluster with
# topogang deployed from manifests/ and kube-scheduler configured from scheduler-config/ - the
# path a person takes on a real cluster. Needs Docker and Go; CI cannot run it.
#
#   make e2e-kind                            # create or reuse the cluster, build, deploy, test
#   make e2e-kind PYTEST_ARGS="-k story"     # arguments for pytest
#   KIND_CLUSTER_NAME=x WORKER_GPUS=0 make e2e-kind
#   ~/.cache/topogang/kind/v0.33.0/bin/kind delete cluster --name topogang-e2e   # when done
#
# Steps: kind (pinned) into the cache; a cluster from e2e/kind/cluster.yaml with a plain
# scheduler configuration; kwok (the version of e2e/controlplane/versions.env) from its release
# manifests, for the fake GPU nodes the scenarios create; cert-manager (pinned) for
# manifests/tls.yaml; fake GPUs on the real workers; the image built and loaded; e2e/kind
# (manifests/ with the pinned Service address) applied; once topogang is Ready, kube-scheduler's
# client certificate copied into the node and kube-scheduler switched to
# scheduler-config/extender.yaml pointed at topogang over mTLS;
# then pytest with TOPOGANG_E2E_KUBECONFIG, which runs the scenarios against this cluster and
# skips the tests that need the local control plane (marker controlplane_only).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

KIND_VERSION=v0.33.0   # sigs.k8s.io/kind; cluster.yaml pins the node image of this release
# shellcheck source=e2e/controlplane/versions.env
source e2e/controlplane/versions.env   # KWOK_VERSION
CLUSTER=${KIND_CLUSTER_NAME:-topogang-e2e}
IMAGE=topogang:e2e     # the tag e2e/kind/kustomization.yaml deploys
WORKER_GPUS=${WORKER_GPUS:-8}
KWOK_RELEASE=https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION
CERT_MANAGER_VERSION=v1.21.1   # the version of e2e/crds/cert-manager/, which test_manifests.py uses
SERVICE_DNS=topogang.topogang-system.svc   # a name in topogang's serving certificate
STATE=.cache/kind      # the kubeconfig, and the scheduler configuration mounted into the node
KIND_BIN=${TOPOGANG_CACHE:-$HOME/.cache/topogang}/kind/$KIND_VERSION/bin   # beside the control plane's
KIND=$KIND_BIN/kind
PYTHON=.venv/bin/python
CONFIG_DIR=$STATE/scheduler
CONFIG=$CONFIG_DIR/kube-scheduler-config.yaml   # /etc/kubernetes/topogang/... in the node

say() { printf '\n== %s\n' "$*"; }
die() { echo "e2e-kind: $*" >&2; exit 1; }

command -v docker >/dev/null || die "needs Docker (kind runs the nodes as containers)"
command -v go >/dev/null || die "needs Go, to install kind $KIND_VERSION"
[[ -x $PYTHON ]] || die "run 'make .venv/.installed' first"
KUBECTL=${KUBECTL:-$(command -v kubectl || true)}
if [[ -z $KUBECTL ]]; then
    KUBECTL="$(e2e/controlplane/build.sh --print-dir)/bin/kubectl"   # `make controlplane` builds one
fi
[[ -x $KUBECTL ]] || die "needs kubectl on PATH (or 'make controlplane')"
k() { "$KUBECTL" "$@"; }

if [[ ! -x $KIND ]]; then
    say "kind $KIND_VERSION"
    GOBIN=$KIND_BIN go install "sigs.k8s.io/kind@$KIND_VERSION"
fi

# The configuration kube-scheduler reads: "plain" (no extender), or "extender" = the shipped
# scheduler-config/extender.yaml with urlPrefix set to URL (an address: tlsConfig.serverName names
# the Service, as in scheduler-config/kubeadm); its tlsConfig files are the ones under
# $CONFIG_DIR/client, the node's /etc/kubernetes/topogang/client. Written next to the old file
# and renamed over it, so kube-scheduler never reads half a file.
write_scheduler_config() {
    mkdir -p "$CONFIG_DIR"
    "$PYTHON" - "$1" "${2:-}" "$SERVICE_DNS" > "$CONFIG.new" <<'EOF'
import sys

import yaml

from e2e.topogang import SHIPPED_CONFIG

mode, url, server_name = sys.argv[1:]
shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
if mode == "plain":
    doc = {key: shipped[key] for key in ("apiVersion", "kind", "clientConnection")}
else:
    doc = shipped
    doc["extenders"][0]["urlPrefix"] = url
    doc["extenders"][0]["tlsConfig"]["serverName"] = server_name
print(yaml.safe_dump(doc, sort_keys=False), end="")
EOF
    mv "$CONFIG.new" "$CONFIG"
}

# kube-scheduler reads its configuration at start: stop its container and the kubelet starts the
# static pod's container again; then wait until the new one answers /readyz.
restart_scheduler() {
    local node=$CLUSTER-control-plane old
    old=$(docker exec "$node" crictl ps --name kube-scheduler --quiet)
    docker exec "$node" crictl stop "$old" >/dev/null
    for _ in $(seq 120); do
        local now
        now=$(docker exec "$node" crictl ps --name kube-scheduler --quiet || true)
        if [[ -n $now && $now != "$old" ]] &&
            docker exec "$node" curl -fsk https://127.0.0.1:10259/readyz >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    die "kube-scheduler did not come back; docker exec $node crictl logs \$(crictl ps -a --name kube-scheduler -q | head -1)"
}

mkdir -p "$CONFIG_DIR"
say "cluster $CLUSTER"
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    write_scheduler_config plain
    "$KIND" create cluster --name "$CLUSTER" --config e2e/kind/cluster.yaml --wait 5m
fi
"$KIND" get kubeconfig --name "$CLUSTER" > "$STATE/kubeconfig"
export KUBECONFIG=$ROOT/$STATE/kubeconfig
# A cluster kept from an earlier run has topogang in its scheduling path; go back to the plain
# scheduler first, so topogang's own new pods below never depend on the build being replaced.
if grep -q extenders "$CONFIG" 2>/dev/null; then
    write_scheduler_config plain
    restart_scheduler
fi

say "kwok $KWOK_VERSION (fake GPU nodes for the scenarios)"
k apply --server-side -f "$KWOK_RELEASE/kwok.yaml"
k apply --server-side -f "$KWOK_RELEASE/stage-fast.yaml"
k -n kube-system rollout status deployment/kwok-controller --timeout=5m

say "cert-manager $CERT_MANAGER_VERSION (topogang's certificates, manifests/tls.yaml)"
k apply --server-side -f "https://github.com/cert-manager/cert-manager/releases/download/$CERT_MANAGER_VERSION/cert-manager.yaml"
for d in cert-manager cert-manager-cainjector cert-manager-webhook; do
    k -n cert-manager rollout status "deployment/$d" --timeout=5m
done

if ((WORKER_GPUS > 0)); then
    say "$WORKER_GPUS fake nvidia.com/gpu on each real worker"
    for node in $(k get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
        # Extended resources a device plugin does not manage are kept by the kubelet as patched.
        k patch "$node" --subresource=status --type=json \
            -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$WORKER_GPUS\"}]"
    done
fi

say "image $IMAGE"
docker build -t "$IMAGE" .
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

say "topogang (e2e/kind = manifests/ + the image + the Service at 10.96.0.88)"
existed=$(k -n topogang-system get deployment topogang --ignore-not-found -o name)
k apply --server-side -k e2e/kind
if [[ -n $existed ]]; then
    k -n topogang-system rollout restart deployment/topogang   # the same tag, a new image
fi
# Both replicas are Ready once synced (/synced); the Service has its one endpoint once the
# leader has labelled its pod scheduling.topogang.io/leader=true (manifests/service.yaml).
k -n topogang-system rollout status deployment/topogang --timeout=5m
leader_endpoints=""
for _ in $(seq 120); do
    leader_endpoints=$(k -n topogang-system get endpointslices -l kubernetes.io/service-name=topogang \
        -o jsonpath='{.items[*].endpoints[?(@.conditions.ready==true)].addresses[0]}')
    [[ $(wc -w <<<"$leader_endpoints") -eq 1 ]] && break
    sleep 1
done
[[ $(wc -w <<<"$leader_endpoints") -eq 1 ]] ||
    die "the topogang Service has no single leader endpoint (ready: '$leader_endpoints'); k -n topogang-system get pods -L scheduling.topogang.io/leader"

say "kube-scheduler with scheduler-config/extender.yaml, over mTLS"
k -n topogang-system wait --for=condition=Ready certificate/topogang-scheduler-client --timeout=5m
mkdir -p "$CONFIG_DIR/client"
for f in tls.crt tls.key ca.crt; do
    k -n topogang-system get secret topogang-scheduler-client -o jsonpath="{.data.${f//./\\.}}" |
        base64 -d > "$CONFIG_DIR/client/$f.new"
    mv "$CONFIG_DIR/client/$f.new" "$CONFIG_DIR/client/$f"
done
cluster_ip=$(k -n topogang-system get service topogang -o jsonpath='{.spec.clusterIP}')
write_scheduler_config extender "https://$cluster_ip:8888/topogang"
restart_scheduler

say "e2e scenarios"
# The real workers keep the scenarios' pods off them while pytest runs: the scenarios count the
# GPUs of the fake nodes they create. The pods already running there stay.
TAINT=e2e.topogang.io/scenarios-elsewhere
k taint nodes -l '!node-role.kubernetes.io/control-plane' "$TAINT=true:NoSchedule" --overwrite
trap 'k taint nodes -l "!node-role.kubernetes.io/control-plane" "$TAINT:NoSchedule-" >/dev/null || true' EXIT
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of arguments
TOPOGANG_E2E_KUBECONFIG=$KUBECONFIG .venv/bin/pytest e2e -m "not controlplane_only" ${PYTEST_ARGS:-}
echo "cluster $CLUSTER kept: KUBECONFIG=$KUBECONFIG; delete it with $KIND delete cluster --name $CLUSTER"
