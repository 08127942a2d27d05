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

package metadata

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
)

// TestJSONBytesAreUpstreams pins json.Marshal output byte for byte: drivers' tests compare it.
func TestJSONBytesAreUpstreams(t *testing.T) {
	nit := time.Date(1970, 1, 3, 0, 0, 0, 0, time.UTC)
	nanos := time.Date(2024, 5, 1, 10, 20, 30, 123456789, time.UTC)
	zero := time.Time{}
	tests := []struct {
		name string
		meta Metadata
		want string
	}{
		{"empty", Metadata{}, `{"volumeID":"","targetPath":""}`},
		{"csi-driver's writer test", Metadata{
			VolumeID: "vol-id", TargetPath: "/target-path", NextIssuanceTime: &nit,
			VolumeContext: map[string]string{"csi.cert-manager.io/issuer-name": "ca-issuer"},
		}, `{"volumeID":"vol-id","targetPath":"/target-path","nextIssuanceTime":"1970-01-03T00:00:00Z","volumeContext":{"csi.cert-manager.io/issuer-name":"ca-issuer"}}`},
		{"nanoseconds, sorted keys, group", Metadata{
			VolumeID: "v", TargetPath: "/t", NextIssuanceTime: &nanos,
			VolumeContext: map[string]string{"b": "2", "a": "1"}, VolumeMountGroup: "2000",
		}, `{"volumeID":"v","targetPath":"/t","nextIssuanceTime":"2024-05-01T10:20:30.123456789Z","volumeContext":{"a":"1","b":"2"},"volumeMountGroup":"2000"}`},
		{"zero time is kept", Metadata{VolumeID: "v", NextIssuanceTime: &zero},
			`{"volumeID":"v","targetPath":"","nextIssuanceTime":"0001-01-01T00:00:00Z"}`},
		{"empty context omitted", Metadata{VolumeID: "v", VolumeContext: map[string]string{}},
			`{"volumeID":"v","targetPath":""}`},
		{"HTML escaping", Metadata{VolumeID: "v", TargetPath: "/a<b>&c"},
			`{"volumeID":"v","targetPath":"/a\u003cb\u003e\u0026c"}`},
		{"mounted is appended when true", Metadata{VolumeID: "v", TargetPath: "/t", Mounted: true},
			`{"volumeID":"v","targetPath":"/t","mounted":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.meta)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("json.Marshal =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// TestJSONRoundTripIsLossless: the type's own decoding applies no legacy rule (that is the
// Filesystem store's), so what goes in comes out.
func TestJSONRoundTripIsLossless(t *testing.T) {
	nit := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []Metadata{
		{VolumeID: "a", NextIssuanceTime: &nit},
		{VolumeID: "a", NextIssuanceTime: &nit, Mounted: true},
		{VolumeID: "a", Mounted: true},
		{VolumeID: "a"},
	} {
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Metadata
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Errorf("round trip of %s gave %+v, want %+v", raw, back, m)
		}
	}
}

func TestFromNodePublishVolumeRequest(t *testing.T) {
	req := &csi.NodePublishVolumeRequest{
		VolumeId:      "vol-1",
		TargetPath:    "/target",
		VolumeContext: map[string]string{"a": "b"},
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{
			Mount: &csi.VolumeCapability_MountVolume{VolumeMountGroup: "3000"},
		}},
	}
	m := FromNodePublishVolumeRequest(req)
	if m.VolumeID != "vol-1" || m.TargetPath != "/target" || m.VolumeContext["a"] != "b" || m.VolumeMountGroup != "3000" {
		t.Errorf("unexpected %+v", m)
	}
	if m.NextIssuanceTime != nil || m.Mounted {
		t.Errorf("new metadata must be unissued and unmounted: %+v", m)
	}
	// Upstream uses the request's own map, not a copy.
	req.VolumeContext["a"] = "changed"
	if m.VolumeContext["a"] != "changed" {
		t.Error("volume context was copied; upstream shares the request's map")
	}
}

func TestMarshalLogReturnsMetadata(t *testing.T) {
	plain := Metadata{VolumeID: "v", VolumeContext: map[string]string{"csi.storage.k8s.io/pod.name": "p"}}
	got, ok := plain.MarshalLog().(Metadata)
	if !ok {
		t.Fatalf("MarshalLog returned %T, want metadata.Metadata", plain.MarshalLog())
	}
	if reflect.ValueOf(got.VolumeContext).Pointer() != reflect.ValueOf(plain.VolumeContext).Pointer() {
		t.Error("without a token MarshalLog must return the receiver's own map")
	}

	withToken := Metadata{VolumeID: "v", VolumeContext: map[string]string{SATokenVolumeContextKey: "secret", "x": "y"}}
	got = withToken.MarshalLog().(Metadata)
	want := map[string]string{SATokenVolumeContextKey: Redacted, "x": "y"}
	if !reflect.DeepEqual(got.VolumeContext, want) {
		t.Errorf("redacted context = %v, want %v", got.VolumeContext, want)
	}
	if withToken.VolumeContext[SATokenVolumeContextKey] != "secret" {
		t.Error("MarshalLog modified the original map")
	}
}

func TestMarshalLogRedactsToken(t *testing.T) {
	const secret = "eyJhbGciOiJSUzI1NiJ9.super-secret-token"
	var out strings.Builder
	log := funcr.NewJSON(func(obj string) { out.WriteString(obj) }, funcr.Options{})
	m := Metadata{VolumeID: "v", VolumeContext: map[string]string{
		SATokenVolumeContextKey:       `{"":{"token":"` + secret + `"}}`,
		"csi.storage.k8s.io/pod.name": "pod-a",
	}}
	log.Info("publishing", "metadata", m)
	if strings.Contains(out.String(), secret) {
		t.Fatalf("token reached the log sink: %s", out.String())
	}
	if !strings.Contains(out.String(), Redacted) || !strings.Contains(out.String(), "pod-a") {
		t.Fatalf("expected redacted token and other context in %s", out.String())
	}
}
