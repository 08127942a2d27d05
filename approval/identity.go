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

package approval

import "github.com/cert-manager/csi-lib/internal/origin"

// ServiceAccountUIDOf returns the UID of the pod's service account as the pod's tokens in a
// volume context say it (kubelet passes them, under metadata.SATokenVolumeContextKey, when the
// CSIDriver object has tokenRequests), or "" when the context has no token, a token does not
// decode, or the tokens name another namespace, service account or pod than the context's
// pod-info keys. The tokens are read, not verified: the UID is a claim the request carries, which
// the admission policy compares with the credential's when the request is created with that token.
// The manager puts it in PodServiceAccountUIDAnnotationKey.
func ServiceAccountUIDOf(volumeContext map[string]string) string {
	return origin.ServiceAccountUID(volumeContext)
}
