package util

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/metadata"
)

func metaWithTokens(v string) metadata.Metadata {
	return metadata.Metadata{VolumeID: "v", VolumeContext: map[string]string{metadata.SATokenVolumeContextKey: v}}
}

func TestEmptyAudienceTokenFromMetadata(t *testing.T) {
	tests := []struct {
		name    string
		meta    metadata.Metadata
		want    string
		wantErr error
	}{
		{"missing key", metadata.Metadata{VolumeContext: map[string]string{}}, "", ErrNoTokens},
		{"bad JSON", metaWithTokens(`{"": {"token": "secret-abc"`), "", ErrMalformedTokens},
		{"wrong shape", metaWithTokens(`["secret-abc"]`), "", ErrMalformedTokens},
		{"no empty audience", metaWithTokens(`{"vault": {"token": "secret-abc"}}`), "", ErrNoEmptyAudienceToken},
		{"empty token", metaWithTokens(`{"": {"token": ""}}`), "", ErrNoEmptyAudienceToken},
		{"ok", metaWithTokens(`{"": {"token": "secret-abc", "expirationTimestamp": "2030-01-01T00:00:00Z"}, "x": {"token": "other"}}`), "secret-abc", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EmptyAudienceTokenFromMetadata(tc.meta)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret-abc") {
				t.Fatalf("error leaks the token: %v", err)
			}
		})
	}
}

func TestClientForMetadataUsesOnlyThePodToken(t *testing.T) {
	auth := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case auth <- r.Header.Get("Authorization"):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"CertificateRequestList","apiVersion":"cert-manager.io/v1","items":[]}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, BearerToken: "driver-own-token", Username: "u", Password: "p"}
	client, err := ClientForMetadataTokenRequestEmptyAud(cfg)(metaWithTokens(`{"": {"token": "pod-token"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CertmanagerV1().CertificateRequests("ns").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := <-auth; got != "Bearer pod-token" {
		t.Fatalf("Authorization = %q, want the pod's token only", got)
	}
	if _, err := ClientForMetadataTokenRequestEmptyAud(cfg)(metaWithTokens(`nope`)); !errors.Is(err, ErrMalformedTokens) {
		t.Fatalf("malformed tokens gave %v", err)
	}
}
