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

// Package podcondition writes a condition on the status of each pod with certificate volumes,
// for the pod's readiness gates: True while every volume of the pod holds a valid certificate,
// False naming the worst volume otherwise. Its owner tells it what each volume contributes (a
// Validity); a Writer works out each pod's condition and writes it from a rate-limited queue of
// pods, with one strategic-merge patch of pods/status when the condition the pod carries
// differs, and one read of a pod whose condition is not known (after a restart or a failed
// patch).
package podcondition

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Reasons of the condition. The message names the volume.
const (
	// ReasonValid (True): every volume holds a valid certificate.
	ReasonValid = "CertificatesValid"
	// ReasonNotIssued (False): a volume has no certificate yet.
	ReasonNotIssued = "CertificateNotIssued"
	// ReasonGatePending (False): a volume has no certificate yet and the driver's readiness gate
	// says "not yet".
	ReasonGatePending = "ReadinessGatePending"
	// ReasonFailing (False): a volume has no certificate and its issuance fails.
	ReasonFailing = "CertificateIssuanceFailing"
	// ReasonExpired (False): a volume's certificate is past its NotAfter, or within the owner's
	// expiry margin of it.
	ReasonExpired = "CertificateExpired"
)

// Validity is what a volume contributes to its pod's condition: "" (a valid certificate), a
// Reason* of False, or ValidityUnknown.
type Validity string

// ValidityUnknown is a certificate from before a restart whose expiry is not known yet: the pod
// is not written until it is.
const ValidityUnknown Validity = "?"

// falseReasons gives each False reason its rank (the pod shows the worst of its volumes) and
// what it says of the volume the message names.
var falseReasons = map[Validity]struct {
	rank    int
	message string
}{
	ReasonNotIssued:   {1, "has no certificate yet"},
	ReasonGatePending: {2, "has no certificate yet: the driver's readiness gate says not yet"},
	ReasonFailing:     {3, "has no certificate: issuing it fails"},
	ReasonExpired:     {4, "holds a certificate that has expired or is about to"},
}

// Config is what a Writer needs. Every field is required.
type Config struct {
	// Type is the condition's type.
	Type corev1.PodConditionType
	// Client reads pods and patches their status.
	Client corev1client.PodsGetter
	// Clock gives the condition's lastTransitionTime and, if it is a clock.WithTicker, times the
	// queue's retries.
	Clock clock.Clock
	// Log is the logger the Writer names "pod-condition".
	Log logr.Logger
	// PodEnding is told of a pod that the Writer's calls find terminating or gone.
	PodEnding func(uid types.UID)
}

// Writer keeps the condition of each pod with volumes: the pods' volumes and what each
// contributes, what each pod is known to carry, and a queue of pods to write.
type Writer struct {
	cfg    Config // its Log named "pod-condition"
	queue  workqueue.TypedRateLimitingInterface[types.UID]
	ctx    context.Context // ends on Stop; bounds the API calls
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	pods map[types.UID]*podState
	// syncing is the pod whose sync has read its state and has not returned yet (""): what it
	// read may be out of date by the time it learns what the pod carries, so SetVolume queues
	// that pod again on any change.
	syncing types.UID
}

type podState struct {
	namespace, name string
	volumes         map[string]Validity
	// carried is the condition the pod is known to carry (nil: none); known is false until it
	// has been read or written.
	carried *corev1.PodCondition
	known   bool
	// gone: the apiserver said the pod no longer exists; it is not written again, and is
	// forgotten with its last volume.
	gone bool
}

// New returns a Writer that writes nothing until Run.
func New(cfg Config) *Writer {
	qcfg := workqueue.TypedRateLimitingQueueConfig[types.UID]{}
	if c, ok := cfg.Clock.(clock.WithTicker); ok {
		qcfg.Clock = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Log = cfg.Log.WithName("pod-condition")
	return &Writer{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](100*time.Millisecond, time.Minute), qcfg),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		pods:   make(map[types.UID]*podState),
	}
}

