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

// Package podspec is the approval rule that a CertificateRequest asks for what its pod's own spec
// asks for: the metadata kubelet sends for each of the pod's volumes of the driver is rebuilt from
// the pod object, the driver's own request generator is called on it, and the request must ask
// for what one of those bundles asks for. It is a package of its own, beside package approval,
// because it names metadata.Metadata, whose package brings the CSI spec's gRPC types: an approver
// that runs only approval.Check stays light.
package podspec

import (
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/approval/internal/asked"
	"github.com/cert-manager/csi-lib/metadata"
)

// bundleFields are the fields of manager.CertificateRequestBundle, in its order.
type bundleFields = struct {
	Request     *x509.CertificateRequest
	Usages      []cmapi.KeyUsage
	IsCA        bool
	Namespace   string
	IssuerRef   cmmeta.IssuerReference
	Duration    time.Duration
	Annotations map[string]string
}

// RequestBundle is satisfied by manager.CertificateRequestBundle, and by any struct type with
// exactly its fields, so that Rule takes the driver's manager.GenerateRequestFunc as it is
// (naming the manager's type would link the manager into every approver). A field added to the
// manager's bundle stops the driver's generator from compiling here until the rule compares it.
type RequestBundle interface{ ~bundleFields }

// DefaultKubeletRootDir is kubelet's default --root-dir, under which it puts the volumes' target
// paths.
const DefaultKubeletRootDir = "/var/lib/kubelet"

// PodVolume is one of a pod's CSI inline volumes and the metadata kubelet sends the driver for it.
type PodVolume struct {
	// Name is the volume's name in the pod's spec.
	Name string
	// Metadata is what the library's driver builds from kubelet's NodePublishVolume call for it.
	Metadata metadata.Metadata
}

// VolumesOf rebuilds, from the pod object alone, the metadata kubelet sends in NodePublishVolume
// for each of the pod's CSI inline volumes of driverName (a CSIDriver with podInfoOnMount, as the
// library's driver requires), in the pod's order, as kubelet's pkg/volume/csi builds it:
//   - VolumeContext: the volume's volumeAttributes, then the pod-info keys over them (pod name,
//     namespace, UID, service account name, and csi.storage.k8s.io/ephemeral "true"). The
//     service account tokens kubelet adds for a CSIDriver with tokenRequests are not in it: they
//     are minted for each mount, and no approver can rebuild them;
//   - VolumeID: "csi-" and the hex SHA-256 of the pod's UID followed by the volume's name;
//   - TargetPath: <kubeletRootDir>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount
//     (kubeletRootDir "" is DefaultKubeletRootDir);
//   - VolumeMountGroup: the pod's fsGroup, in decimal (the library's driver asks kubelet for it).
//
// NextIssuanceTime is nil and Mounted false, as at a first publish.
func VolumesOf(pod *corev1.Pod, driverName, kubeletRootDir string) []PodVolume {
	if kubeletRootDir == "" {
		kubeletRootDir = DefaultKubeletRootDir
	}
	var fsGroup string
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		fsGroup = strconv.FormatInt(*sc.FSGroup, 10)
	}
	var vols []PodVolume
	for _, v := range pod.Spec.Volumes {
		if v.CSI == nil || v.CSI.Driver != driverName {
			continue
		}
		ctx := maps.Clone(v.CSI.VolumeAttributes)
		if ctx == nil {
			ctx = map[string]string{}
		}
		ctx[metadata.PodNameVolumeContextKey] = pod.Name
		ctx[metadata.PodNamespaceVolumeContextKey] = pod.Namespace
		ctx[metadata.PodUIDVolumeContextKey] = string(pod.UID)
		ctx[metadata.ServiceAccountNameVolumeContextKey] = pod.Spec.ServiceAccountName
		ctx[metadata.EphemeralVolumeContextKey] = "true"
		vols = append(vols, PodVolume{Name: v.Name, Metadata: metadata.Metadata{
			VolumeID:         fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(pod.UID)+v.Name))),
			TargetPath:       filepath.Join(kubeletRootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", v.Name, "mount"),
			VolumeContext:    ctx,
			VolumeMountGroup: fsGroup,
		}})
	}
	return vols
}

// Options configures Rule.
type Options struct {
	// DriverName is the CSI driver's name, as the pods' volumes name it. Required.
	DriverName string
	// KubeletRootDir is kubelet's --root-dir, for the target paths; "" is DefaultKubeletRootDir.
	// Only a generator that reads the target path needs it right.
	KubeletRootDir string
}

