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
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// This file holds the reference model of the renewal loop's timing and the randomized test that
// drives the real manager on the fake clock and compares every timer the loop creates, and the
// clock at every attempt, with it.

// modelOutcome is the outcome the test scripts for the next attempt.
type modelOutcome int32

const (
	scriptSuccess     modelOutcome = iota
	scriptGatePending              // the driver's ReadyToRequest says "not yet"
	scriptFailure                  // an issuance error (the driver's key generation fails)
)

func (o modelOutcome) String() string {
	return [...]string{"success", "gate-pending", "failure"}[o]
}

// persistMode is what the test driver's WriteKeypair persists as NextIssuanceTime.
type persistMode int32

const (
	persistHanded      persistMode = iota // what it was handed: the library's default
	persistNothing                        // nothing: the metadata keeps what it held
	persistNil                            // an explicit nil
	persistZero                           // a zero time
	persistEarlier                        // NotAfter − renew-before, renew-before above a third of the life
	persistLater                          // NotAfter − renew-before, renew-before below a third of the life
	persistPast                           // before the certificate's NotBefore
	persistAfterExpiry                    // after its NotAfter
	persistModes
)

func (p persistMode) String() string {
	return [...]string{"handed", "nothing", "nil", "zero", "earlier", "later", "past", "after-expiry"}[p]
}

// written is what the test driver's WriteKeypair saw and did.
type written struct {
	handed time.Time         // the NextIssuanceTime it was handed
	cert   *x509.Certificate // the leaf it was handed
	stored *time.Time        // the NextIssuanceTime the metadata holds afterwards
}

// loopModel is the reference model of one volume's loop. Its rule, from the compatibility
// contract: a volume is due at the NextIssuanceTime the driver persisted when it is set and not
// zero (earlier or later than the library's default; with RenewalJitter at the certificate's
// draw in the window before it, unless it is the default the driver was handed); at the
// default handed to WriteKeypair when the driver persisted none after a success; at once with
// no certificate; never sooner than one second after a success. A due volume is attempted; a
// success is followed by the wait until due, a gate-pending outcome by the gate backoff's next
// step, a failure by the renewal backoff's next step (each backoff starts again after a success
// or an outcome of the other class); a gate-pending outcome in a registration's first turn waits
// the gate backoff's first step without taking it. Requeue ends a wait until due or a
// gate-pending wait at once, and never a wait after a failure (the attempt after that wait
// answers it). A new registration (unmanage and manage, or a restart) forgets the last
// success and the backoffs.
type loopModel struct {
	id                      string
	renewalBase, renewalCap time.Duration
	gateBase, gateCap       time.Duration
	jitter                  float64

	now          time.Time
	stored       *time.Time
	last         *modelSuccess
	renewalSteps int
	gateSteps    int
	firstTurn    bool // the registration's loop has not taken its first turn
	waiting      waitKind
	wakeAt       time.Time
}

type modelSuccess struct {
	at, handed, notBefore time.Time
	fraction              float64
}

// dueIn is how long until the volume may be attempted.
func (m *loopModel) dueIn() time.Duration {
	var due time.Time
	switch {
	case m.stored != nil && !m.stored.IsZero():
		due = *m.stored
		if m.last != nil && !due.Equal(m.last.handed) {
			due = m.last.inWindow(due, m.jitter)
		}
	case m.last != nil:
		due = m.last.handed
	default:
		return 0
	}
	d := due.Sub(m.now)
	if m.last != nil {
		d = max(d, m.last.at.Add(time.Second).Sub(m.now))
	}
	return d
}

// inWindow is the draw's place in the window of jitter·(p − NotBefore) before p.
func (s *modelSuccess) inWindow(p time.Time, jitter float64) time.Time {
	if jitter == 0 || !p.After(s.notBefore) {
		return p
	}
	window := time.Duration(jitter * float64(p.Sub(s.notBefore)))
	return p.Add(-time.Duration(s.fraction * float64(window)))
}