// Run writes queued pods until Stop.
func (p *Writer) Run() {
	defer close(p.done)
	for {
		uid, shutdown := p.queue.Get()
		if shutdown {
			return
		}
		if err := p.sync(uid); err != nil {
			p.cfg.Log.Error(err, "Writing the pod condition; retrying", "pod_uid", uid)
			p.queue.AddRateLimited(uid)
		} else {
			p.queue.Forget(uid)
		}
		p.queue.Done(uid)
	}
}

// Stop ends the queue and any API call in flight, and waits for Run to return.
func (p *Writer) Stop() {
	p.cancel()
	p.queue.ShutDown()
	<-p.done
}

// SetVolume records what a volume of the pod contributes, and queues the pod if it changed and
// its condition may need a call (see pending); a pod whose sync is in flight is queued on any
// change. A pod known only from volumes published in this process carries no condition of ours:
// kubelet publishes a pod's volumes before its containers start, and a driver that restarts
// resumes the volumes it had (resumed), whose pod is read before it is written.
//
// Not queueing a change that calls for nothing (a pod waiting for its first certificate, or one
// whose validity is not known yet) is more than a saving. Were such a change queued, its sync
// could be taken off the queue just before the pod's next change arrived and read that change,
// which queues the pod again behind it (the workqueue marks a pod being processed as dirty);
// were that sync's patch refused, the workqueue would then hand the pod straight back, and the
// refused patch would be repeated at once rather than after the queue's backoff.
func (p *Writer) SetVolume(pod *corev1.ObjectReference, volumeID string, validity Validity, resumed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pods[pod.UID]
	if s == nil {
		s = &podState{namespace: pod.Namespace, name: pod.Name, volumes: make(map[string]Validity, 1), known: true}
		p.pods[pod.UID] = s
	}
	if _, seen := s.volumes[volumeID]; !seen && resumed {
		s.carried, s.known = nil, false
	}
	if old, ok := s.volumes[volumeID]; ok && old == validity {
		return
	}
	s.volumes[volumeID] = validity
	if s.gone {
		return
	}
	if _, act := pending(p.cfg.Type, s); act || p.syncing == pod.UID {
		p.queue.Add(pod.UID)
	}
}

// RemoveVolume forgets a volume; a pod left without volumes is forgotten, and not written. A pod
// left with others is queued as SetVolume queues it: its condition is now theirs alone.
func (p *Writer) RemoveVolume(pod *corev1.ObjectReference, volumeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pods[pod.UID]
	if s == nil {
		return
	}
	if _, ok := s.volumes[volumeID]; !ok {
		return
	}
	delete(s.volumes, volumeID)
	switch {
	case len(s.volumes) == 0:
		delete(p.pods, pod.UID)
	case s.gone:
	default:
		if _, act := pending(p.cfg.Type, s); act || p.syncing == pod.UID {
			p.queue.Add(pod.UID)
		}
	}
}

// desired is the condition a pod's volumes call for; ok is false while a volume's validity is
// unknown.
func desired(typ corev1.PodConditionType, volumes map[string]Validity) (c corev1.PodCondition, ok bool) {
	worst, worstID := Validity(""), ""
	for _, id := range slices.Sorted(maps.Keys(volumes)) {
		v := volumes[id]
		if v == ValidityUnknown {
			return c, false
		}
		if falseReasons[v].rank > falseReasons[worst].rank {
			worst, worstID = v, id
		}
	}
	if worst == "" {
		return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, Reason: ReasonValid,
			Message: "Every certificate volume holds a valid certificate"}, true
	}
	return corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, Reason: string(worst),
		Message: fmt.Sprintf("Volume %s %s", worstID, falseReasons[worst].message)}, true
}