// Rule returns the approval.PodRule that a request asks for exactly what one of the pod's volumes of
// the driver asks for: the metadata kubelet would send for each volume is rebuilt from the pod
// (VolumesOf), the driver's own request generator is called on it (generate: the function the
// driver passes as manager.Options.GenerateRequest, or one it exports for its approver), and the
// request is compared with each bundle. They must have the same issuer (the mounted-signer rule),
// namespace, subject, DNS, IP, URI and email names and names of any other kind, CSR extensions
// besides the names (basic or name constraints, key usages), usages and CA flag (each compared as
// a set, in any order), and a duration no longer than the volume's (shorter, but not zero: zero
// or none is the issuer's default). A request matching none is denied with the first difference:
// a thing the request asks for that no volume asks for ("dns name evil.example is not asked for
// by any volume of pod ns/name"), a duration longer than every volume's, or, where each thing is
// asked for by some volume but not all by one, the difference with the volume nearest to it.
//
// Only what the request asks for is compared: its key (the node's own), the CSR's signature and
// signature algorithm, its other attributes and the annotations are not. A generator is expected
// to ask for the same things each time it is called with the same metadata; one that puts time
// or randomness into what it asks for (a jittered duration, a timestamp in the subject) cannot be
// matched by any approver, and a denial says so when a second call for the same volume asks for
// something else. The rule calls the generator once for each of the pod's volumes of the driver,
// and again for each when it denies. A generator that needs the pod's service account token
// (csi-driver-spiffe's) cannot be called: use approval.SPIFFERule.
func Rule[B RequestBundle](opts Options, generate func(metadata.Metadata) (*B, error)) approval.PodRule {
	gen := func(meta metadata.Metadata) (asked.Asked, error) {
		p, err := generate(meta)
		if err != nil {
			return asked.Asked{}, err
		}
		if p == nil {
			return asked.Asked{}, fmt.Errorf("the generator returned no bundle")
		}
		b := bundleFields(*p)
		return asked.ByBundle(b.Request, b.Namespace, b.IssuerRef, b.Usages, b.IsCA, b.Duration)
	}
	return func(req *cmapi.CertificateRequest, pod *corev1.Pod) string {
		got, _, reason := asked.ByRequest(req)
		if reason != "" {
			return reason
		}
		podName := pod.Namespace + "/" + pod.Name
		vols := VolumesOf(pod, opts.DriverName, opts.KubeletRootDir)
		if len(vols) == 0 {
			return fmt.Sprintf("pod %s has no volume of driver %s", podName, opts.DriverName)
		}
		var wants []volumeAsked
		var failed []string
		for _, v := range vols {
			want, err := gen(v.Metadata)
			if err != nil {
				failed = append(failed, fmt.Sprintf("volume %q: %v", v.Name, err))
				continue
			}
			if got.SameItems(want) && asked.DurationWithin(got.Duration, want.Duration) {
				return ""
			}
			wants = append(wants, volumeAsked{v, want})
		}
		if len(wants) == 0 {
			return fmt.Sprintf("the driver's generator fails for every volume of pod %s: %s", podName, strings.Join(failed, "; "))
		}
		reason = difference(got, wants, podName)
		for _, w := range wants {
			again, err := gen(w.vol.Metadata)
			if err != nil {
				continue
			}
			if what := changed(w.Asked, again); what != "" {
				reason += fmt.Sprintf(" (the driver's generator asked for %s on a second call for volume %q: it puts time or randomness into what it asks for, which no approver can rebuild)", what, w.vol.Name)
				break
			}
		}
		return reason
	}
}

type volumeAsked struct {
	vol PodVolume
	asked.Asked
}

// difference names the first difference between what the request asks for and what the pod's
// volumes ask for, none of which matches it.
func difference(got asked.Asked, wants []volumeAsked, podName string) string {
	for _, i := range got.Items {
		found := false
		for _, w := range wants {
			found = found || w.Has(i.Key)
		}
		if !found {
			return fmt.Sprintf("%s is not asked for by any volume of pod %s", i.Text, podName)
		}
	}
	within := false
	var longest time.Duration
	for _, w := range wants {
		within = within || asked.DurationWithin(got.Duration, w.Duration)
		longest = max(longest, w.Duration)
	}
	if !within {
		return fmt.Sprintf("%s is not asked for by any volume of pod %s (at most %s)", asked.DurationText(got.Duration), podName, longest)
	}
	// Each thing is asked for by some volume, not all by one: the nearest volume's difference.
	nearest, fewest := wants[0], -1
	for _, w := range wants {
		n := 0
		for _, i := range got.Items {
			if !w.Has(i.Key) {
				n++
			}
		}
		for _, i := range w.Items {
			if !got.Has(i.Key) {
				n++
			}
		}
		if !asked.DurationWithin(got.Duration, w.Duration) {
			n++
		}
		if fewest < 0 || n < fewest { // a tie: the first in the pod's order
			nearest, fewest = w, n
		}
	}
	for _, i := range got.Items {
		if !nearest.Has(i.Key) {
			return fmt.Sprintf("no one volume of pod %s asks for all the request asks for: volume %q, the nearest, does not ask for %s", podName, nearest.vol.Name, i.Text)
		}
	}
	for _, i := range nearest.Items {
		if !got.Has(i.Key) {
			return fmt.Sprintf("the request does not ask for %s, which volume %q of pod %s asks for", i.Text, nearest.vol.Name, podName)
		}
	}
	return fmt.Sprintf("volume %q of pod %s asks for %s, the request for %s", nearest.vol.Name, podName, asked.DurationText(nearest.Duration), asked.DurationText(got.Duration))
}

// changed names what a second call of the generator asked for differently from the first, or "".
func changed(first, second asked.Asked) string {
	if first.Duration != second.Duration {
		return fmt.Sprintf("%s, then %s", asked.DurationText(first.Duration), asked.DurationText(second.Duration))
	}
	for _, i := range first.Items {
		if !second.Has(i.Key) {
			return fmt.Sprintf("%s, then not", i.Text)
		}
	}
	for _, i := range second.Items {
		if !first.Has(i.Key) {
			return fmt.Sprintf("%s only the second time", i.Text)
		}
	}
	return ""
}