// draw is the certificate's jitter draw in [0, 1): FNV-1a of the volume ID, a zero byte and the
// serial number, its top 53 bits as a fraction.
func draw(volumeID string, cert *x509.Certificate) float64 {
	h := fnv.New64a()
	h.Write([]byte(volumeID))
	h.Write([]byte{0})
	h.Write(cert.SerialNumber.Bytes())
	return float64(h.Sum64()>>11) / (1 << 53)
}

func backoffStep(base, cap time.Duration, steps int) time.Duration {
	d := base
	for i := 0; i < steps && d < cap; i++ {
		d *= 2
	}
	return min(d, cap)
}

// loopObserver is what the model checks against the real loop.
type loopObserver interface {
	// wait: the loop creates a wait timer of d; blocks: and then blocks on it.
	wait(d time.Duration, blocks bool)
	// attempt: the loop makes an attempt at the model's now (background: with its 60 s
	// deadline timer); it returns the scripted outcome and, for a success, what WriteKeypair did.
	attempt(at time.Time, background bool) (modelOutcome, *written)
	// nothing: the loop does nothing.
	nothing()
	// handed: WriteKeypair was handed got as NextIssuanceTime, where the model's default is want.
	handed(got, want time.Time)
}

// wake runs the loop from a wake-up (its timer fired, a Requeue, a new registration) until it
// blocks again. firstBackground is false only for a caller's attempt (ManageVolumeImmediate).
func (m *loopModel) wake(o loopObserver, firstBackground bool) {
	background := firstBackground
	for {
		first := m.firstTurn
		m.firstTurn = false
		if d := m.dueIn(); d > 0 {
			o.wait(d, true)
			m.waiting, m.wakeAt = waitUntilDue, m.now.Add(d)
			return
		}
		outcome, w := o.attempt(m.now, background)
		background = true
		switch outcome {
		case scriptSuccess:
			m.succeeded(o, w)
			continue
		case scriptGatePending:
			m.renewalSteps = 0
			untaken := 0
			steps := &m.gateSteps
			if first {
				steps = &untaken
			}
			m.backOff(o, waitGatePending, m.gateBase, m.gateCap, steps)
		case scriptFailure:
			m.gateSteps = 0
			m.backOff(o, waitAfterError, m.renewalBase, m.renewalCap, &m.renewalSteps)
		}
		return
	}
}

// backOff waits out the next step of a backoff (base, doubling to cap; steps taken so far).
func (m *loopModel) backOff(o loopObserver, kind waitKind, base, cap time.Duration, steps *int) {
	d := backoffStep(base, cap, *steps)
	*steps++
	o.wait(d, true)
	m.waiting, m.wakeAt = kind, m.now.Add(d)
}

// succeeded records a success at now: the default WriteKeypair must have been handed, what the
// driver stored, and fresh backoffs.
func (m *loopModel) succeeded(o loopObserver, w *written) {
	s := &modelSuccess{at: m.now, notBefore: w.cert.NotBefore}
	if m.jitter > 0 {
		s.fraction = draw(m.id, w.cert)
	}
	s.handed = s.inWindow(certs.RenewalPoint(w.cert), m.jitter)
	o.handed(w.handed, s.handed)
	m.last, m.stored = s, w.stored
	m.renewalSteps, m.gateSteps = 0, 0
}

// step moves the clock by s.
func (m *loopModel) step(o loopObserver, s time.Duration) {
	m.now = m.now.Add(s)
	if m.now.Before(m.wakeAt) {
		o.nothing()
		return
	}
	m.wake(o, true)
}

// requeue is a Requeue of the volume.
func (m *loopModel) requeue(o loopObserver) {
	if m.waiting == waitAfterError {
		o.nothing()
		return
	}
	m.wake(o, true)
}

