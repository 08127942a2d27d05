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
	"fmt"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// inFlightProbe is an instrumented signer's view of the manager: it counts the attempts between
// creating their CertificateRequest and finishing WriteKeypair, and records the peak.
type inFlightProbe struct {
	mu       sync.Mutex
	now      int
	peak     int
	created  []string // volume IDs, in creation order
	volumeOf map[string]string
}

func newInFlightProbe(e *env, volumeIDs ...string) *inFlightProbe {
	p := &inFlightProbe{volumeOf: map[string]string{}}
	for _, id := range volumeIDs {
		p.volumeOf[util.HashIdentifier(id)] = id
	}
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.now++
		p.peak = max(p.peak, p.now)
		p.created = append(p.created, p.volumeOf[req.Labels[api.VolumeIDHashLabelKey]])
		return false, nil, nil
	})
	write := e.opts.WriteKeypair
	e.opts.WriteKeypair = func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
		err := write(meta, key, chain, ca)
		p.mu.Lock()
		p.now--
		p.mu.Unlock()
		return err
	}
	return p
}

func (p *inFlightProbe) snapshot() (now, peak int, created []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now, p.peak, append([]string(nil), p.created...)
}

// gauge returns the value of a node-labelled gauge or counter (0 if it has no series).
func (e *env) gauge(name string) float64 {
	e.t.Helper()
	return e.metricValue(name, func(*dto.Metric) bool { return true })
}

const (
	waitingGauge = "certmanager_csi_issuance_admission_waiting"
	waitsCounter = "certmanager_csi_issuance_admission_waits_total"
)

func (e *env) pendingCount() int {
	n := 0
	for _, r := range e.requests() {
		if !testkit.IsFinished(&r) {
			n++
		}
	}
	return n
}

func (e *env) writtenCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, keys := range e.written {
		n += len(keys)
	}
	return n
}

// signOneByOne plays a slow signer: each round it waits until as many requests are pending as
// the cap allows (so an attempt over the cap would have had its chance to be created), checks
// the probe, and signs one.
func signOneByOne(e *env, p *inFlightProbe, total, limit int) {
	e.t.Helper()
	for done := 0; done < total; done++ {
		want := min(limit, total-done)
		e.poll(fmt.Sprintf("%d pending requests", want), func() bool { return e.pendingCount() == want })
		if now, peak, _ := p.snapshot(); now > limit || peak > limit {
			e.t.Fatalf("%d attempts in flight (peak %d), limit %d", now, peak, limit)
		}
		e.issuePending()
		e.poll("the key pair to be written", func() bool { return e.writtenCount() == done+1 })
	}
}

// startWithOnlyPlaceHeld starts a manager with MaxConcurrentIssuances 1 whose place is held by
// volume "first", waiting for its signature.
func startWithOnlyPlaceHeld(t *testing.T) *env {
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 1 }))
	e.start()
	e.register("first", false)
	e.m.ManageVolume("first")
	e.poll("the first request", func() bool { return e.pendingCount() == 1 })
	return e
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// TestAdmissionCapNeverExceeded: with MaxConcurrentIssuances 3, twelve volumes managed at once
// never have more than three attempts between create and write, every volume gets its
// certificate, the waits are counted, and none of them is an error.
func TestAdmissionCapNeverExceeded(t *testing.T) {
	vols := ids("cap", 12)
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 3 }))
	p := newInFlightProbe(e, vols...)
	e.start()
	for _, id := range vols {
		e.register(id, false)
		e.m.ManageVolume(id)
	}
	e.poll("nine attempts to wait for admission", func() bool { return e.gauge(waitingGauge) == 9 })
	signOneByOne(e, p, len(vols), 3)
	_, peak, created := p.snapshot()
	if peak != 3 || len(created) != 12 {
		t.Fatalf("peak in flight %d, created %d: want 3 and 12", peak, len(created))
	}
	if w, n := e.gauge(waitingGauge), e.gauge(waitsCounter); w != 0 || n != 9 {
		t.Fatalf("waiting %v, waits %v; want 0 and 9", w, n)
	}
	for _, id := range vols {
		if n := e.counter("certmanager_csi_issue_errors_total", id); n != 0 {
			t.Fatalf("volume %s: %v issuance errors, want 0", id, n)
		}
	}
}

