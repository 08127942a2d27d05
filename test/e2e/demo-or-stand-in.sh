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
# make demo: the demo's stories on the real node (test/e2e -demo) where this machine can run one,
# otherwise with hack/demo's kubelet stand-in; it says which, and why. STAND_IN=1 forces the
# stand-in. Arguments are passed to whichever runs (--help lists its options).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
assets="${KUBEBUILDER_ASSETS:?KUBEBUILDER_ASSETS must name the envtest binaries directory}"


why=""
if [[ "${STAND_IN:-0}" == 1 ]]; then
  why="STAND_IN=1 asks for it"
elif [[ $(id -u) -ne 0 ]]; then
  why="no real node here: not root (kubelet mounts volumes and runs containers)"
elif ! bash test/e2e/install-node-packages.sh; then
  why="no real node here: containerd, runc or the CNI plugins are missing and could not be installed"
elif ! NODE=1 KUBE_VERSION="$(basename "${assets}")" bash hack/envtest-binaries.sh >/dev/null || ! (cd test/e2e && go build -o ../../bin/e2e .); then
  exit 1
elif ! check=$(KUBEBUILDER_ASSETS="${assets}" bin/e2e -check 2>&1); then
  why="${check}"
fi
if [[ -n "${why}" ]]; then
  echo "csi-lib demo with its kubelet stand-in: ${why}"
  cd hack && exec go run ./demo "$@"
fi
echo "csi-lib demo on a real node: kubelet $("${assets}/kubelet" --version 2>/dev/null | awk '{print $2}'), containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), Debian's CNI plugins"
echo "signer: cert-manager's own controllers ($(go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager): approver, CA issuer) from a CA Issuer; the outage story: the demo's own signer, which fails requests"
exec env KUBEBUILDER_ASSETS="${assets}" bin/e2e -demo -gate-pods 3 "$@"
