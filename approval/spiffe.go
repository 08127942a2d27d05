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

import (
	"fmt"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cert-manager/csi-lib/approval/internal/asked"
)

// SPIFFEID is the SPIFFE ID of a pod's service account in trustDomain, as csi-driver-spiffe
// names it: spiffe://<trust domain>/ns/<namespace>/sa/<service account>.
func SPIFFEID(trustDomain string, pod *corev1.Pod) string {
	return "spiffe://" + trustDomain + "/ns/" + pod.Namespace + "/sa/" + pod.Spec.ServiceAccountName
}

// SPIFFERule returns the rule that a request asks for the pod's own X.509 SVID: exactly one
// URI name, the pod's SPIFFE ID in trustDomain (SPIFFEID), and no other name; no subject common
// name (csi-driver-spiffe's approver denies one); not a CA (neither spec.isCA nor a CA basic
// constraint); no CSR extension besides the names. With Check, which ties the request to a live
// pod of its node and to that pod's service account, it is what makes csi-driver-spiffe's mode
// of creating requests with the driver's own account (its chart's option since v0.13, whose
// approver then checks the trust domain alone) safe without the pods' tokens: a node obtains
// only the SPIFFE IDs of its own pods. Duration, usages and issuer are left to the approver's
// other rules (csi-driver-spiffe's approver fixes them by configuration). A trustDomain that is
// empty or holds a "/" denies every request.
func SPIFFERule(trustDomain string) PodRule {
	return func(req *cmapi.CertificateRequest, pod *corev1.Pod) string {
		if trustDomain == "" || strings.Contains(trustDomain, "/") {
			return fmt.Sprintf("the approver's SPIFFE trust domain %q is not one", trustDomain)
		}
		if pod.Spec.ServiceAccountName == "" {
			return fmt.Sprintf("pod %s/%s names no service account: it has no SPIFFE ID", pod.Namespace, pod.Name)
		}
		got, csr, reason := asked.ByRequest(req)
		if reason != "" {
			return reason
		}
		id := SPIFFEID(trustDomain, pod)
		uris := 0
		for _, i := range got.Items {
			switch i.Kind {
			case asked.URIName:
				uris++
				if i.Value != id {
					return fmt.Sprintf("%s is not the SPIFFE ID of pod %s/%s, %s", i.Text, pod.Namespace, pod.Name, id)
				}
			case asked.DNSName, asked.IPName, asked.EmailName, asked.OtherName:
				return fmt.Sprintf("%s is asked for beside the SPIFFE ID: an SVID of pod %s/%s names %s alone", i.Text, pod.Namespace, pod.Name, id)
			case asked.Extension:
				return fmt.Sprintf("%s is asked for: an SVID of pod %s/%s asks for its name alone", i.Text, pod.Namespace, pod.Name)
			case asked.CA:
				return fmt.Sprintf("a CA certificate is asked for: an SVID of pod %s/%s is not a CA", pod.Namespace, pod.Name)
			}
		}
		switch {
		case uris == 0:
			return fmt.Sprintf("the request names no SPIFFE ID: pod %s/%s's is %s", pod.Namespace, pod.Name, id)
		case uris > 1:
			return fmt.Sprintf("the request names %d URIs: an X.509 SVID names exactly one", uris)
		case csr.Subject.CommonName != "":
			return fmt.Sprintf("the subject's common name %q is asked for: an SVID of pod %s/%s names %s alone", csr.Subject.CommonName, pod.Namespace, pod.Name, id)
		}
		return ""
	}
}