// TestAdmissionFirstComeFirstServed: attempts are admitted in the order they started waiting,
// and unmanaging a waiting volume gives its place to the next one at once.
func TestAdmissionFirstComeFirstServed(t *testing.T) {
	vols := ids("fifo", 6)
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 1 }))
	p := newInFlightProbe(e, vols...)
	e.start()
	for i, id := range vols {
		e.register(id, false)
		e.m.ManageVolume(id)
		if i == 0 {
			e.poll("the first volume's request", func() bool { return e.pendingCount() == 1 })
			continue
		}
		e.poll("the volume to take its place", func() bool { return e.gauge(waitingGauge) == float64(i) })
	}
	e.m.UnmanageVolume(vols[2])
	e.poll("the unmanaged volume to leave the queue", func() bool { return e.gauge(waitingGauge) == 4 })
	for i := 0; i < 5; i++ {
		e.poll("one pending request", func() bool { return e.pendingCount() == 1 })
		e.issuePending()
		e.poll("the key pair to be written", func() bool { return e.writtenCount() == i+1 })
	}
	_, peak, created := p.snapshot()
	want := []string{vols[0], vols[1], vols[3], vols[4], vols[5]}
	if fmt.Sprint(created) != fmt.Sprint(want) || peak != 1 {
		t.Fatalf("created for %v (peak %d), want %v (peak 1)", created, peak, want)
	}
}

// TestAdmissionTokensRefillOnStep: with a bucket of 2 tokens earning 1 per second, two requests
// are created at once, the third exactly one second later on the fake clock and not a
// millisecond earlier, the fourth a second after that.
func TestAdmissionTokensRefillOnStep(t *testing.T) {
	vols := ids("rate", 4)
	e := newEnv(t, withExtendedMetrics(func(o *Options) {
		o.MaxConcurrentIssuances = UnlimitedConcurrentIssuances
		o.IssuanceRateLimit = &RateLimit{PerSecond: 1, Burst: 2}
	}))
	p := newInFlightProbe(e, vols...)
	e.start()
	for _, id := range vols {
		e.register(id, false)
		e.m.ManageVolume(id)
	}
	createdCount := func() int { _, _, c := p.snapshot(); return len(c) }
	e.poll("two creates and two waiters", func() bool { return createdCount() == 2 && e.gauge(waitingGauge) == 2 })
	e.clock.Step(999 * time.Millisecond)
	if n, w := createdCount(), e.gauge(waitingGauge); n != 2 || w != 2 {
		t.Fatalf("after 999ms: %d created, %v waiting; want 2 and 2", n, w)
	}
	e.clock.Step(time.Millisecond)
	e.poll("the third create", func() bool { return createdCount() == 3 && e.gauge(waitingGauge) == 1 })
	e.clock.Step(999 * time.Millisecond)
	if n := createdCount(); n != 3 {
		t.Fatalf("after 1.999s: %d created, want 3", n)
	}
	e.clock.Step(time.Millisecond)
	e.poll("the fourth create", func() bool { return createdCount() == 4 && e.gauge(waitingGauge) == 0 })
	if n := e.gauge(waitsCounter); n != 2 {
		t.Fatalf("waits %v, want 2", n)
	}
}

// TestAdmissionPublishWaitsWithinItsDeadline: a publish whose attempt waits for a place succeeds
// once the place frees, without an error or a gate-pending count.
func TestAdmissionPublishWaitsWithinItsDeadline(t *testing.T) {
	e := startWithOnlyPlaceHeld(t)

	e.register("publish", false)
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := e.m.ManageVolumeImmediate(ctx, "publish")
		result <- err
	}()
	e.poll("the publish to wait for admission", func() bool { return e.gauge(waitingGauge) == 1 })
	e.issuePending() // the first volume's: its place frees
	e.poll("the publish's request", func() bool { return e.pendingCount() == 1 })
	e.issuePending()
	if err := <-result; err != nil {
		t.Fatalf("publish failed: %v", err)
	}
	for _, name := range []string{"certmanager_csi_issue_errors_total", "certmanager_csi_issue_gate_pending_total"} {
		if n := e.counter(name, "publish"); n != 0 {
			t.Fatalf("%s = %v, want 0", name, n)
		}
	}
}

