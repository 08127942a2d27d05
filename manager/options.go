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

package manager

import (
	"cmp"
	"crypto"
	"crypto/x509"
	"errors"
	"math"
	"strconv"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// GeneratePrivateKeyFunc generates the private key for a volume's next certificate.
type GeneratePrivateKeyFunc func(metadata.Metadata) (crypto.PrivateKey, error)

// GenerateRequestFunc builds the certificate request for a volume.
type GenerateRequestFunc func(metadata.Metadata) (*CertificateRequestBundle, error)

// SignRequestFunc signs a certificate request with the private key and returns the PEM CSR.
type SignRequestFunc func(meta metadata.Metadata, key crypto.PrivateKey, request *x509.CertificateRequest) (pem []byte, err error)

// WriteKeypairFunc persists an issued key pair; it is expected to write the files and the
// metadata (whose NextIssuanceTime the manager has set to its default and which the function may
// change).
type WriteKeypairFunc func(meta metadata.Metadata, key crypto.PrivateKey, chain []byte, ca []byte) error

// ClientForMetadataFunc returns the cert-manager client to create a volume's requests with.
type ClientForMetadataFunc func(metadata.Metadata) (cmclient.Interface, error)

// ReadyToRequestFunc reports whether a volume may request a certificate now and, if not, why.
type ReadyToRequestFunc func(metadata.Metadata) (bool, string)

// AlwaysReadyToRequest is the default ReadyToRequestFunc: always ready.
func AlwaysReadyToRequest(metadata.Metadata) (bool, string) { return true, "" }

// CertificateRequestBundle is what GenerateRequest returns: the request and the fields of the
// CertificateRequest that carries it.
type CertificateRequestBundle struct {
	// Request is the x509 certificate request to sign with the volume's key.
	Request *x509.CertificateRequest
	// Usages are the requested key usages.
	Usages []cmapi.KeyUsage
	// IsCA requests a CA certificate.
	IsCA bool
	// Namespace is where the CertificateRequest is created.
	Namespace string
	// IssuerRef names the issuer.
	IssuerRef cmmeta.IssuerReference
	// Duration is the requested certificate lifetime; zero leaves it to the issuer.
	Duration time.Duration
	// Annotations are copied onto the CertificateRequest, beside the node's and the pod's names
	// (the keys in package approval), which the manager adds; setting one of those keys to
	// another value than the manager's fails the attempt before anything is created.
	Annotations map[string]string
}

// Options configures a Manager. Fields say their default; required fields have none.
type Options struct {
	// Client is the cert-manager client used to watch and delete CertificateRequests, and to
	// create them unless ClientForMetadata is set. Required.
	Client cmclient.Interface

	// ClientForMetadata returns the client that creates a volume's CertificateRequests.
	// Default: a function returning Client.
	ClientForMetadata ClientForMetadataFunc

	// MetadataReader reads volume metadata. Required.
	MetadataReader storage.MetadataReader

	// Clock drives every timer of the manager. Default: the real clock.
	Clock clock.Clock

	// Log is the logger. Required.
	Log *logr.Logger

	// MaxRequestsPerVolume is how many CertificateRequests are kept per volume; older ones are
	// deleted. Default (zero): 1. Negative is an error.
	MaxRequestsPerVolume int

	// NodeID identifies this node; its hash labels every CertificateRequest, and every request
	// names it in the annotation approval.NodeNameAnnotationKey (see DisableOriginAnnotations). Set it to the Kubernetes node
	// name: the node-bound admission policy and approval check compare it with the node of the
	// creating token and of the pod. Required.
	NodeID string

	// GeneratePrivateKey, GenerateRequest, SignRequest and WriteKeypair implement issuance for
	// the driver. Required.
	GeneratePrivateKey GeneratePrivateKeyFunc
	GenerateRequest    GenerateRequestFunc
	SignRequest        SignRequestFunc
	WriteKeypair       WriteKeypairFunc

	// ReadyToRequest gates issuance. Default: AlwaysReadyToRequest.
	ReadyToRequest ReadyToRequestFunc

	// RenewalBackoffConfig is the backoff after a failed issuance attempt. Default: 30 s,
	// factor 2, jitter 0.5, cap 5 min. Jitter only adds, so the longest wait is about 7.5 min.
	RenewalBackoffConfig *wait.Backoff

	// GateBackoffConfig is the backoff while ReadyToRequest says "not yet". Default: 1 s,
	// factor 2, jitter 0.5, cap 10 s. Jitter only adds, so the longest wait is about 15 s.
	GateBackoffConfig *wait.Backoff

	// Metrics records issuance metrics. Default: none.
	Metrics *metrics.Metrics

	// GatePollInterval, when positive, is how often a volume whose readiness gate said "not
	// yet" asks the gate again while it waits out a GateBackoffConfig step longer than this:
	// when the gate says yes, the attempt starts at once. A poll costs one metadata read and
	// one ReadyToRequest call, no request to the apiserver; it suits a driver whose gate has no
	// informer to call Requeue or RequeuePod from. Default (zero or negative): no poll, as
	// upstream: a closed gate is asked again only at the end of each GateBackoffConfig step (or
	// by Requeue and RequeuePod), so a driver's gate backoff bounds how often its gate is asked.
	GatePollInterval time.Duration

	// EventRecorder records Kubernetes Events on each volume's Pod (named by the volume context's
	// pod name, namespace and UID; none when they are missing): see the EventReason constants.
	// Build it with client-go's tools/record (its aggregation and spam filtering apply); the
	// driver needs RBAC to create and patch events in the pods' namespaces. Default (nil): no
	// events.
	EventRecorder record.EventRecorder

	// RenewalJitter spreads renewals: with a value f in (0, 1), a certificate's renewal is drawn
	// from the window [R − f·(R − NotBefore), R], where R is the renewal point that applies: the
	// library's default (two thirds of the certificate's life), which WriteKeypair is handed
	// already drawn in meta.NextIssuanceTime, or a different NextIssuanceTime the driver
	// persisted, which the loop moves into the same fraction of its own window. It is never
	// after R, so a certificate never gets closer to expiry than its renewal point allows. The
	// draw is a deterministic function of the volume ID and the certificate's serial number, so
	// a restart does not re-roll it; after a restart, a point of the driver's own is kept to as
	// stored, without the window. Default (zero): off, the renewal point exactly. Outside
	// [0, 1) is an error.
	RenewalJitter float64

	// MaxConcurrentIssuances is how many issuance attempts of this manager may be past the
	// readiness gate and not yet finished (creating the CertificateRequest, waiting for its
	// signature, writing the key pair) at once. Further attempts wait for a place, first come,
	// first served; waiting is neither a failure nor gate-pending (no backoff step, no error
	// metric), a publish waits within its own deadline, a background attempt's 60 s deadline
	// (armed as the attempt starts) stops while it waits and is armed again in full once it is
	// admitted, and unmanaging the volume or stopping the manager ends the wait at once. A resume of an already pending request and a readiness-gate check never
	// wait. Default (zero): DefaultMaxConcurrentIssuances, or no limit when the operator sets
	// CSILIBDEBUG=issuancelimit=0 (package doc). UnlimitedConcurrentIssuances: no limit.
	// Negative is an error.
	MaxConcurrentIssuances int

	// IssuanceRateLimit is a token bucket, on Clock, for creating CertificateRequests: each
	// attempt past the readiness gate takes one token before it generates its key and creates
	// its request, and waits for one as it waits for a MaxConcurrentIssuances place (same queue,
	// same rules). Default (nil): no rate limit. A PerSecond that is not greater than zero or a
	// Burst below 1 is an error.
	IssuanceRateLimit *RateLimit

	// DisableOriginAnnotations leaves the library's origin annotations off every
	// CertificateRequest: by default each carries approval.NodeNameAnnotationKey (NodeID) and,
	// when the volume context has them, approval.PodNamespaceAnnotationKey, PodNameAnnotationKey
	// and PodUIDAnnotationKey, so that an admission policy and an approver can check the node and
	// the pod it is for (node-bound issuance, package approval, needs them), and a bundle that
	// sets one of those keys to another value fails the attempt. True, or
	// CSILIBDEBUG=originannotations=0: a request carries the bundle's annotations alone, as
	// upstream.
	DisableOriginAnnotations bool

	// DisableAccessCheck turns off the start-up access check. By default NewManager starts, in
	// the background (it never waits for it, and Stop ends it), one SelfSubjectAccessReview per
	// verb the options need of the driver's account (create, list, watch and delete on
	// certificaterequests, create dropped when ClientForMetadata creates; create and patch on
	// events with an EventRecorder; get on pods and patch on pods/status with a PodCondition),
	// bounded by 10 s in all, and logs each missing rule in ClusterRole form. A review is
	// answered by the apiserver's authorizer alone (nothing is stored), and every authenticated
	// account may create one. True, or CSILIBDEBUG=accesscheck=0: no review is sent, as
	// upstream.
	DisableAccessCheck bool

	// DisableOutageProbe turns off the outage probe. By default, once an attempt fails because
	// the apiserver cannot be reached (a refused or broken connection), the manager asks the
	// apiserver for /version (a GET that every client may make) at once and then every 500 ms on
	// Clock, one probe at a time per node, until it answers; the loops whose attempts failed in
	// that outage then attempt again at once instead of at the end of their renewal backoff
	// step. True, or CSILIBDEBUG=outageprobe=0: no probe, as upstream: such a loop waits out its
	// step.
	DisableOutageProbe bool

	// DisableWatchFallbackReads turns off the reads by name that stand in for a broken watch. By
	// default, while the informer's watch of the node's requests is suspect (its stream ended or
	// could not be opened, or a call found the apiserver unreachable, and no watch has opened or
	// delivered an event since), an attempt waiting for its request to be signed reads that
	// request from the apiserver every 500 ms on Clock (a list that selects its name; at most 50
	// such reads a second per node), so that a broken watch never holds a signed certificate
	// back. True, or CSILIBDEBUG=watchfallbackreads=0: a wait relies on the informer alone, as
	// upstream.
	DisableWatchFallbackReads bool

	// PodCondition, when set, keeps a condition of the given type on the status of each pod
	// with volumes managed here: True while each of them holds a certificate that is not past
	// its NotAfter less PodCondition.ExpiryMargin (see PodCondition). Default (nil): no condition, no pod is read or written.
	// A Type that is not a qualified name, a nil Client or a negative ExpiryMargin is an error.
	PodCondition *PodCondition

	// testHooks are for this package's tests only (see testHooks).
	testHooks testHooks
}

// DefaultMaxConcurrentIssuances is the default MaxConcurrentIssuances. It is above kubelet's
// default limit of 110 pods per node, so a node that starts every one of its pods at once, with
// a certificate volume each, is never slowed; it still bounds a node that restarts with hundreds
// of volumes due, whose attempts would otherwise all create requests and wait on the signer at
// the same moment.
const DefaultMaxConcurrentIssuances = 128

// UnlimitedConcurrentIssuances as MaxConcurrentIssuances removes the limit.
const UnlimitedConcurrentIssuances = math.MaxInt

// DefaultRenewalBackoff is the default RenewalBackoffConfig.
func DefaultRenewalBackoff() wait.Backoff {
	return wait.Backoff{Duration: 30 * time.Second, Factor: 2, Jitter: 0.5, Cap: 5 * time.Minute, Steps: math.MaxInt32}
}

// DefaultGateBackoff is the default GateBackoffConfig.
func DefaultGateBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Cap: 10 * time.Second, Steps: math.MaxInt32}
}

