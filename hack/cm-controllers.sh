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
# Builds cert-manager's own signing controllers (hack/cm-controllers: the approver, the CA issuer,
# Issuer and ClusterIssuer readiness) from the Go module proxy into bin/cm-controllers/<version>/,
# at the cert-manager version the library's go.mod requires. hack/cm-controllers/go.mod and go.sum
# pin that version and every dependency, and the build uses them as they are (-mod=readonly): the
# script fails if hack/cm-controllers/go.mod requires another cert-manager version than the
# library's go.mod. The module is built in a copy under bin/, so its dependencies never enter the
# library's module graph or the work tree. Cached by version: a second run finds the binary and
# returns at once.
#
# Prints the binary's path on the last line of stdout; progress goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
VERSION="$(go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)"
# Read from the file, not through go list, which would fetch another version's go.mod to answer.
PINNED="$(awk '$1 == "require" { $0 = substr($0, 9) } $1 == "github.com/cert-manager/cert-manager" { print $2 }' hack/cm-controllers/go.mod)"
if [[ "${PINNED}" != "${VERSION}" ]]; then
  echo "cert-manager controllers: hack/cm-controllers/go.mod requires cert-manager ${PINNED}, the library's go.mod ${VERSION}:" >&2
  echo "  move hack/cm-controllers/go.mod to ${VERSION} and tidy it:" >&2
  echo "  cd hack/cm-controllers && go get github.com/cert-manager/cert-manager@${VERSION} && go mod tidy" >&2
  exit 1
fi
OUT="${ROOT}/bin/cm-controllers/${VERSION}"
# The cache holds the binary of this main.go, go.mod and go.sum: a change to any is built again.
SUM="$(cat hack/cm-controllers/main.go hack/cm-controllers/go.mod hack/cm-controllers/go.sum | sha256sum | cut -d' ' -f1)"
if [[ -x "${OUT}/cm-controllers" && "$(cat "${OUT}/source.sha256" 2>/dev/null)" == "${SUM}" ]]; then
  echo "cert-manager controllers: cached in bin/cm-controllers/${VERSION}" >&2
  echo "${OUT}/cm-controllers"
  exit 0
fi

start=$(date +%s)
echo "cert-manager controllers: building ${VERSION} from the module proxy (several minutes the first time)" >&2
work="${ROOT}/bin/cm-controllers/build-${VERSION}"
rm -rf "${work}"
mkdir -p "${work}" "${OUT}"
cp hack/cm-controllers/main.go hack/cm-controllers/go.mod hack/cm-controllers/go.sum "${work}/"
(
  cd "${work}"
  export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
  go build -trimpath -o "${OUT}/cm-controllers.tmp" .
)
mv "${OUT}/cm-controllers.tmp" "${OUT}/cm-controllers"
echo "${SUM}" >"${OUT}/source.sha256"
rm -rf "${work}"
echo "cert-manager controllers: built in $(( $(date +%s) - start ))s" >&2
echo "${OUT}/cm-controllers"
