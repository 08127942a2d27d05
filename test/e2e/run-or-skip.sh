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
# make test's e2e step: the stories on the real node (make e2e) where this machine can run one.
# Where it cannot (not root, the packages cannot be installed, another node runs), it says so
# loudly, with the reason, and make test goes on; a story that fails fails make test.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
assets="${KUBEBUILDER_ASSETS:?KUBEBUILDER_ASSETS must name the envtest binaries directory}"

skip() {
  echo "################################################################################"
  echo "## E2E SKIPPED: the stories on the real node did not run on this machine:"
  echo "##   $1"
  echo "################################################################################"
  exit 0
}

[[ $(id -u) -eq 0 ]] || skip "not root (kubelet mounts volumes and runs containers)"
bash test/e2e/install-node-packages.sh || skip "containerd, runc or the CNI plugins are missing and could not be installed from Debian"
NODE=1 KUBE_VERSION="$(basename "${assets}")" bash hack/envtest-binaries.sh >/dev/null || exit 1
(cd test/e2e && go build -o ../../bin/e2e .) || exit 1
if ! why=$(KUBEBUILDER_ASSETS="${assets}" bin/e2e -check 2>&1); then
  skip "${why}"
fi
KUBEBUILDER_ASSETS="${assets}" bin/e2e