// newRegistration is the state of a new registration of the volume.
func (m *loopModel) newRegistration() {
	m.last, m.renewalSteps, m.gateSteps, m.firstTurn = nil, 0, 0, true
}

// timingHarness drives the real manager and checks what it does against the model.
type timingHarness struct {
	t        *testing.T
	e        *env
	rng      *rand.Rand
	seed     int64
	seq      int
	trace    []string
	outcome  atomic.Int32 // the next attempt's scripted modelOutcome
	persist  atomic.Int32 // what the next WriteKeypair persists
	life     atomic.Int64 // the requested certificate lifetime
	attempts chan time.Time
	writes   chan written

	sequences, actions, attemptCount, successes int
}

func (h *timingHarness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("seed %d, sequence %d: %s\nlast actions:\n  %s", h.seed, h.seq, fmt.Sprintf(format, args...), strings.Join(h.trace[max(0, len(h.trace)-12):], "\n  "))
}

func (h *timingHarness) note(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
}

func (h *timingHarness) nextTimer() time.Duration {
	h.t.Helper()
	select {
	case d := <-h.e.clock.Timers:
		return d
	case <-time.After(pollTimeout):
		h.fail("no timer was created")
		return 0
	}
}

func (h *timingHarness) wait(d time.Duration, blocks bool) {
	h.t.Helper()
	h.note("  model: wait %v", d)
	if got := h.nextTimer(); got != d {
		h.fail("the loop waits %v, the model %v", got, d)
	}
	if blocks {
		h.untilWaiters(1)
	}
}

func (h *timingHarness) attempt(at time.Time, background bool) (modelOutcome, *written) {
	h.t.Helper()
	outcome := modelOutcome(h.outcome.Load())
	h.note("  model: attempt at %v (%v)", at.Sub(start), outcome)
	h.attemptCount++
	if background {
		if got := h.nextTimer(); got != issueTimeout {
			h.fail("the loop waits %v where the model attempts (a %v deadline)", got, issueTimeout)
		}
	}
	h.gateAsked(at)
	if outcome != scriptSuccess {
		return outcome, nil
	}
	return outcome, h.written()
}

// gateAsked waits for the driver's gate to be asked, which must be at the model's at.
func (h *timingHarness) gateAsked(at time.Time) {
	h.t.Helper()
	select {
	case got := <-h.attempts:
		if !got.Equal(at) {
			h.fail("gate asked at %v, the model's at %v", got.Sub(start), at.Sub(start))
		}
	case <-time.After(pollTimeout):
		h.fail("the gate was not asked")
	}
}

// written waits for a key pair to be written, and returns what WriteKeypair saw and did.
func (h *timingHarness) written() *written {
	h.t.Helper()
	h.successes++
	select {
	case w := <-h.writes:
		return &w
	case <-time.After(pollTimeout):
		h.fail("no key pair was written")
		return nil
	}
}

func (h *timingHarness) handed(got, want time.Time) {
	h.t.Helper()
	if !got.Equal(want) {
		h.fail("WriteKeypair was handed NextIssuanceTime %v, the model's default is %v", got, want)
	}
}

func (h *timingHarness) nothing() {
	h.t.Helper()
	if w := h.e.clock.Waiters(); w != 1 || len(h.e.clock.Timers) != 0 {
		h.fail("the loop acted where the model does nothing (waiters %d, new timers %d)", w, len(h.e.clock.Timers))
	}
}

