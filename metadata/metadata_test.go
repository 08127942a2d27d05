package metadata

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
)

func TestDecodeMountedRule(t *testing.T) {
	tests := []struct {
		name        string
		json        string
		wantMounted bool
	}{
		{"legacy with next issuance time", `{"volumeID":"a","targetPath":"/t","nextIssuanceTime":"2024-01-01T00:00:00Z"}`, true},
		{"legacy without next issuance time", `{"volumeID":"a","targetPath":"/t"}`, false},
		{"explicit false wins over issuance time", `{"volumeID":"a","targetPath":"/t","nextIssuanceTime":"2024-01-01T00:00:00Z","mounted":false}`, false},
		{"explicit true without issuance time", `{"volumeID":"a","targetPath":"/t","mounted":true}`, true},
		{"null counts as absent", `{"volumeID":"a","targetPath":"/t","mounted":null}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Metadata
			if err := json.Unmarshal([]byte(tc.json), &m); err != nil {
				t.Fatal(err)
			}
			if m.Mounted != tc.wantMounted {
				t.Errorf("Mounted = %v, want %v", m.Mounted, tc.wantMounted)
			}
			if m.VolumeID != "a" || m.TargetPath != "/t" {
				t.Errorf("other fields not decoded: %+v", m)
			}
		})
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	var m Metadata
	if err := json.Unmarshal([]byte(`{"volumeID":`), &m); err == nil {
		t.Fatal("expected an error for truncated JSON")
	}
	if err := json.Unmarshal([]byte(`{"mounted":"yes"}`), &m); err == nil {
		t.Fatal("expected an error for a non-boolean mounted")
	}
}

func TestUpstreamFiles(t *testing.T) {
	tests := []struct {
		file        string
		wantMounted bool
		wantNIT     bool
		wantGroup   string
	}{
		{"testdata/upstream-issued.json", true, true, ""},
		{"testdata/upstream-never-issued.json", false, false, "2000"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var m Metadata
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if m.Mounted != tc.wantMounted || (m.NextIssuanceTime != nil) != tc.wantNIT || m.VolumeMountGroup != tc.wantGroup {
				t.Errorf("decoded %+v", m)
			}
			if m.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" {
				t.Errorf("volume context not decoded: %v", m.VolumeContext)
			}
		})
	}
}

func TestMountedAlwaysWritten(t *testing.T) {
	raw, err := json.Marshal(Metadata{VolumeID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"mounted":false`) {
		t.Fatalf("mounted key missing from %s", raw)
	}
	// A round trip keeps an explicit false even with an issuance time set.
	nit := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	raw, _ = json.Marshal(Metadata{VolumeID: "a", NextIssuanceTime: &nit})
	var back Metadata
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Mounted {
		t.Fatal("round trip turned mounted on")
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
	if !strings.Contains(m.VolumeContext[SATokenVolumeContextKey], secret) {
		t.Fatal("MarshalLog modified the original metadata")
	}
}