// complete checks o in a fixed order, with the texts drivers' tests match, and returns a copy
// with every default filled in. The backoffs are copied, so later changes by the caller do not
// reach the manager.
func (o Options) complete() (Options, error) {
	for _, check := range []struct {
		missing bool
		text    string
	}{
		{o.Client == nil, "client must be set"},
		{o.Log == nil, "log must be set"},
		{o.MetadataReader == nil, "MetadataReader must be set"},
		{o.GeneratePrivateKey == nil, "GeneratePrivateKey must be set"},
		{o.GenerateRequest == nil, "GenerateRequest must be set"},
		{o.SignRequest == nil, "SignRequest must be set"},
		{o.WriteKeypair == nil, "WriteKeypair must be set"},
		{o.MaxRequestsPerVolume < 0, "MaxRequestsPerVolume cannot be less than zero"},
		{o.NodeID == "", "NodeID must be set"},
		{o.RenewalJitter < 0 || o.RenewalJitter >= 1, "RenewalJitter must be at least 0 and less than 1"},
		{o.MaxConcurrentIssuances < 0, "MaxConcurrentIssuances cannot be less than zero"},
		{o.IssuanceRateLimit != nil && (!(o.IssuanceRateLimit.PerSecond > 0) || math.IsInf(o.IssuanceRateLimit.PerSecond, 0) || o.IssuanceRateLimit.Burst < 1),
			"IssuanceRateLimit must have PerSecond greater than zero and Burst at least 1"},
		{o.PodCondition != nil && (o.PodCondition.Client == nil || len(content.IsLabelKey(string(o.PodCondition.Type))) > 0 || o.PodCondition.ExpiryMargin < 0),
			"PodCondition must have a Type that is a qualified name, a Client and an ExpiryMargin not below zero"},
	} {
		if check.missing {
			return o, errors.New(check.text)
		}
	}
	o.MaxRequestsPerVolume = cmp.Or(o.MaxRequestsPerVolume, 1)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ClientForMetadata == nil {
		client := o.Client
		o.ClientForMetadata = func(metadata.Metadata) (cmclient.Interface, error) { return client, nil }
	}
	if o.ReadyToRequest == nil {
		o.ReadyToRequest = AlwaysReadyToRequest
	}
	o.MaxConcurrentIssuances = cmp.Or(o.MaxConcurrentIssuances, DefaultMaxConcurrentIssuances)
	o.RenewalBackoffConfig = copyBackoff(o.RenewalBackoffConfig, DefaultRenewalBackoff())
	o.GateBackoffConfig = copyBackoff(o.GateBackoffConfig, DefaultGateBackoff())
	return o, nil
}

