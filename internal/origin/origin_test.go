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

package origin

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/cert-manager/csi-lib/metadata"
)

// jwt is an unsigned token whose payload names namespace ns, service account sa (uid saUID) and
// pod uid podUID, as the apiserver's bound tokens do.
func jwt(t *testing.T, ns, sa, saUID, podUID string) string {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"kubernetes.io": map[string]any{
		"namespace":      ns,
		"serviceaccount": map[string]string{"name": sa, "uid": saUID},
		"pod":            map[string]string{"name": "app", "uid": podUID},
	}})
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(payload) + ".c2ln"
}

func tokens(t *testing.T, byAudience map[string]string) string {
	t.Helper()
	m := map[string]map[string]string{}
	for aud, tok := range byAudience {
		m[aud] = map[string]string{"token": tok, "expirationTimestamp": "2026-01-01T00:00:00Z"}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestServiceAccountUID: the UID is read from the pod's tokens only where they name the
// volume context's pod and service account, and agree.
func TestServiceAccountUID(t *testing.T) {
	for key, want := range map[string]string{
		saTokensKey: metadata.SATokenVolumeContextKey, podNamespaceKey: metadata.PodNamespaceVolumeContextKey,
		podUIDKey: metadata.PodUIDVolumeContextKey, saNameKey: metadata.ServiceAccountNameVolumeContextKey,
	} {
		if key != want {
			t.Errorf("key %q is metadata's %q", key, want)
		}
	}
	ctx := func(tok string) map[string]string {
		return map[string]string{
			metadata.PodNamespaceVolumeContextKey: "ns", metadata.PodUIDVolumeContextKey: "pod-uid",
			metadata.ServiceAccountNameVolumeContextKey: "app", metadata.SATokenVolumeContextKey: tok,
		}
	}
	good := jwt(t, "ns", "app", "sa-uid", "pod-uid")
	for _, tc := range []struct {
		name    string
		context map[string]string
		want    string
	}{
		{"the pod's token", ctx(tokens(t, map[string]string{"": good})), "sa-uid"},
		{"two audiences agreeing", ctx(tokens(t, map[string]string{"": good, "vault": good})), "sa-uid"},
		{"two audiences disagreeing", ctx(tokens(t, map[string]string{"": good, "vault": jwt(t, "ns", "app", "other", "pod-uid")})), ""},
		{"no token", map[string]string{metadata.ServiceAccountNameVolumeContextKey: "app"}, ""},
		{"another service account's token", ctx(tokens(t, map[string]string{"": jwt(t, "ns", "admin", "sa-uid", "pod-uid")})), ""},
		{"another namespace's token", ctx(tokens(t, map[string]string{"": jwt(t, "kube-system", "app", "sa-uid", "pod-uid")})), ""},
		{"another pod's token", ctx(tokens(t, map[string]string{"": jwt(t, "ns", "app", "sa-uid", "other-pod")})), ""},
		{"a token without a uid", ctx(tokens(t, map[string]string{"": jwt(t, "ns", "app", "", "pod-uid")})), ""},
		{"a token that is not a JWT", ctx(tokens(t, map[string]string{"": "opaque"})), ""},
		{"tokens that are not JSON", ctx("{"), ""},
	} {
		if got := ServiceAccountUID(tc.context); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
