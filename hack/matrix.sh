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
# make matrix: the integration tier and the real-node stories on each Kubernetes version given
# (make matrix MATRIX_VERSIONS="1.35.4 1.36.3 1.37.2"), one after the other, each with its own
# binaries built from the module proxy into bin/envtest/<version> (cached). Each tier's output
# goes to bin/matrix/<version>-<tier>.log; a summary table follows, with each run's time and the
# figures the real-node stories print. A tier that fails, or a node that cannot run (make e2e
# fails loudly where make test's e2e step would skip), fails the matrix: no skip counts as a pass.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -gt 0 ]] || { echo "usage: hack/matrix.sh VERSION..." >&2; exit 2; }
mkdir -p bin/matrix
failed=0
summary=()
for v in "$@"; do
  for tier in integration e2e; do
    log="bin/matrix/${v}-${tier}.log"
    echo "== matrix: Kubernetes ${v}, ${tier} (log: ${log})"
    start=$(date +%s)
    if make --no-print-directory "${tier}" KUBE_VERSION="${v}" >"${log}" 2>&1; then
      result=passed
    else
      result=FAILED; failed=1
      tail -n 30 "${log}"
    fi
    secs=$(( $(date +%s) - start ))
    echo "== matrix: Kubernetes ${v}, ${tier}: ${result} in ${secs}s"
    summary+=("| ${v} | ${tier} | ${result} | ${secs} s |")
  done
done
echo
echo "| Kubernetes | tier | result | time |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${summary[@]}"
echo
echo "The real-node stories' results and figures, per version (the table make e2e prints last):"
for v in "$@"; do
  echo "-- Kubernetes ${v}"
  sed -n '/^story  *result  *detail/,$p' "bin/matrix/${v}-e2e.log" 2>/dev/null | grep -v '^make' | sed 's/^/   /'
done
exit "${failed}"