// TestAdmissionPublishDeadlineWhileWaiting: a publish that is still waiting when its own
// deadline passes fails then (not before), with the caller's cause, and leaves the queue.
func TestAdmissionPublishDeadlineWhileWaiting(t *testing.T) {
	e := startWithOnlyPlaceHeld(t)
	e.register("publish", false)
	ctx, cancel := context.WithCancelCause(context.Background())
	result := make(chan error, 1)
	go func() {
		_, err := e.m.ManageVolumeImmediate(ctx, "publish")
		result <- err
	}()
	e.poll("the publish to wait for admission", func() bool { return e.gauge(waitingGauge) == 1 })
	select {
	case err := <-result:
		t.Fatalf("publish ended before its deadline: %v", err)
	default:
	}
	deadline := fmt.Errorf("kubelet's deadline")
	cancel(deadline)
	if err := <-result; !errors.Is(err, deadline) {
		t.Fatalf("publish error %v, want the caller's cause", err)
	}
	e.poll("the queue to empty", func() bool { return e.gauge(waitingGauge) == 0 })
}

// TestAdmissionWaitPausesAttemptDeadline: a background attempt's 60 s deadline does not run
// while it waits for admission, however long the wait; it starts in full once the attempt is
// admitted, and ends the attempt 60 s later. The place is held by a publish, whose attempt has no deadline on the fake clock.
func TestAdmissionWaitPausesAttemptDeadline(t *testing.T) {
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 1 }))
	e.start()
	e.register("holder", false)
	held := make(chan error, 1)
	go func() { _, err := e.m.ManageVolumeImmediate(context.Background(), "holder"); held <- err }()
	e.poll("the holder's request", func() bool { return e.pendingCount() == 1 })
	e.register("second", false)
	e.m.ManageVolume("second")
	e.poll("the second to wait", func() bool { return e.gauge(waitingGauge) == 1 })

	e.clock.Step(2 * issueTimeout)
	if n, w := e.counter("certmanager_csi_issue_errors_total", "second"), e.gauge(waitingGauge); n != 0 || w != 1 {
		t.Fatalf("after waiting 2×%v: %v issuance errors, %v waiting; want 0 and 1", issueTimeout, n, w)
	}
	e.issuePending() // the holder's: its place frees
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	e.poll("the second request", func() bool { return e.pendingCount() == 1 })
	e.clock.Step(issueTimeout - time.Second) // 59 s after admission
	if n := e.counter("certmanager_csi_issue_errors_total", "second"); n != 0 {
		t.Fatalf("the attempt timed out %v after admission: %v errors", issueTimeout-time.Second, n)
	}
	e.clock.Step(time.Second) // 60 s after admission: the deadline ends the attempt
	e.poll("the attempt to time out 60 s after its admission", func() bool {
		return e.counter("certmanager_csi_issue_errors_total", "second") == 1
	})
}

// TestAdmissionStopEndsWaits: Stop returns at once with attempts waiting for admission.
func TestAdmissionStopEndsWaits(t *testing.T) {
	e := newEnv(t, withExtendedMetrics(func(o *Options) {
		o.MaxConcurrentIssuances = 1
		o.IssuanceRateLimit = &RateLimit{PerSecond: 0.001, Burst: 1}
	}))
	e.start()
	for _, id := range ids("stop", 4) {
		e.register(id, false)
		e.m.ManageVolume(id)
	}
	e.poll("three waiters", func() bool { return e.gauge(waitingGauge) == 3 })
	stopped := make(chan struct{})
	go func() { e.m.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(pollTimeout):
		t.Fatal("Stop did not return with attempts waiting for admission")
	}
	e.poll("the queue to empty", func() bool { return e.gauge(waitingGauge) == 0 })
	// Stop does not wait for a driver function: the admitted attempt may still be generating its
	// key, its deadline armed, until the function returns and the attempt ends. Then no timer may
	// be left.
	e.poll("no timer left on the clock after Stop", func() bool { return e.clock.Waiters() == 0 })
}

