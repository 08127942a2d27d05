/*
Copyright 2026 The cert-manager Authors.

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
	"context"
	"encoding/json"
	"fmt"
	"sort"
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

// volumeValidity is what a volume contributes to its pod's condition: "" (a valid
// certificate), a PodConditionReason* of False, or validityUnknown (a certificate from before a
// restart whose expiry is not known yet: the pod is not written until it is).
type volumeValidity string

const validityUnknown volumeValidity = "?"

// badness orders the False reasons: the pod shows the worst of its volumes.
var badness = map[volumeValidity]int{
	PodConditionReasonNotIssued:   1,
	PodConditionReasonGatePending: 2,
	PodConditionReasonFailing:     3,
	PodConditionReasonExpired:     4,
}

// podConditions keeps the PodCondition of each pod with managed volumes: the pods' volumes and
// what each contributes, what each pod is known to carry, and a queue of pods to write.
type podConditions struct {
	typ    corev1.PodConditionType
	margin time.Duration // ExpiryMargin
	client corev1client.PodsGetter
	clock  clock.Clock
	log    logr.Logger
	queue  workqueue.TypedRateLimitingInterface[types.UID]
	ctx    context.Context // ends on stop; bounds the API calls
	cancel context.CancelFunc
	done   chan struct{}
	// podEnding is told of a pod the reads find terminating or gone.
	podEnding func(uid types.UID)

	mu   sync.Mutex
	pods map[types.UID]*podState
}

type podState struct {
	namespace, name string
	volumes         map[string]volumeValidity
	// carried is the condition the pod is known to carry (nil: none); known is false until it
	// has been read or written.
	carried *corev1.PodCondition
	known   bool
	// gone: the apiserver said the pod no longer exists; it is not written again, and is
	// forgotten with its last volume.
	gone bool
}

func newPodConditions(pc *PodCondition, clk clock.Clock, log logr.Logger, podEnding func(types.UID)) *podConditions {
	cfg := workqueue.TypedRateLimitingQueueConfig[types.UID]{}
	if c, ok := clk.(clock.WithTicker); ok {
		cfg.Clock = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	margin := pc.ExpiryMargin
	if margin == 0 {
		margin = DefaultPodConditionExpiryMargin
	}
	return &podConditions{
		typ:       pc.Type,
		margin:    margin,
		client:    pc.Client,
		clock:     clk,
		podEnding: podEnding,
		log:       log.WithName("pod-condition"),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](100*time.Millisecond, time.Minute), cfg),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		pods:   make(map[types.UID]*podState),
	}
}

// run writes queued pods until stop.
func (p *podConditions) run() {
	defer close(p.done)
	for {
		uid, shutdown := p.queue.Get()
		if shutdown {
			return
		}
		if err := p.sync(uid); err != nil {
			p.log.Error(err, "Writing the pod condition; retrying", "pod_uid", uid)
			p.queue.AddRateLimited(uid)
		} else {
			p.queue.Forget(uid)
		}
		p.queue.Done(uid)
	}
}

// stop ends the queue and any API call in flight, and waits for the writer.
func (p *podConditions) stop() {
	p.cancel()
	p.queue.ShutDown()
	<-p.done
}

// setVolume records what a volume of the pod contributes, and queues the pod if it changed.
// A pod known only from volumes published in this process carries no condition of ours: kubelet
// publishes a pod's volumes before its containers start, and a driver that restarts resumes the
// volumes it had (resumed), whose pod is read before it is written.
func (p *podConditions) setVolume(pod *corev1.ObjectReference, volumeID string, validity volumeValidity, resumed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pods[pod.UID]
	if s == nil {
		s = &podState{namespace: pod.Namespace, name: pod.Name, volumes: make(map[string]volumeValidity, 1), known: true}
		p.pods[pod.UID] = s
	}
	if _, seen := s.volumes[volumeID]; !seen && resumed {
		s.carried, s.known = nil, false
	}
	if old, ok := s.volumes[volumeID]; ok && old == validity {
		return
	}
	s.volumes[volumeID] = validity
	if !s.gone {
		p.queue.Add(pod.UID)
	}
}

// removeVolume forgets a volume; a pod left without volumes is forgotten, and not written.
func (p *podConditions) removeVolume(pod *corev1.ObjectReference, volumeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pods[pod.UID]
	if s == nil {
		return
	}
	delete(s.volumes, volumeID)
	if len(s.volumes) == 0 {
		delete(p.pods, pod.UID)
	}
}

// desired is the condition a pod's volumes call for; ok is false while a volume's validity is
// unknown.
func desired(typ corev1.PodConditionType, volumes map[string]volumeValidity) (c corev1.PodCondition, ok bool) {
	ids := make([]string, 0, len(volumes))
	for id := range volumes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	worst, worstID := volumeValidity(""), ""
	for _, id := range ids {
		v := volumes[id]
		if v == validityUnknown {
			return c, false
		}
		if badness[v] > badness[worst] {
			worst, worstID = v, id
		}
	}
	if worst == "" {
		return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, Reason: PodConditionReasonValid,
			Message: "Every certificate volume holds a valid certificate"}, true
	}
	messages := map[volumeValidity]string{
		PodConditionReasonNotIssued:   "has no certificate yet",
		PodConditionReasonGatePending: "has no certificate yet: the driver's readiness gate says not yet",
		PodConditionReasonFailing:     "has no certificate: issuing it fails",
		PodConditionReasonExpired:     "holds a certificate that has expired or is about to",
	}
	return corev1.PodCondition{Type: typ, Status: corev1.ConditionFalse, Reason: string(worst),
		Message: fmt.Sprintf("Volume %s %s", worstID, messages[worst])}, true
}

// sync brings one pod's condition to what its volumes call for: nothing if the pod carries it
// already, or carries none and is only waiting for a first certificate; otherwise one patch.
func (p *podConditions) sync(uid types.UID) error {
	p.mu.Lock()
	s := p.pods[uid]
	if s == nil || s.gone {
		p.mu.Unlock()
		return nil
	}
	want, ok := desired(p.typ, s.volumes)
	namespace, name, carried, known := s.namespace, s.name, s.carried, s.known
	p.mu.Unlock()
	if !ok {
		return nil
	}
	log := p.log.WithValues("pod", name, "namespace", namespace)
	// A pod waiting for a first certificate is not written unless it carries something else,
	// and then its condition is known: only a certificate written in this process, or one
	// resumed from stored state (never "not issued"), can have made it True.
	waiting := want.Status == corev1.ConditionFalse &&
		(want.Reason == PodConditionReasonNotIssued || want.Reason == PodConditionReasonGatePending)
	if waiting && (!known || carried == nil) {
		return nil
	}
	if !known {
		pod, err := p.client.Pods(namespace).Get(p.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
			p.markGone(uid)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading pod %s/%s: %w", namespace, name, apicall.Refusal(err, "get", apicall.Pods, namespace, apicall.DriverAccount))
		}
		if pod.DeletionTimestamp != nil {
			p.podEnding(uid)
		}
		carried = findCondition(pod.Status.Conditions, p.typ)
		p.learn(uid, carried)
	}
	if sameCondition(carried, &want) {
		return nil
	}
	want.LastTransitionTime = metav1.NewTime(p.clock.Now())
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
	_, err = p.client.Pods(namespace).Patch(p.ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err):
		p.markGone(uid)
		return nil
	case err != nil:
		p.learnUnknown(uid)
		return fmt.Errorf("patching the status of pod %s/%s: %w", namespace, name, apicall.Refusal(err, "patch", apicall.PodStatus, namespace, apicall.DriverAccount))
	}
	p.learn(uid, &want)
	log.V(2).Info("Pod condition written", "type", p.typ, "status", want.Status, "reason", want.Reason)
	return nil
}

// markGone tells podEnding that the pod no longer exists, then records it.
func (p *podConditions) markGone(uid types.UID) {
	p.podEnding(uid)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.pods[uid]; s != nil {
		s.gone = true
	}
}

func (p *podConditions) learn(uid types.UID, carried *corev1.PodCondition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.pods[uid]; s != nil {
		s.carried, s.known = carried, true
	}
}

// learnUnknown forgets what the pod carries: after a failed patch it is read again.
func (p *podConditions) learnUnknown(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.pods[uid]; s != nil {
		s.carried, s.known = nil, false
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
