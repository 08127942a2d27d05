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
# Installs what the real node (test/e2e) needs from Debian when it is missing: containerd, runc
# and the CNI plugins. Needs root; installs nothing when everything is there.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=(containernetworking-plugins)
command -v ip >/dev/null || missing+=(iproute2)
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "node packages: containerd, runc and the CNI plugins are installed" >&2
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "node packages: ${missing[*]} missing, and installing them needs root" >&2
  exit 2
fi
start=$(date +%s)
echo "node packages: installing ${missing[*]} from Debian" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "node packages: installed in $(( $(date +%s) - start ))s" >&2