// withOperatorSettings returns o, which complete filled in, with the operator's CSILIBDEBUG
// settings applied where inCode (the options as the driver passed them) left the option at its
// zero value, and the value each setting took, as key-value pairs to log.
func (o Options) withOperatorSettings(inCode Options, operator csilibdebug.Values) (Options, []any) {
	var taken []any
	if n := inCode.MaxConcurrentIssuances; n != 0 && n != UnlimitedConcurrentIssuances {
		taken = append(taken, csilibdebug.IssuanceLimit, operator.SetInCode(csilibdebug.IssuanceLimit, strconv.Itoa(n)))
	} else {
		off, logged := operator.Off(csilibdebug.IssuanceLimit, n == UnlimitedConcurrentIssuances)
		if off {
			o.MaxConcurrentIssuances = UnlimitedConcurrentIssuances
		}
		taken = append(taken, csilibdebug.IssuanceLimit, logged)
	}
	for _, s := range []struct {
		name      string
		offInCode bool
		disable   *bool
	}{
		{csilibdebug.OriginAnnotations, inCode.DisableOriginAnnotations, &o.DisableOriginAnnotations},
		{csilibdebug.AccessCheck, inCode.DisableAccessCheck, &o.DisableAccessCheck},
		{csilibdebug.OutageProbe, inCode.DisableOutageProbe, &o.DisableOutageProbe},
		{csilibdebug.WatchFallbackReads, inCode.DisableWatchFallbackReads, &o.DisableWatchFallbackReads},
	} {
		var logged string
		*s.disable, logged = operator.Off(s.name, s.offInCode)
		taken = append(taken, s.name, logged)
	}
	return o, taken
}

