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
	"context"
	"crypto"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/cert-manager/csi-lib/metadata"
)

// refRecorder is client-go's fake recorder that also keeps the objects events are about.
type refRecorder struct {
	*record.FakeRecorder
	mu   sync.Mutex
	refs []*corev1.ObjectReference
}

func (r *refRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		r.mu.Lock()
		r.refs = append(r.refs, ref)
		r.mu.Unlock()
	}
	r.FakeRecorder.Eventf(obj, eventType, reason, format, args...)
}

// eventEnv is a manager with a fake event recorder and the volume-state gauge on.
func eventEnv(t *testing.T) (*env, *refRecorder) {
	rec := &refRecorder{FakeRecorder: record.NewFakeRecorder(1000)}
	e := newEnv(t, func(o *Options) {
		o.EventRecorder = rec
		o.Metrics.EnableVolumeStateGauge()
	})
	return e, rec
}

// nextEvent waits (bounded) for the next event with the given reason, skipping others, and
// returns it.
func nextEvent(t *testing.T, rec *refRecorder, reason string) string {
	t.Helper()
	timeout := time.After(pollTimeout)
	for {
		select {
		case ev := <-rec.Events:
			if strings.Contains(ev, " "+reason+" ") {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", reason)
		}
	}
}

// drain returns the events recorded so far.
func drain(rec *refRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func count(events []string, reason string) int {
	n := 0
	for _, ev := range events {
		if strings.Contains(ev, " "+reason+" ") {
			n++
		}
	}
	return n
}

func (e *env) states() map[string]float64 {
	out := map[string]float64{}
	families, _ := e.registry.Gather()
	for _, f := range families {
		if f.GetName() == "certmanager_csi_volumes" {
			for _, m := range f.GetMetric() {
				out[labelValue(m, "state")] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestEventsThroughAVolumesLife: issued, renewal failing through a long outage (one event per
// backoff step), overdue and expired exactly when due, renewed; and the state gauge with it.
func TestEventsThroughAVolumesLife(t *testing.T) {
	e, rec := eventEnv(t)
	e.register("v1", false)
	m := e.start()
	if got := e.states(); got["pending"] != 0 || len(got) != 6 {
		t.Fatalf("states at start = %v; want all six states, zero", got)
	}
	req := e.manageAndIssue("v1")
	issued := nextEvent(t, rec, EventReasonCertificateIssued)
	for _, want := range []string{"Normal CertificateIssued", "CertificateRequest ns/" + req.Name, "after publish", "valid until"} {
		if !strings.Contains(issued, want) {
			t.Errorf("Issued event %q lacks %q", issued, want)
		}
	}
	rec.mu.Lock()
	ref := *rec.refs[0]
	rec.mu.Unlock()
	if ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != "pod-v1" || ref.Namespace != "ns" || ref.UID != "uid-v1" {
		t.Errorf("event about %+v, want the volume's Pod", ref)
	}
	if got := e.states(); got["issued"] != 1 || got["pending"] != 0 {
		t.Fatalf("states after issuance = %v", got)
	}

	// The certificate is valid from now for 1 h: renewal at 40 min, overdue at 45 min, expiry
	// at 60 min. Renewal fails from the start.
	t0 := e.clock.Now()
	e.failKeygen.Store(true)
	e.awaitTimer(40 * time.Minute)
	// The loop's wait until due, and the overdue and expiry timers.
	e.poll("the loop to wait until due", func() bool { return e.clock.Waiters() == 3 })
	e.clock.SetTime(t0.Add(40 * time.Minute))
	failed := nextEvent(t, rec, EventReasonCertificateRequestFailed)
	if !strings.Contains(failed, "Warning CertificateRequestFailed") || !strings.Contains(failed, "keygen broken") || !strings.Contains(failed, "next attempt in 30s") {
		t.Fatalf("failed event = %q", failed)
	}
	e.poll("the failing state", func() bool { return e.states()["failing"] == 1 })
	// A long outage: one event per attempt, so per backoff step (30 s, 60 s, 2 min), and none
	// in between.
	for _, step := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute} {
		e.awaitTimer(step)
		// The backoff, the overdue and the expiry timers.
		e.poll("the backoff timer to be registered", func() bool { return e.clock.Waiters() == 3 })
		e.clock.Step(step - time.Millisecond)
		if n := count(drain(rec), EventReasonCertificateRequestFailed); n != 0 {
			t.Fatalf("%d failure events before the backoff step ended", n)
		}
		e.clock.Step(time.Millisecond)
		nextEvent(t, rec, EventReasonCertificateRequestFailed)
	}

	// Overdue exactly at 45 min, expired exactly at 60 min.
	e.clock.SetTime(t0.Add(45*time.Minute - time.Millisecond))
	if e.states()["overdue"] != 0 {
		t.Fatal("overdue before its time")
	}
	e.clock.SetTime(t0.Add(45 * time.Minute))
	overdue := nextEvent(t, rec, EventReasonCertificateRenewalOverdue)
	if !strings.HasPrefix(overdue, "Warning CertificateRenewalOverdue") {
		t.Fatalf("overdue event = %q", overdue)
	}
	e.poll("the overdue state", func() bool { return e.states()["overdue"] == 1 })
	e.clock.SetTime(t0.Add(time.Hour - time.Millisecond))
	if e.states()["expired"] != 0 {
		t.Fatal("expired before NotAfter")
	}
	e.clock.SetTime(t0.Add(time.Hour))
	nextEvent(t, rec, EventReasonCertificateExpired)
	e.poll("the expired state", func() bool { return e.states()["expired"] == 1 && e.states()["overdue"] == 0 })

	// The signer and keygen recover: renewed, issued again.
	e.failKeygen.Store(false)
	// Wherever the loop is in its backoff, stepping the clock (in steps well inside an
	// attempt's 60 s deadline) brings the next attempt; stop once it has created its request,
	// which it then waits on.
	e.poll("a renewal attempt's request", func() bool {
		created := e.pendingCount() == 1
		if !created {
			e.clock.Step(10 * time.Second)
		}
		return created
	})
	e.issuePending()
	renewed := nextEvent(t, rec, EventReasonCertificateRenewed)
	if !strings.Contains(renewed, "valid until") {
		t.Fatalf("renewed event = %q", renewed)
	}
	e.poll("the issued state", func() bool { s := e.states(); return s["issued"] == 1 && s["expired"] == 0 })

	// Unmanaged: counted nowhere.
	m.UnmanageVolume("v1")
	for state, n := range e.states() {
		if n != 0 {
			t.Errorf("after unmanage, %s = %v", state, n)
		}
	}
}

// TestReadinessGatePendingEventAfterThreshold: the gate saying "not yet" produces one event
// once it has said so for GatePendingEventAfter, not one per check.
func TestReadinessGatePendingEventAfterThreshold(t *testing.T) {
	e, rec := eventEnv(t)
	e.gateOpen.Store(false)
	e.register("v1", true)
	e.start()
	// The gate backoff (1 s ×2, capped at 10 s; its first step waited without being taken) asks
	// at 0, 1, 2, 4, 8, 16 and 26 s: the ask at 16 s is the first past GatePendingEventAfter.
	// Each attempt (its deadline's timer) is followed by its gate wait before the clock moves:
	// an attempt still running when the clock moved would wait from the new time.
	var events []string
	at := time.Duration(0)
	for i, wait := range []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		e.clock.SetTime(start.Add(at))
		e.expectAttemptThenWait(wait)
		if n := e.gateCalls.Load(); n != int64(i+1) {
			t.Fatalf("the gate was asked %d times by the attempt at %v, want %d", n, at, i+1)
		}
		e.poll("the state", func() bool { return e.states()["gate_pending"] == 1 })
		got := drain(rec)
		if at < GatePendingEventAfter && count(got, EventReasonReadinessGatePending) != 0 {
			t.Fatalf("gate event before the threshold (at %v)", at)
		}
		events = append(events, got...)
		at += wait
	}
	if n := count(events, EventReasonReadinessGatePending); n != 1 {
		t.Fatalf("%d ReadinessGatePending events, want 1: %v", n, events)
	}
	for _, ev := range events {
		if strings.Contains(ev, EventReasonReadinessGatePending) && !strings.Contains(ev, "pod has no IP yet") {
			t.Fatalf("gate event without the gate's reason: %q", ev)
		}
	}
	if n := count(events, EventReasonCertificateRequestFailed); n != 0 {
		t.Fatal("a closed gate produced failure events")
	}
}

// TestAFailedPublishIsShownUnlessUnmanaged: a publish's failed attempt is counted, shown as
// failing and told on the pod, whose next attempt is kubelet's retry; a publish's attempt that
// fails after its volume was unmanaged is counted and logged, but neither shown nor told.
func TestAFailedPublishIsShownUnlessUnmanaged(t *testing.T) {
	e, rec := eventEnv(t)
	unmanaged := make(chan struct{})
	keygenEntered := make(chan struct{}, 1)
	keygen := e.opts.GeneratePrivateKey
	e.opts.GeneratePrivateKey = func(meta metadata.Metadata) (crypto.PrivateKey, error) {
		if meta.VolumeID == "v2" {
			keygenEntered <- struct{}{}
			<-unmanaged
			return nil, errors.New("keygen broken")
		}
		return keygen(meta)
	}
	e.register("v1", false)
	e.register("v2", false)
	m := e.start()
	e.failKeygen.Store(true)

	if managed, err := m.ManageVolumeImmediate(context.Background(), "v1"); !managed || err == nil {
		t.Fatalf("ManageVolumeImmediate(v1) = %v, %v; want true and the keygen's error", managed, err)
	}
	failed := nextEvent(t, rec, EventReasonCertificateRequestFailed)
	if !strings.Contains(failed, "keygen broken") || !strings.Contains(failed, "next attempt when kubelet retries the mount") {
		t.Fatalf("failed event = %q", failed)
	}
	if got := e.states(); got["failing"] != 1 {
		t.Fatalf("states after the failed publish = %v; want v1 failing", got)
	}
	m.UnmanageVolume("v1")

	publish := make(chan error, 1)
	go func() { _, err := m.ManageVolumeImmediate(context.Background(), "v2"); publish <- err }()
	<-keygenEntered
	m.UnmanageVolume("v2")
	close(unmanaged)
	if err := <-publish; err == nil {
		t.Fatal("the publish of v2 succeeded")
	}
	if n := e.counter("certmanager_csi_issue_errors_total", "v2"); n != 1 {
		t.Fatalf("issue errors of v2 = %v, want 1", n)
	}
	if n := count(drain(rec), EventReasonCertificateRequestFailed); n != 0 {
		t.Fatalf("%d failure events for the unmanaged v2", n)
	}
	if got := e.states(); got["failing"] != 0 {
		t.Fatalf("states after v2's failure = %v; want nothing failing", got)
	}
}

// TestNoEventsWithoutPodOrRecorder: a volume whose context does not name its pod gets no event;
// a manager without a recorder records nothing, arms no certificate timers and registers no
// state gauge.
func TestNoEventsWithoutPodOrRecorder(t *testing.T) {
	e, rec := eventEnv(t)
	if _, err := e.store.RegisterMetadata(metadata.Metadata{VolumeID: "anon", VolumeContext: map[string]string{"csi.storage.k8s.io/pod.name": "p"}}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.manageAndIssue("anon")
	if got := drain(rec); len(got) != 0 {
		t.Fatalf("events for a volume without pod information: %v", got)
	}

	plain := newEnv(t, nil)
	plain.register("v1", false)
	plain.start()
	plain.manageAndIssue("v1")
	if n, _ := testutil.GatherAndCount(plain.registry, "certmanager_csi_volumes"); n != 0 {
		t.Fatalf("the state gauge appeared without EnableVolumeStateGauge (%d series)", n)
	}
	// The loop's turn arms no timer for the certificate's deadlines before it waits until the
	// certificate is due, and that wait is the only timer on the clock.
	plain.expectLoopWait(40*time.Minute, 1)
}

// awaitTimer waits until the manager has created a timer of exactly d (skipping others, such as
// attempt deadlines and certificate watches).
func (e *env) awaitTimer(d time.Duration) {
	e.t.Helper()
	for {
		if got := e.nextTimer(); got == d {
			return
		}
	}
}

// TestRestartedManagerWatchesTheCertificate: a manager that resumes a mounted volume learns its
// certificate's expiry from the informer's cache and records CertificateExpired on time.
func TestRestartedManagerWatchesTheCertificate(t *testing.T) {
	e, rec := eventEnv(t)
	e.register("v1", true)
	a := e.start()
	e.issuePending()
	nextEvent(t, rec, EventReasonCertificateIssued)
	t0 := e.clock.Now()
	a.Stop()

	e.drainTimers()
	b, err := NewManager(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	// The resumed loop's turn arms the overdue and expiry timers before it waits until due.
	e.expectLoopWait(40*time.Minute, 3, 45*time.Minute, time.Hour)
	e.failKeygen.Store(true)
	e.clock.SetTime(t0.Add(time.Hour))
	nextEvent(t, rec, EventReasonCertificateExpired)
}

// TestDriverThatPersistsNoTime: a driver whose WriteKeypair writes its files but no metadata
// (the library's default renewal point applies) still has its certificate watched for overdue
// and expiry, and its renewal is a renewal: a CertificateRenewed event, and no second
// observation of the time to a first certificate.
func TestDriverThatPersistsNoTime(t *testing.T) {
	rec := &refRecorder{FakeRecorder: record.NewFakeRecorder(1000)}
	var e *env
	e = newEnv(t, withExtendedMetrics(func(o *Options) {
		o.EventRecorder = rec
		o.WriteKeypair = func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
			return e.store.WriteFiles(meta, map[string][]byte{"tls.crt": chain, "ca.crt": ca})
		}
	}))
	e.register("v1", false)
	e.start()
	e.manageAndIssue("v1")
	nextEvent(t, rec, EventReasonCertificateIssued)
	t0 := e.clock.Now()
	if stored, _ := e.store.ReadMetadata("v1"); stored.NextIssuanceTime != nil {
		t.Fatalf("the driver persisted %v; the test needs none", stored.NextIssuanceTime)
	}
	// The loop's turn arms the overdue and expiry timers, then waits until due.
	e.expectLoopWait(40*time.Minute, 3, 45*time.Minute, time.Hour)
	e.clock.SetTime(t0.Add(40 * time.Minute)) // the default renewal point of a 1 h certificate
	e.issuePending()
	renewed := nextEvent(t, rec, EventReasonCertificateRenewed)
	if n := count(drain(rec), EventReasonCertificateIssued); n != 0 {
		t.Fatalf("a renewal recorded %d CertificateIssued events besides %q", n, renewed)
	}
	histogram := func() uint64 {
		families, _ := e.registry.Gather()
		for _, f := range families {
			if f.GetName() == "certmanager_csi_publish_to_first_certificate_seconds" {
				return f.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	e.expectLoopWait(40*time.Minute, 3, 45*time.Minute, time.Hour) // the renewal's
	if n := histogram(); n != 1 {
		t.Fatalf("publish_to_first_certificate_seconds has %d observations after a renewal, want 1", n)
	}
}
