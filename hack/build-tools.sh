#!/usr/bin/env bash
# Builds the tool binaries the dev stack and the tests run (kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl, etcd, kwok, helm) from the Go
# modules under hack/tools, into a cache directory keyed by version. A binary
# that already exists is never rebuilt: the first build takes ~10 minutes on two
# cores, later ones take none.
#
# Usage: hack/build-tools.sh [dev]
#   dev: only what the dev stack runs (kube-apiserver, kube-controller-manager,
#        kube-scheduler, etcd, kwok), so `make dev` on a fresh machine starts
#        sooner; without an argument every tool, including kubectl,
#        golangci-lint and helm.
#
# The flags here (-trimpath, CGO_ENABLED=0) are the Makefile's for crucible and
# its tests, and hack/tools/kube pins the dependencies it shares with crucible
# (client-go, apimachinery, golang.org/x/..., protobuf, prometheus) at crucible's
# versions: with the same flags and versions, Go's build cache compiles those
# packages once for both.
set -euo pipefail
export CGO_ENABLED="${CGO_ENABLED:-0}"

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${CRUCIBLE_TOOLS_DIR:-$root/bin}"

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
GOLANGCI_VERSION=v2.15.0
HELM_VERSION=v3.22.0
KUEUE_VERSION=v0.17.0

stamp() {
  local v=$1 minor
  minor=$(echo "$v" | cut -d. -f2)
  local flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

build() { # build MODULE_DIR DEST PACKAGE LDFLAGS
  local dir=$1 dest=$2 pkg=$3 ldflags=$4
  if [[ -x "$dest" ]]; then
    echo "tools: $(basename "$dest") $(basename "$(dirname "$dest")") cached"
    return
  fi
  mkdir -p "$(dirname "$dest")"
  echo "tools: building $(basename "$dest") $(basename "$(dirname "$dest")") (first time only, this takes minutes)..."
  local start=$SECONDS
  (cd "$root/hack/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$dest.tmp" "$pkg")
  mv "$dest.tmp" "$dest"
  echo "tools: built $(basename "$dest") in $((SECONDS - start))s"
}

case "${1:-all}" in
dev | all) ;;
*)
  echo "usage: $0 [dev]" >&2
  exit 2
  ;;
esac

k8s="$out/k8s-$K8S_VERSION"
build kube "$k8s/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$(stamp $K8S_VERSION)"
build kube "$k8s/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager "$(stamp $K8S_VERSION)"
build kube "$k8s/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler "$(stamp $K8S_VERSION)"
build etcd "$out/etcd-$ETCD_VERSION/etcd" . "-s -w"
build kwok "$out/kwok-$KWOK_VERSION/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
if [[ "${1:-all}" == dev ]]; then
  exit 0
fi
build kube "$k8s/kubectl" k8s.io/kubernetes/cmd/kubectl "$(stamp $K8S_VERSION)"
build golangci "$out/golangci-lint-$GOLANGCI_VERSION/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint "-s -w"
build helm "$out/helm-$HELM_VERSION/helm" helm.sh/helm/v3/cmd/helm "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
# Kueue for the interop test (make interop): MultiKueue through crucible's federation.
build kueue "$out/kueue-$KUEUE_VERSION/kueue" sigs.k8s.io/kueue/cmd/kueue "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
