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

// Package approval decides whether a CertificateRequest created by this library may be
// approved on the grounds of where it comes from: the node and the pod it names (in the
// annotations below, which the manager sets on every request it creates) must be a live pod,
// with that UID and service account, bound to that node, Pending or Running. An approver calls
// Check before approving; a ValidatingAdmissionPolicy (examples/deploy/node-bound-policy.yaml)
// makes the apiserver refuse a request whose names do not match the credential that creates it,
// so that together a node's driver obtains certificates only for the pods bound to its node.
//
// What the certificate says is checked by a PodRule: podspec.Rule (package approval/podspec)
// rebuilds, from the pod alone, what each of its volumes asks for through the driver's own
// request generator and approves only a request that asks for exactly that; SPIFFERule approves
// only the pod's SPIFFE ID.
//
// The package depends on the Kubernetes and cert-manager API types and the library's metadata
// only: an approver brings its own client, cache or fake through GetPodFunc.
package approval

import (
	"context"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// The annotations the manager sets on every CertificateRequest it creates, beside the driver's
// own. The node's name is the manager's Options.NodeID; the pod's are the publish's volume
// context (csi.storage.k8s.io/pod.namespace, pod.name, pod.uid, serviceAccount.name); the service
// account's UID is read from the pod's token in the volume context (ServiceAccountUIDOf), when
// the CSIDriver has kubelet pass one. A pod annotation is left out when the volume context has no
// value for it.
const (
	NodeNameAnnotationKey     = "csi.cert-manager.io/node-name"
	PodNamespaceAnnotationKey = "csi.cert-manager.io/pod-namespace"
	PodNameAnnotationKey      = "csi.cert-manager.io/pod-name"
	PodUIDAnnotationKey       = "csi.cert-manager.io/pod-uid"
	// PodServiceAccountAnnotationKey names the pod's service account. Requests made by the
	// library before it named it carry none: Check denies them as not bound to the pod.
	PodServiceAccountAnnotationKey = "csi.cert-manager.io/pod-service-account"
	// PodServiceAccountUIDAnnotationKey is the UID of the pod's service account, as the pod's
	// token says it. The pod object does not carry it: Check does not read it; the admission
	// policy compares it with the credential's when the request is created with the pod's token.
	PodServiceAccountUIDAnnotationKey = "csi.cert-manager.io/pod-service-account-uid"
)

// Claim is what a request says about its origin: the node that created it and the pod it is for.
type Claim struct {
	NodeName     string
	PodNamespace string
	PodName      string
	PodUID       types.UID
	// ServiceAccountName is the pod's service account; empty on a request made before the
	// library named it, which Check denies as not bound to the pod's identity.
	ServiceAccountName string
	// ServiceAccountUID is the service account's UID where the pod's token gave it; else empty.
	ServiceAccountUID types.UID
}

// String names the pod, its service account and the node, for log lines and condition messages.
func (c Claim) String() string {
	if c.ServiceAccountName == "" {
		return fmt.Sprintf("pod %s/%s (uid %s) on node %s", c.PodNamespace, c.PodName, c.PodUID, c.NodeName)
	}
	return fmt.Sprintf("pod %s/%s (uid %s, service account %s) on node %s", c.PodNamespace, c.PodName, c.PodUID, c.ServiceAccountName, c.NodeName)
}

// ClaimOf reads a request's claim from its annotations. A request that lacks one of the node's
// and the pod's names, or has one empty, names no pod and cannot be checked: the error says which
// annotation is missing. The service account's annotations are read where present: a request
// made before the library set them parses, with ServiceAccountName empty.
func ClaimOf(req *cmapi.CertificateRequest) (Claim, error) {
	a := req.GetAnnotations()
	c := Claim{
		NodeName:           a[NodeNameAnnotationKey],
		PodNamespace:       a[PodNamespaceAnnotationKey],
		PodName:            a[PodNameAnnotationKey],
		PodUID:             types.UID(a[PodUIDAnnotationKey]),
		ServiceAccountName: a[PodServiceAccountAnnotationKey],
		ServiceAccountUID:  types.UID(a[PodServiceAccountUIDAnnotationKey]),
	}
	for _, f := range []struct{ key, value string }{
		{NodeNameAnnotationKey, c.NodeName},
		{PodNamespaceAnnotationKey, c.PodNamespace},
		{PodNameAnnotationKey, c.PodName},
		{PodUIDAnnotationKey, string(c.PodUID)},
	} {
		if f.value == "" {
			return Claim{}, fmt.Errorf("the request has no %s annotation", f.key)
		}
	}
	return c, nil
}

// Verdict is Check's answer: approve, or deny for Reason.
type Verdict struct {
	Approve bool
	// Reason says why a request is denied, in words for its Denied condition; empty when approved.
	Reason string
}

func deny(format string, args ...any) Verdict {
	return Verdict{Reason: fmt.Sprintf(format, args...)}
}

// GetPodFunc returns the pod namespace/name, or an error for which apierrors.IsNotFound is true
// when there is none. A lister, a client's Get or a fake will do; a cache that may lag behind
// a pod's creation should fall back to the apiserver on not-found.
type GetPodFunc func(ctx context.Context, namespace, name string) (*corev1.Pod, error)

// PodRule is a driver's own check of a request against the pod it names, which Check runs once
// the pod is found live on the node named: the reason to deny, or "" to approve. The origin
// checks tie a request to a pod of its node; what the certificate says (its subject, names,
// usages) is derived by the driver from the pod, and only a rule that derives it the same way
// (podspec.Rule, SPIFFERule, or an identity policy such as approver-policy's) limits it.
type PodRule func(req *cmapi.CertificateRequest, pod *corev1.Pod) (denyReason string)

// Check decides a request by its claim: approve when the pod it names exists with the UID and
// the service account it names, is bound to the node it names, is Pending or Running and not
// terminating, and every rule approves. Every other case is a Verdict to deny with its reason,
// among them a request that names no service account (made before the library named it): it is
// not bound to the pod's identity. An error means no decision could be made (the pod could not
// be read): the caller tries again later.
func Check(ctx context.Context, req *cmapi.CertificateRequest, getPod GetPodFunc, rules ...PodRule) (Verdict, error) {
	claim, err := ClaimOf(req)
	if err != nil {
		return deny("%v: it names no pod to check", err), nil
	}
	if v := checkOwner(req, claim); !v.Approve {
		return v, nil
	}
	if claim.ServiceAccountName == "" { // decided without reading the pod
		return unbound(claim), nil
	}
	pod, err := getPod(ctx, claim.PodNamespace, claim.PodName)
	if apierrors.IsNotFound(err) {
		return deny("pod %s/%s does not exist", claim.PodNamespace, claim.PodName), nil
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("reading pod %s/%s: %w", claim.PodNamespace, claim.PodName, err)
	}
	if v := CheckPod(claim, pod); !v.Approve {
		return v, nil
	}
	for _, rule := range rules {
		if reason := rule(req, pod); reason != "" {
			return deny("%s", reason), nil
		}
	}
	return Verdict{Approve: true}, nil
}

// checkOwner denies a request whose pod owner reference names another pod than its claim: the
// garbage collector would tie the request's life to a pod the check never looked at.
func checkOwner(req *cmapi.CertificateRequest, claim Claim) Verdict {
	for _, ref := range req.OwnerReferences {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" && ref.UID != claim.PodUID {
			return deny("the request's owner is pod %s (uid %s), not the pod it names (uid %s)", ref.Name, ref.UID, claim.PodUID)
		}
	}
	return Verdict{Approve: true}
}

