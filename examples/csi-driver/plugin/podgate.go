/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package plugin

import (
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/cert-manager/csi-lib/metadata"
)

// PodIPGate returns the readiness gate of Config.GateOnPodIP (manager.Options.ReadyToRequest):
// "not yet" until the volume's pod, as the lister sees it, has an IP. It is the gate of this
// fork's first fix as a driver writes it.
func PodIPGate(pods corev1listers.PodLister) func(metadata.Metadata) (bool, string) {
	return func(meta metadata.Metadata) (bool, string) {
		pod, err := pods.Pods(meta.VolumeContext[metadata.PodNamespaceVolumeContextKey]).Get(meta.VolumeContext[metadata.PodNameVolumeContextKey])
		if err != nil {
			return false, "pod not found"
		}
		if pod.Status.PodIP == "" {
			return false, "pod has no IP yet"
		}
		return true, ""
	}
}