// untilWaiters waits, bounded, until the fake clock has n waiters.
func (h *timingHarness) untilWaiters(n int) {
	h.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for i := 0; h.e.clock.Waiters() != n; i++ {
		if time.Now().After(deadline) {
			h.fail("the clock has %d waiters, want %d", h.e.clock.Waiters(), n)
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// driver is the test driver: its gate and key generation follow the scripted outcome, and its
// WriteKeypair persists what the script says, computed from the certificate as drivers do.
func (h *timingHarness) driver(o *Options) {
	e := h.e
	o.ReadyToRequest = func(metadata.Metadata) (bool, string) {
		h.attempts <- e.clock.Now()
		return modelOutcome(h.outcome.Load()) != scriptGatePending, "scripted"
	}
	o.GeneratePrivateKey = func(metadata.Metadata) (crypto.PrivateKey, error) {
		if modelOutcome(h.outcome.Load()) == scriptFailure {
			return nil, errors.New("scripted failure")
		}
		return testkit.NewKey()
	}
	o.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
		return &CertificateRequestBundle{
			Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
			Namespace: "ns",
			IssuerRef: cmmeta.IssuerReference{Name: "issuer"},
			Duration:  time.Duration(h.life.Load()),
		}, nil
	}
	o.WriteKeypair = func(meta metadata.Metadata, _ crypto.PrivateKey, chain, _ []byte) error {
		cert, err := certs.ParseLeaf(chain)
		if err != nil {
			return err
		}
		w := written{handed: *meta.NextIssuanceTime, cert: cert}
		life := cert.NotAfter.Sub(cert.NotBefore)
		renewBefore := func(lo, hi time.Duration) { // a renew-before in [lo, hi)
			t := cert.NotAfter.Add(-(lo + time.Duration(h.rng.Int63n(int64(max(hi-lo, 1))))))
			meta.NextIssuanceTime = &t
		}
		switch mode := persistMode(h.persist.Load()); mode {
		case persistNothing:
			stored, err := e.store.ReadMetadata(meta.VolumeID)
			if err != nil {
				return err
			}
			w.stored = stored.NextIssuanceTime
			h.writes <- w
			return nil
		case persistNil:
			meta.NextIssuanceTime = nil
		case persistZero:
			meta.NextIssuanceTime = &time.Time{}
		case persistEarlier:
			renewBefore(life/3+1, life)
		case persistLater:
			renewBefore(1, life/3)
		case persistPast:
			renewBefore(life+1, 2*life)
		case persistAfterExpiry:
			renewBefore(-life, 0)
		}
		w.stored = meta.NextIssuanceTime
		if err := e.store.WriteMetadata(meta.VolumeID, meta); err != nil {
			return err
		}
		h.writes <- w
		return nil
	}
}

// signer signs every request as it is created, on the fake clock's now, so an attempt is over
// without the clock moving.
func (h *timingHarness) signer() {
	e := h.e
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		chain, err := e.ca.Sign(req.Spec.Request, e.clock.Now(), req.Spec.Duration.Duration)
		if err != nil {
			return true, nil, err
		}
		req.Status.Certificate, req.Status.CA = chain, e.ca.CertPEM
		req.Status.Conditions = []cmapi.CertificateRequestCondition{
			{Type: cmapi.CertificateRequestConditionApproved, Status: cmmeta.ConditionTrue, Reason: "Approved"},
			{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue, Reason: cmapi.CertificateRequestReasonIssued},
		}
		return false, nil, nil
	})
}

// pick scripts the next attempt's outcome and what its WriteKeypair persists.
func (h *timingHarness) pick() {
	r := h.rng.Intn(100)
	outcome := scriptSuccess
	switch {
	case r >= 80:
		outcome = scriptFailure
	case r >= 55:
		outcome = scriptGatePending
	}
	h.outcome.Store(int32(outcome))
	h.persist.Store(int32(h.rng.Intn(int(persistModes))))
}

// stepSize picks a clock step of any size, many of them at or around the loop's wake-up.
func (h *timingHarness) stepSize(untilWake, life time.Duration) time.Duration {
	r := untilWake
	switch h.rng.Intn(11) {
	case 0, 1:
		return r
	case 2:
		return max(r-time.Nanosecond, time.Nanosecond)
	case 3:
		return r + time.Nanosecond
	case 4:
		return time.Duration(1 + h.rng.Int63n(int64(max(r, 1))))
	case 5:
		return r + time.Duration(h.rng.Int63n(int64(2*life)))
	case 6:
		return time.Nanosecond
	case 7:
		return time.Millisecond
	case 8:
		return time.Duration(h.rng.Int63n(int64(72 * time.Hour)))
	case 9:
		return 999 * time.Millisecond
	default:
		return r + time.Duration(h.rng.Int63n(int64(5*time.Second)))
	}
}

