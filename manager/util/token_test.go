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

package util

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

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

// TestConfigForTokenKeepsUpstreamsFields: the client keeps the server, TLS (client certificate
// included), user agent, timeout and proxy, and authenticates with the pod's token only.
func TestConfigForTokenKeepsUpstreamsFields(t *testing.T) {
	proxy := func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg := &rest.Config{
		Host: "https://api:6443", UserAgent: "csi-driver/v1", Timeout: 7 * time.Second, Proxy: proxy,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key"), ServerName: "api"},
		BearerToken:     "driver-own-token", Username: "u", Password: "p", QPS: 99, Burst: 99,
	}
	got := configForToken(cfg, "pod-token")
	if got.Host != cfg.Host || got.UserAgent != cfg.UserAgent || got.Timeout != cfg.Timeout || got.Proxy == nil ||
		string(got.TLSClientConfig.CertData) != "cert" || string(got.TLSClientConfig.KeyData) != "key" ||
		string(got.TLSClientConfig.CAData) != "ca" || got.TLSClientConfig.ServerName != "api" {
		t.Errorf("fields not kept: %+v", got)
	}
	if got.BearerToken != "pod-token" || got.Username != "" || got.Password != "" || got.QPS != 0 || got.Burst != 0 {
		t.Errorf("fields beyond upstream's kept: %+v", got)
	}
	// An absent or empty tokens value is a JSON parse error, as upstream, and ErrNoTokens.
	for _, meta := range []metadata.Metadata{{}, metaWithTokens("")} {
		_, err := EmptyAudienceTokenFromMetadata(meta)
		var syntax *json.SyntaxError
		if !errors.Is(err, ErrNoTokens) || !errors.As(err, &syntax) {
			t.Errorf("empty tokens: %v; want ErrNoTokens and the JSON parse error", err)
		}
	}
}
