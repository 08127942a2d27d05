#!/usr/bin/env bash
# Copyright 2026 The csi-lib fork authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Builds kube-apiserver and etcd for envtest from the Go module proxy alone, into bin/envtest/<version>/;
# with NODE=1 also kubelet and kube-controller-manager for the real node (test/e2e), in the same build.
#
# setup-envtest downloads prebuilt release binaries, which CI cannot reach. Instead this script
# writes a throw-away wrapper module that requires k8s.io/kubernetes and replaces each of its
# staging modules (generated from kubernetes' own go.mod) with the published v0.x.y build, then
# builds cmd/kube-apiserver and etcd's server in one `go build`. The result is cached by version:
# a second run finds the binaries and returns at once.
#
# Prints the KUBEBUILDER_ASSETS directory on the last line of stdout; progress goes to stderr.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${ROOT}/bin/envtest/${KUBE_VERSION}"
STAGING_VERSION="v0.${KUBE_VERSION#1.}"

# Each binary: the name it has in bin/, the package it is built from, the name go build gives it.
binaries=("kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver" "etcd go.etcd.io/etcd/server/v3 server")
if [[ "${NODE:-0}" == 1 ]]; then
  binaries+=("kubelet k8s.io/kubernetes/cmd/kubelet kubelet"
    "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager"
    "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler")
fi
missing=()
for b in "${binaries[@]}"; do
  read -r name _ _ <<<"${b}"
  [[ -x "${OUT}/${name}" ]] || missing+=("${b}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "envtest binaries: cached in bin/envtest/${KUBE_VERSION} (build took 0s)" >&2
  echo "${OUT}"
  exit 0
fi

start=$(date +%s)
names=(); pkgs=()
for b in "${missing[@]}"; do
  read -r name p _ <<<"${b}"; names+=("${name}"); pkgs+=("${p}")
done
echo "envtest binaries: building ${names[*]} (Kubernetes v${KUBE_VERSION}, etcd ${ETCD_VERSION}) from the module proxy (several minutes the first time)" >&2
work="${ROOT}/bin/envtest/build-${KUBE_VERSION}"
rm -rf "${work}"
mkdir -p "${work}" "${OUT}"
cd "${work}"

export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
go mod init envtest-binaries >/dev/null 2>&1

# The staging modules that kubernetes replaces with ./staging/src/... are published as v0.x.y.
kgomod="$(go mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
{
  echo "require ("
  echo "	k8s.io/kubernetes v${KUBE_VERSION}"
  echo "	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}"
  echo ")"
  echo "replace ("
  grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "${kgomod}" \
    | awk '{print $1}' | grep -v '^k8s.io/sample-' \
    | while read -r m; do echo "	${m} => ${m} ${STAGING_VERSION}"; done
  echo ")"
} >> go.mod

ldflags="-s -w"
pkg=k8s.io/component-base/version
ldflags+=" -X ${pkg}.gitVersion=v${KUBE_VERSION} -X ${pkg}.gitMajor=${KUBE_VERSION%%.*}"
minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
ldflags+=" -X ${pkg}.gitMinor=${minor}"

CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${work}/out/" "${pkgs[@]}"
for b in "${missing[@]}"; do
  read -r name _ built <<<"${b}"
  mv "${work}/out/${built}" "${OUT}/${name}"
done
cd "${ROOT}"
rm -rf "${work}"
echo "envtest binaries: built ${names[*]} into bin/envtest/${KUBE_VERSION} in $(( $(date +%s) - start ))s" >&2
echo "${OUT}"