func copyBackoff(b *wait.Backoff, def wait.Backoff) *wait.Backoff {
	if b == nil {
		return &def
	}
	c := *b
	return &c
}

// RateLimit is a token bucket: PerSecond tokens are earned every second, up to Burst.
type RateLimit struct {
	// PerSecond is the sustained rate, in tokens per second; it must be greater than zero.
	PerSecond float64
	// Burst is how many tokens the bucket holds (and starts with); at least 1.
	Burst int
}

// PodCondition makes the Manager keep a condition on the status of every pod with volumes it
// manages: True while each of the pod's volumes of this driver holds a certificate that is not
// past its NotAfter less ExpiryMargin, False otherwise. Listed in a pod's spec.readinessGates,
// it keeps the pod out of Service endpoints until its certificates are written, and takes it out
// again before one expires (during a signer outage, for example). A renewal that keeps a valid certificate
// changes nothing; a failing renewal of a certificate that is still valid keeps it True.
//
// The condition is written with a strategic-merge patch of pods/status that touches only this
// condition (kubelet keeps conditions of readiness-gate types it does not own), and only when
// the pod's state changes; a pod that has no such condition yet is not given a False one for a
// certificate that is simply not issued yet (the readiness gate holds it back already), so a pod
// whose certificate is issued normally costs one write and no read. Writes go through a
// rate-limited queue with retries, never block issuance, and stop when the pod is gone or its
// volumes are unpublished. After a restart the condition is recomputed from the stored state,
// with one read of each pod and no write when it already matches.
//
// The driver's account needs get on pods (to read a pod's conditions after a restart or a
// failed patch) and patch on pods/status; see docs/events-and-readiness.md for a
// ValidatingAdmissionPolicy that limits the patches to this condition on pods of its own node.
type PodCondition struct {
	// Type is the condition type, a qualified name chosen by the driver, such as
	// "csi.example.com/certificate-ready". Required.
	Type corev1.PodConditionType
	// Client reads pods and patches their status, for example a clientset's CoreV1(). Required.
	Client corev1client.PodsGetter
	// ExpiryMargin is how long before its NotAfter a certificate stops counting as valid, so
	// that the pod leaves its Services' endpoints before the certificate expires rather than
	// just after: the condition's change takes tens of milliseconds to reach kubelet's Ready,
	// more on a busy node. Default (zero): DefaultPodConditionExpiryMargin. Negative is an
	// error.
	ExpiryMargin time.Duration
}

// DefaultPodConditionExpiryMargin is the default PodCondition.ExpiryMargin.
const DefaultPodConditionExpiryMargin = 2 * time.Second

// Reasons of the pod condition (PodCondition). The message names the volume.
const (
	// PodConditionReasonValid (True): every volume holds a valid certificate.
	PodConditionReasonValid = "CertificatesValid"
	// PodConditionReasonNotIssued (False): a volume has no certificate yet.
	PodConditionReasonNotIssued = "CertificateNotIssued"
	// PodConditionReasonGatePending (False): a volume has no certificate yet and the driver's
	// readiness gate says "not yet".
	PodConditionReasonGatePending = "ReadinessGatePending"
	// PodConditionReasonFailing (False): a volume has no certificate and its issuance fails.
	PodConditionReasonFailing = "CertificateIssuanceFailing"
	// PodConditionReasonExpired (False): a volume's certificate is past its NotAfter, or within
	// ExpiryMargin of it.
	PodConditionReasonExpired = "CertificateExpired"
)
