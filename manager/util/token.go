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

// Package util builds cert-manager clients that act as the pod a volume belongs to, using the
// service-account token kubelet passes in the volume context (CSIDriver.spec.tokenRequests).
package util

import (
	"encoding/json"
	"errors"
	"fmt"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"k8s.io/client-go/rest"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
)

var (
	// ErrNoTokens: the volume context has no service-account tokens.
	ErrNoTokens = errors.New("no service-account tokens in the volume context (set tokenRequests with an empty audience on the CSIDriver)")
	// ErrMalformedTokens: the tokens value is not the JSON kubelet writes.
	ErrMalformedTokens = errors.New("malformed service-account tokens in the volume context")
	// ErrNoEmptyAudienceToken: there is no token for the empty audience.
	ErrNoEmptyAudienceToken = errors.New("no service-account token for the empty audience in the volume context")
)

// ClientForMetadataTokenRequestEmptyAud returns a ClientForMetadataFunc that builds a
// cert-manager client from restConfig's Host, TLS client configuration (client
// certificate and key included), UserAgent, Timeout and Proxy, authenticated with the pod's
// empty-audience service-account token.
func ClientForMetadataTokenRequestEmptyAud(restConfig *rest.Config) manager.ClientForMetadataFunc {
	return func(meta metadata.Metadata) (cmclient.Interface, error) {
		token, err := EmptyAudienceTokenFromMetadata(meta)
		if err != nil {
			return nil, err
		}
		return cmclient.NewForConfig(configForToken(restConfig, token))
	}
}

// configForToken is the client configuration for a pod's token: only these fields of
// restConfig are kept, as upstream keeps them, so the pod's token is the only credential unless
// restConfig's TLS configuration carries a client certificate (which the apiserver would
// authenticate first).
func configForToken(restConfig *rest.Config, token string) *rest.Config {
	return &rest.Config{
		Host:            restConfig.Host,
		TLSClientConfig: restConfig.TLSClientConfig,
		UserAgent:       restConfig.UserAgent,
		Timeout:         restConfig.Timeout,
		Proxy:           restConfig.Proxy,
		BearerToken:     token,
	}
}

// EmptyAudienceTokenFromMetadata returns the empty-audience token from the volume context, a
// JSON object keyed by audience whose values are {"token": "...", ...}. Errors never contain
// the token or the JSON.
func EmptyAudienceTokenFromMetadata(meta metadata.Metadata) (string, error) {
	raw := meta.VolumeContext[metadata.SATokenVolumeContextKey]
	var tokens map[string]struct {
		Token string `json:"token"`
	}
	if raw == "" {
		// An absent or empty value is a JSON parse error (of nothing: no secret in it).
		return "", fmt.Errorf("%w: %w", ErrNoTokens, json.Unmarshal([]byte(raw), &tokens))
	}
	if err := json.Unmarshal([]byte(raw), &tokens); err != nil {
		// The decoder's message may quote part of the input: do not wrap it.
		return "", fmt.Errorf("%w: not a JSON object of {\"token\": ...} values", ErrMalformedTokens)
	}
	t, ok := tokens[""]
	if !ok || t.Token == "" {
		return "", ErrNoEmptyAudienceToken
	}
	return t.Token, nil
}