// TestAdmissionPastDueAfterRestart: a manager that starts with every mounted volume past due
// renews them through the admission limit, not all at once.
func TestAdmissionPastDueAfterRestart(t *testing.T) {
	vols := ids("due", 6)
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 2 }))
	p := newInFlightProbe(e, vols...)
	past := start.Add(-time.Hour)
	for _, id := range vols {
		meta := e.register(id, true)
		meta.Mounted = true
		meta.NextIssuanceTime = &past
		if err := e.store.WriteMetadata(id, meta); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	signOneByOne(e, p, len(vols), 2)
	if _, peak, _ := p.snapshot(); peak != 2 {
		t.Fatalf("peak in flight %d, want 2", peak)
	}
	if n := e.gauge(waitsCounter); n != 4 {
		t.Fatalf("waits %v, want 4", n)
	}
}

// TestAdmissionResumeNeverWaits: a resume of an already pending request is not held back by a
// full admission: it is before the readiness gate.
func TestAdmissionResumeNeverWaits(t *testing.T) {
	e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 1 }))
	e.start()
	e.register("pending", false)
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { _, err := e.m.ManageVolumeImmediate(ctx, "pending"); result <- err }()
	first := e.waitForPending()
	cancel() // kubelet's deadline: the request and its key stay
	<-result
	e.m.UnmanageVolume("pending")
	// kubelet retries seconds later, when the informer has long seen the request; without it in
	// the cache the retry would (rightly) create a new request instead of resuming.
	e.waitInformerHas(first)

	e.register("holder", false)
	e.m.ManageVolume("holder")
	e.poll("the holder's request", func() bool { return e.pendingCount() == 2 })
	retry := make(chan error, 1)
	go func() {
		_, err := e.m.ManageVolumeImmediate(context.Background(), "pending")
		retry <- err
	}()
	// Sign the retry's (resumed) request while the holder still has the only place.
	var resumed *cmapi.CertificateRequest
	for _, r := range e.requests() {
		if r.Labels[api.VolumeIDHashLabelKey] == util.HashIdentifier("pending") {
			resumed = r.DeepCopy()
		}
	}
	if resumed == nil {
		t.Fatal("the first publish's request is gone")
	}
	if _, err := testkit.Issue(context.Background(), e.client, e.ca, resumed, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-retry:
		if err != nil {
			t.Fatalf("retry failed: %v", err)
		}
	case <-time.After(pollTimeout):
		t.Fatal("the resume waited for the holder's place")
	}
	if n := e.gauge(waitsCounter); n != 0 {
		t.Fatalf("admission waits %v, want 0: the resume waited", n)
	}
}

// TestAdmissionOptions: defaults and validation.
func TestAdmissionOptions(t *testing.T) {
	e := newEnv(t, withExtendedMetrics(nil))
	o, err := e.opts.complete()
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxConcurrentIssuances != DefaultMaxConcurrentIssuances || o.IssuanceRateLimit != nil {
		t.Fatalf("defaults: %d, %v", o.MaxConcurrentIssuances, o.IssuanceRateLimit)
	}
	for name, c := range map[string]struct {
		set  func(*Options)
		text string
	}{
		"negative cap":   {func(o *Options) { o.MaxConcurrentIssuances = -1 }, "MaxConcurrentIssuances cannot be less than zero"},
		"zero rate":      {func(o *Options) { o.IssuanceRateLimit = &RateLimit{Burst: 1} }, "IssuanceRateLimit must have PerSecond greater than zero and Burst at least 1"},
		"zero burst":     {func(o *Options) { o.IssuanceRateLimit = &RateLimit{PerSecond: 1} }, "IssuanceRateLimit must have PerSecond greater than zero and Burst at least 1"},
		"negative burst": {func(o *Options) { o.IssuanceRateLimit = &RateLimit{PerSecond: 1, Burst: -1} }, "IssuanceRateLimit must have PerSecond greater than zero and Burst at least 1"},
	} {
		t.Run(name, func(t *testing.T) {
			o := e.opts
			c.set(&o)
			if _, err := NewManager(o); err == nil || err.Error() != c.text {
				t.Fatalf("error %v, want %q", err, c.text)
			}
		})
	}
}