// unbound is the denial of a request that names no service account.
func unbound(claim Claim) Verdict {
	return deny("the request names no service account (no %s annotation: made before the library named the pod's identity), so it is not bound to the identity of pod %s/%s",
		PodServiceAccountAnnotationKey, claim.PodNamespace, claim.PodName)
}

// CheckPod is Check for a pod already read: pod is the one named namespace/name by claim.
func CheckPod(claim Claim, pod *corev1.Pod) Verdict {
	switch {
	case pod.UID != claim.PodUID:
		return deny("pod %s/%s has uid %s, not %s", pod.Namespace, pod.Name, pod.UID, claim.PodUID)
	case pod.Spec.NodeName == "":
		return deny("pod %s/%s is bound to no node, not to %s", pod.Namespace, pod.Name, claim.NodeName)
	case pod.Spec.NodeName != claim.NodeName:
		return deny("pod %s/%s is bound to node %s, not to %s", pod.Namespace, pod.Name, pod.Spec.NodeName, claim.NodeName)
	case claim.ServiceAccountName == "":
		return unbound(claim)
	case pod.Spec.ServiceAccountName != claim.ServiceAccountName:
		return deny("pod %s/%s runs as service account %q, not %q", pod.Namespace, pod.Name, pod.Spec.ServiceAccountName, claim.ServiceAccountName)
	case pod.DeletionTimestamp != nil:
		return deny("pod %s/%s is terminating", pod.Namespace, pod.Name)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return deny("pod %s/%s has finished (%s)", pod.Namespace, pod.Name, pod.Status.Phase)
	case pod.Status.Phase != corev1.PodPending && pod.Status.Phase != corev1.PodRunning:
		return deny("pod %s/%s is in phase %q, neither Pending nor Running", pod.Namespace, pod.Name, pod.Status.Phase)
	}
	return Verdict{Approve: true}
}