// pending returns the condition the pod's volumes call for, and whether sync has a call to
// make for it: none while a volume's validity is unknown, while the pod only waits for a first
// certificate and carries none of ours, or when it is known to carry that condition already.
// p.mu is held.
func pending(typ corev1.PodConditionType, s *podState) (want corev1.PodCondition, act bool) {
	want, ok := desired(typ, s.volumes)
	if !ok {
		return want, false
	}
	// A pod waiting for a first certificate is not written unless it carries something else,
	// and then its condition is known: only a certificate written in this process, or one
	// resumed from stored state (never "not issued"), can have made it True.
	waiting := want.Status == corev1.ConditionFalse &&
		(want.Reason == ReasonNotIssued || want.Reason == ReasonGatePending)
	if waiting && (!s.known || s.carried == nil) {
		return want, false
	}
	return want, !s.known || !sameCondition(s.carried, &want)
}

// sync brings one pod's condition to what its volumes call for: nothing if the pod carries it
// already, or carries none and is only waiting for a first certificate; otherwise one read of
// the pod if what it carries is not known, and one patch if that differs.
func (p *Writer) sync(uid types.UID) error {
	p.mu.Lock()
	s := p.pods[uid]
	if s == nil || s.gone {
		p.mu.Unlock()
		return nil
	}
	want, act := pending(p.cfg.Type, s)
	if !act {
		p.mu.Unlock()
		return nil
	}
	namespace, name, carried, known := s.namespace, s.name, s.carried, s.known
	p.syncing = uid
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.syncing = ""
		p.mu.Unlock()
	}()
	log := p.cfg.Log.WithValues("pod", name, "namespace", namespace)
	if !known {
		pod, err := p.cfg.Client.Pods(namespace).Get(p.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
			p.markGone(uid)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading pod %s/%s: %w", namespace, name, apicall.Refusal(err, "get", apicall.Pods, namespace, apicall.DriverAccount))
		}
		if pod.DeletionTimestamp != nil {
			p.cfg.PodEnding(uid)
		}
		carried = findCondition(pod.Status.Conditions, p.cfg.Type)
		p.learn(uid, carried)
	}
	if sameCondition(carried, &want) {
		return nil
	}
	want.LastTransitionTime = metav1.NewTime(p.cfg.Clock.Now())
	if carried != nil && carried.Status == want.Status {
		want.LastTransitionTime = carried.LastTransitionTime
	}
	patch, err := json.Marshal(map[string]any{
		// The UID makes the patch fail on another pod of the same name.
		"metadata": map[string]any{"uid": uid},
		"status":   map[string]any{"conditions": []corev1.PodCondition{want}},
	})
	if err != nil {
		return err
	}
	_, err = p.cfg.Client.Pods(namespace).Patch(p.ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err):
		p.markGone(uid)
		return nil
	case err != nil:
		// What the pod carries is not known after a failed patch: it is read again.
		p.update(uid, func(s *podState) { s.carried, s.known = nil, false })
		return fmt.Errorf("patching the status of pod %s/%s: %w", namespace, name, apicall.Refusal(err, "patch", apicall.PodStatus, namespace, apicall.DriverAccount))
	}
	p.learn(uid, &want)
	log.V(2).Info("Pod condition written", "type", p.cfg.Type, "status", want.Status, "reason", want.Reason)
	return nil
}

// markGone tells podEnding that the pod no longer exists, then records it.
func (p *Writer) markGone(uid types.UID) {
	p.cfg.PodEnding(uid)
	p.update(uid, func(s *podState) { s.gone = true })
}

// learn records the condition the pod is known to carry.
func (p *Writer) learn(uid types.UID, carried *corev1.PodCondition) {
	p.update(uid, func(s *podState) { s.carried, s.known = carried, true })
}

// update changes the pod's state under the lock, if the pod is still known.
func (p *Writer) update(uid types.UID, f func(s *podState)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.pods[uid]; s != nil {
		f(s)
	}
}

func findCondition(conds []corev1.PodCondition, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == typ {
			c := conds[i]
			return &c
		}
	}
	return nil
}

func sameCondition(a, b *corev1.PodCondition) bool {
	return a != nil && b != nil && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}
