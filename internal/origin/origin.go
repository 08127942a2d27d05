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

// Package origin is what the manager writes on a CertificateRequest about its origin, for an
// approver to check (package approval documents it): the annotations' keys, and the UID of the
// pod's service account read from the pod's tokens. It imports nothing of the library, so that
// a driver does not link the approver's checks, and approval does not link the CSI types.
package origin

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// The annotations' keys, as package approval exports them (its test pins them equal).
const (
	NodeNameAnnotationKey             = "csi.cert-manager.io/node-name"
	PodNamespaceAnnotationKey         = "csi.cert-manager.io/pod-namespace"
	PodNameAnnotationKey              = "csi.cert-manager.io/pod-name"
	PodUIDAnnotationKey               = "csi.cert-manager.io/pod-uid"
	PodServiceAccountAnnotationKey    = "csi.cert-manager.io/pod-service-account"
	PodServiceAccountUIDAnnotationKey = "csi.cert-manager.io/pod-service-account-uid"
)

// The volume-context keys kubelet sets that ServiceAccountUID reads, as package metadata names
// them (this package does not import it: metadata brings the CSI spec's gRPC types).
const (
	saTokensKey     = "csi.storage.k8s.io/serviceAccount.tokens"
	podNamespaceKey = "csi.storage.k8s.io/pod.namespace"
	podUIDKey       = "csi.storage.k8s.io/pod.uid"
	saNameKey       = "csi.storage.k8s.io/serviceAccount.name"
)

// ServiceAccountUID returns the UID of the pod's service account as the pod's tokens in a
// volume context say it (kubelet passes them, under metadata.SATokenVolumeContextKey, when the
// CSIDriver object has tokenRequests), or "" when the context has no token, a token does not
// decode, or the tokens name another namespace, service account or pod than the context's
// pod-info keys. The tokens are read, not verified: the UID is a claim the request carries, which
// the admission policy compares with the credential's when the request is created with that token.
func ServiceAccountUID(volumeContext map[string]string) string {
	raw, ok := volumeContext[saTokensKey]
	if !ok {
		return ""
	}
	var tokens map[string]struct {
		Token string `json:"token"`
	}
	if json.Unmarshal([]byte(raw), &tokens) != nil || len(tokens) == 0 {
		return ""
	}
	uid := ""
	for _, audience := range slices.Sorted(maps.Keys(tokens)) {
		c, ok := claimsOf(tokens[audience].Token)
		if !ok || c.Namespace != volumeContext[podNamespaceKey] ||
			c.ServiceAccount.Name != volumeContext[saNameKey] ||
			(c.Pod.UID != "" && c.Pod.UID != volumeContext[podUIDKey]) ||
			c.ServiceAccount.UID == "" || (uid != "" && uid != c.ServiceAccount.UID) {
			return ""
		}
		uid = c.ServiceAccount.UID
	}
	return uid
}

// tokenClaims are the claims of a Kubernetes service account token that name its holder.
type tokenClaims struct {
	Namespace      string `json:"namespace"`
	ServiceAccount struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"serviceaccount"`
	Pod struct {
		UID string `json:"uid"`
	} `json:"pod"`
}

// claimsOf decodes the kubernetes.io claims of a JWT's payload, without verifying it.
func claimsOf(jwt string) (tokenClaims, bool) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return tokenClaims{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return tokenClaims{}, false
	}
	var claims struct {
		K8s tokenClaims `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return tokenClaims{}, false
	}
	return claims.K8s, true
}
