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
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
)

// RequestFor returns the driver's GenerateRequest: a request in the pod's namespace, from the
// volume's issuer (else issuer), for the volume's duration (else DefaultDuration), for the
// digital signature and server auth usages, whose subject's common name is the volume's
// CommonNameAttribute (else the pod's name) and whose DNS and URI names are the volume's
// DNSNamesAttribute and URISANsAttribute. It reads the volume context alone, so that an approver
// calls it on the context it rebuilds from the pod (package approval/podspec; the example
// approver's --pod-spec-driver) and approves what it asks for, and nothing else.
func RequestFor(issuer cmmeta.IssuerReference) manager.GenerateRequestFunc {
	return func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
		attrs := meta.VolumeContext
		ref := issuer
		if kind := attrs[IssuerKindAttribute]; kind != "" {
			ref.Kind = kind
		}
		if name := attrs[IssuerNameAttribute]; name != "" {
			ref.Name = name
		}
		if ref.Name == "" {
			return nil, fmt.Errorf("no issuer: the volume has no %s and the driver no default issuer", IssuerNameAttribute)
		}
		d, err := time.ParseDuration(attrs[DurationAttribute])
		if err != nil {
			d = DefaultDuration
		}
		req := &x509.CertificateRequest{Subject: pkix.Name{CommonName: attrs[metadata.PodNameVolumeContextKey]}}
		if cn, ok := attrs[CommonNameAttribute]; ok {
			if req.Subject.CommonName, err = expandVariables(meta, cn); err != nil {
				return nil, fmt.Errorf("%s: %w", CommonNameAttribute, err)
			}
		}
		if req.DNSNames, err = list(meta, attrs[DNSNamesAttribute]); err != nil {
			return nil, fmt.Errorf("%s: %w", DNSNamesAttribute, err)
		}
		uris, err := list(meta, attrs[URISANsAttribute])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", URISANsAttribute, err)
		}
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", URISANsAttribute, err)
			}
			req.URIs = append(req.URIs, u)
		}
		return &manager.CertificateRequestBundle{
			Request:   req,
			Namespace: attrs[metadata.PodNamespaceVolumeContextKey],
			IssuerRef: ref,
			Duration:  d,
			Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
		}, nil
	}
}

// list is a comma-separated attribute's values, each with its variables expanded and its spaces
// trimmed; none for an empty attribute.
func list(meta metadata.Metadata, attr string) ([]string, error) {
	if strings.TrimSpace(attr) == "" {
		return nil, nil
	}
	expanded, err := expandVariables(meta, attr)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range strings.Split(expanded, ",") {
		out = append(out, strings.TrimSpace(v))
	}
	return out, nil
}

// expandVariables expands ${POD_NAME}, ${POD_NAMESPACE}, ${POD_UID} and ${SERVICE_ACCOUNT_NAME}
// from the pod-info keys kubelet adds, as cert-manager csi-driver does; any other variable is an
// error.
func expandVariables(meta metadata.Metadata, s string) (string, error) {
	vars := map[string]string{
		"POD_NAME":             meta.VolumeContext[metadata.PodNameVolumeContextKey],
		"POD_NAMESPACE":        meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
		"POD_UID":              meta.VolumeContext[metadata.PodUIDVolumeContextKey],
		"SERVICE_ACCOUNT_NAME": meta.VolumeContext[metadata.ServiceAccountNameVolumeContextKey],
	}
	var unknown []string
	out := os.Expand(s, func(name string) string {
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variable %s (known: POD_NAME, POD_NAMESPACE, POD_UID, SERVICE_ACCOUNT_NAME)", strings.Join(unknown, ", "))
	}
	return out, nil
}