var lifetimes = []time.Duration{3 * time.Second, 10 * time.Second, 90 * time.Second, time.Hour, 24 * time.Hour, 90 * 24 * time.Hour}

// sequence runs one volume from its registration through random actions to its unmanaging.
func (h *timingHarness) sequence(actions int) {
	e := h.e
	h.seq++
	h.sequences++
	h.trace = h.trace[:0]
	id := fmt.Sprintf("v%d-%d", h.seed, h.seq)
	life := lifetimes[h.rng.Intn(len(lifetimes))] + time.Duration(h.rng.Intn(3))*time.Second
	h.life.Store(int64(life))
	m := &loopModel{
		id: id, now: e.clock.Now(), jitter: e.opts.RenewalJitter, firstTurn: true,
		renewalBase: e.opts.RenewalBackoffConfig.Duration, renewalCap: e.opts.RenewalBackoffConfig.Cap,
		gateBase: e.opts.GateBackoffConfig.Duration, gateCap: e.opts.GateBackoffConfig.Cap,
	}
	// What a previous process or the publish left in the metadata.
	switch h.rng.Intn(4) {
	case 1:
		m.stored = &time.Time{} // ContinueOnNotReady
	case 2:
		t := m.now.Add(time.Duration(h.rng.Int63n(int64(2*life))) - life)
		m.stored = &t
	}
	meta := metadata.Metadata{VolumeID: id, TargetPath: "/t/" + id, NextIssuanceTime: m.stored}
	if _, err := e.store.RegisterMetadata(meta); err != nil {
		h.t.Fatal(err)
	}
	if err := e.store.SetMounted(id); err != nil {
		h.t.Fatal(err)
	}
	h.pick()
	switch h.rng.Intn(3) {
	case 0:
		h.note("start: ManageVolumeImmediate, stored %v", m.stored)
		h.outcome.Store(int32(scriptSuccess)) // a caller's failure leaves no loop to model
		errc := make(chan error, 1)
		go func() { _, err := e.m.ManageVolumeImmediate(context.Background(), id); errc <- err }()
		if m.stored == nil || m.stored.IsZero() {
			_, w := h.attempt(m.now, false)
			m.succeeded(h, w)
			// Scripting the next attempt now is safe: the loop cannot attempt within the second
			// after a success, and the clock has not moved.
			h.pick()
		}
		m.wake(h, true)
		if err := <-errc; err != nil {
			h.fail("ManageVolumeImmediate: %v", err)
		}
	case 1:
		// The node server's publish with ContinueOnNotReady: it asks the gate once; closed, the
		// volume is handed to its loop; open, the publish makes its own attempt without asking
		// again, unless the volume has a certificate.
		if modelOutcome(h.outcome.Load()) == scriptFailure {
			h.outcome.Store(int32(scriptSuccess)) // a caller's failure leaves no loop to model
		}
		open := modelOutcome(h.outcome.Load()) == scriptSuccess
		h.note("start: a publish with ContinueOnNotReady, gate open %v, stored %v", open, m.stored)
		meta, err := e.store.ReadMetadata(id)
		if err != nil {
			h.t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- e.m.ManageVolumeForPublish(context.Background(), meta, true) }()
		h.gateAsked(m.now)
		if open && (m.stored == nil || m.stored.IsZero()) {
			h.attemptCount++
			m.succeeded(h, h.written())
			h.pick() // as for ManageVolumeImmediate above
		}
		m.wake(h, true)
		if err := <-errc; err != nil {
			h.fail("ManageVolumeForPublish: %v", err)
		}
	default:
		h.note("start: ManageVolume, stored %v", m.stored)
		e.m.ManageVolume(id)
		m.wake(h, true)
	}

	for i := 0; i < actions; i++ {
		h.actions++
		h.pick()
		switch r := h.rng.Intn(100); {
		case r < 78:
			s := h.stepSize(m.wakeAt.Sub(m.now), life)
			h.note("step %v (wake in %v, next %v, persist %v)", s, m.wakeAt.Sub(m.now), modelOutcome(h.outcome.Load()), persistMode(h.persist.Load()))
			e.clock.Step(s)
			m.step(h, s)
		case r < 92:
			h.note("requeue (next %v)", modelOutcome(h.outcome.Load()))
			e.m.Requeue(id)
			m.requeue(h)
		case r < 98:
			h.note("unmanage and manage again")
			e.m.UnmanageVolume(id)
			h.untilWaiters(0)
			m.newRegistration()
			e.m.ManageVolume(id)
			m.wake(h, true)
		default:
			h.note("restart")
			e.m.Stop()
			h.untilWaiters(0)
			e.start()
			m.newRegistration()
			m.wake(h, true)
		}
	}
	e.m.UnmanageVolume(id)
	h.untilWaiters(0)
	if err := e.store.RemoveVolume(id); err != nil {
		h.t.Fatal(err)
	}
}

// TestLoopTimingMatchesModel drives the real manager on the fake clock through random sequences
// (fixed seeds) of registrations (ManageVolume, ManageVolumeImmediate, a publish with
// ContinueOnNotReady, a resumption after a restart, a new registration) over stored times nil, zero, past and future; attempts that
// succeed, find the gate closed or fail; drivers that persist the default they were handed,
// nothing, nil, zero, or their own renewal point earlier or later than the default, in the past
// or after expiry; Requeues; and clock steps of every size. Every timer the loop creates and the
// clock at every attempt must be the reference model's.
func TestLoopTimingMatchesModel(t *testing.T) {
	seeds, sequences, actions := []int64{1, 2, 3, 4, 5, 6, 7, 8}, 250, 24
	if testing.Short() {
		sequences = 40
	}
	began := time.Now()
	var total timingHarness
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			renewal := []time.Duration{time.Second, 7 * time.Second, 30 * time.Second}[rng.Intn(3)]
			gate := []time.Duration{250 * time.Millisecond, time.Second, 3 * time.Second}[rng.Intn(3)]
			h := &timingHarness{t: t, rng: rng, seed: seed, attempts: make(chan time.Time, 1), writes: make(chan written, 1)}
			h.e = newEnv(t, func(o *Options) {
				// Tens of thousands of attempts: their log lines would cost more than they do.
				discard := logr.Discard()
				o.Log = &discard
				o.RenewalBackoffConfig = noJitter(renewal, renewal*time.Duration(1+rng.Intn(10)))
				o.GateBackoffConfig = noJitter(gate, gate*time.Duration(1+rng.Intn(10)))
				if seed%2 == 0 {
					o.RenewalJitter = 0.4
				}
			})
			// The plain object tracker: the managed-fields tracker's deep copies on every create
			// would cost most of this test's time.
			h.e.client = fake.NewSimpleClientset()
			h.e.opts.Client = h.e.client
			h.driver(&h.e.opts)
			h.signer()
			h.e.start()
			for i := 0; i < sequences; i++ {
				h.sequence(actions)
			}
			total.sequences += h.sequences
			total.actions += h.actions
			total.attemptCount += h.attemptCount
			total.successes += h.successes
		})
	}
	t.Logf("%d sequences, %d actions, %d attempts (%d successes) in %v",
		total.sequences, total.actions, total.attemptCount, total.successes, time.Since(began).Round(time.Millisecond))
}
