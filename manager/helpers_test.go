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
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/internal/pendingkeys"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

const pollTimeout = 10 * time.Second

// env is one manager on a fake clientset, a MemoryFS, and a recording fake clock.
type env struct {
	t       *testing.T
	started int // managers started on client, for waitInformerLive
	clock   *testkit.RecordingClock
	client  *fake.Clientset
	// rbac is the manager's client when the test leaves Options.Client as client: the fake,
	// authorised as the consumers' charts authorise the driver (testkit.ChartVerbs). A test
	// that expects refusals sets allowRefusals; otherwise any refusal fails it.
	rbac          *testkit.RBACClient
	allowRefusals bool
	store         *storage.MemoryFS
	ca            *testkit.CA
	registry      *prometheus.Registry
	m             *Manager
	opts          Options

	gateOpen   atomic.Bool
	gateCalls  atomic.Int64
	failKeygen atomic.Bool
	// requeueOnError makes a failing attempt call Requeue before it returns, so the Requeue is
	// pending when the loop enters its error wait.
	requeueOnError atomic.Bool
	mu             sync.Mutex
	written        map[string][]crypto.PrivateKey
	// logs keeps every line the manager logs (at verbosity up to 4), for what an operator reads,
	// unless the test sets Options.Log itself.
	logs *testkit.LogLines
	// loopsStarted counts, by volume ID, the renewal loops the managers started, and
	// accessChecked is closed once the latest manager's start-up access check has ended (both
	// through Options.testHooks, guarded by mu).
	loopsStarted  map[string]int
	accessChecked <-chan struct{}
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func noJitter(d, max time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: d, Factor: 2, Cap: max, Steps: math.MaxInt32}
}

func newEnv(t *testing.T, configure func(*Options)) *env {
	t.Helper()
	ca, err := testkit.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		t:            t,
		clock:        testkit.NewRecordingClock(start),
		client:       fake.NewClientset(),
		store:        storage.NewMemoryFS(),
		ca:           ca,
		registry:     prometheus.NewRegistry(),
		written:      map[string][]crypto.PrivateKey{},
		logs:         &testkit.LogLines{},
		loopsStarted: map[string]int{},
	}
	e.gateOpen.Store(true)
	log := logr.New(teeSink{testr.New(t).GetSink(), e.logs.LoggerV(4).GetSink(), t.Helper})
	e.opts = Options{
		Client:         e.client,
		MetadataReader: e.store,
		Clock:          e.clock,
		Log:            &log,
		NodeID:         "test-node",
		GeneratePrivateKey: func(meta metadata.Metadata) (crypto.PrivateKey, error) {
			if e.failKeygen.Load() {
				if e.requeueOnError.Load() {
					e.m.Requeue(meta.VolumeID)
				}
				return nil, errors.New("keygen broken")
			}
			return testkit.NewKey()
		},
		GenerateRequest: func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
			return &CertificateRequestBundle{
				Request:     &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
				Namespace:   "ns",
				IssuerRef:   cmmeta.IssuerReference{Name: "issuer", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:    time.Hour,
				Usages:      []cmapi.KeyUsage{cmapi.UsageDigitalSignature},
				Annotations: map[string]string{"a": "b"},
			}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(e.store, func(meta metadata.Metadata, key crypto.PrivateKey, _ []byte) {
			e.mu.Lock()
			e.written[meta.VolumeID] = append(e.written[meta.VolumeID], key)
			e.mu.Unlock()
		}),
		ReadyToRequest: func(metadata.Metadata) (bool, string) {
			e.gateCalls.Add(1)
			if e.gateOpen.Load() {
				return true, ""
			}
			return false, "pod has no IP yet"
		},
		RenewalBackoffConfig: noJitter(30*time.Second, 5*time.Minute),
		GateBackoffConfig:    noJitter(time.Second, 10*time.Second),
		Metrics:              metrics.New("test-node", &log, e.registry, e.store, nil),
		testHooks: testHooks{
			loopStarted: func(volumeID string) {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.loopsStarted[volumeID]++
			},
			accessCheckStarted: func(ended <-chan struct{}) {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.accessChecked = ended
			},
		},
	}
	if configure != nil {
		configure(&e.opts)
	}
	return e
}

func (e *env) start() *Manager {
	e.t.Helper()
	if c, ok := e.opts.Client.(*fake.Clientset); ok && c == e.client {
		e.rbac = testkit.WithRBAC(e.client, testkit.DriverAccount, testkit.ChartVerbs...)
		e.opts.Client = e.rbac
		e.t.Cleanup(func() {
			if n := e.rbac.RefusedTotal(); n > 0 && !e.allowRefusals {
				e.t.Errorf("the manager made calls beyond the charts' verbs: %v", e.rbac)
			}
		})
	}
	m, err := NewManager(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = m
	e.t.Cleanup(m.Stop)
	e.started++
	e.waitInformerLive()
	return m
}

// waitInformerLive makes sure the informer's watch of the latest manager started is
// established, so no event is lost between its initial list and its watch (a property of fake
// clientsets).
func (e *env) waitInformerLive() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	if err := testkit.WaitInformersWatching(ctx, e.client, e.started); err != nil {
		e.t.Fatal(err)
	}
}

// poll waits, with a bound, for cond; it is used only for events that happen on other
// goroutines (informer, loop), never to let time pass.
func (e *env) poll(what string, cond func() bool) {
	e.t.Helper()
	if !pollFor(cond) {
		e.t.Fatalf("timed out waiting for %s", what)
	}
}

// pollFor waits, with a bound, for cond, and reports whether it came; for a goroutine other than
// the test's, which cannot end the test.
func pollFor(cond func() bool) bool {
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// register stores a volume's metadata, optionally as already mounted.
func (e *env) register(id string, mounted bool) metadata.Metadata {
	e.t.Helper()
	meta := metadata.Metadata{
		VolumeID:   id,
		TargetPath: "/target/" + id,
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/pod.name":      "pod-" + id,
			"csi.storage.k8s.io/pod.namespace": "ns",
			"csi.storage.k8s.io/pod.uid":       "uid-" + id,
		},
	}
	if _, err := e.store.RegisterMetadata(meta); err != nil {
		e.t.Fatal(err)
	}
	if mounted {
		meta.Mounted = true
		if err := e.store.WriteMetadata(id, meta); err != nil {
			e.t.Fatal(err)
		}
	}
	return meta
}

// nextTimer returns the duration of the next timer the manager creates.
func (e *env) nextTimer() time.Duration {
	e.t.Helper()
	return e.clock.NextTimer(e.t, pollTimeout)
}

// expectAttemptThenWait asserts that the loop makes one attempt (its 60 s deadline timer) and
// then waits exactly want, and that it is blocked on that wait.
func (e *env) expectAttemptThenWait(want time.Duration) {
	e.t.Helper()
	if d := e.nextTimer(); d != issueTimeout {
		e.t.Fatalf("expected an attempt (a %v deadline timer), got a %v timer", issueTimeout, d)
	}
	e.expectWait(want)
}

// expectWait asserts the next timer is a wait of exactly want, and waits until the loop blocks
// on it (one waiter on the clock).
func (e *env) expectWait(want time.Duration) {
	e.t.Helper()
	if d := e.nextTimer(); d != want {
		e.t.Fatalf("loop waits %v, want %v", d, want)
	}
	e.poll("the loop to block on its timer", func() bool { return e.clock.Waiters() == 1 })
}

// stepNotYet steps the clock to just before the wait ends and asserts nothing happened.
func (e *env) stepNotYet(d time.Duration) {
	e.t.Helper()
	e.clock.Step(d - time.Millisecond)
	if w := e.clock.Waiters(); w != 1 || len(e.clock.Timers) != 0 {
		e.t.Fatalf("the loop woke before %v had passed (waiters %d, new timers %d)", d, w, len(e.clock.Timers))
	}
}

// stepWait steps through a wait of exactly d, checking it does not end early.
func (e *env) stepWait(d time.Duration) {
	e.t.Helper()
	e.stepNotYet(d)
	e.clock.Step(time.Millisecond)
}

func (e *env) requests() []cmapi.CertificateRequest {
	e.t.Helper()
	list, err := e.client.CertmanagerV1().CertificateRequests("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// waitForPending waits, through a watch on the fake API, until a request that is not finished
// exists, and returns it.
func (e *env) waitForPending() *cmapi.CertificateRequest {
	e.t.Helper()
	w, err := e.client.CertmanagerV1().CertificateRequests("ns").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(pollTimeout)
	for {
		for _, r := range e.requests() {
			if !testkit.IsFinished(&r) {
				return r.DeepCopy()
			}
		}
		select {
		case <-w.ResultChan():
		case <-timeout:
			e.t.Fatal("timed out waiting for a pending CertificateRequest")
		}
	}
}

// manageInBackground calls ManageVolumeImmediate for a registered volume on another goroutine,
// bounded by pollTimeout, and returns where its error will arrive. When the test ends, the call
// is cancelled and waited for (before the manager stops), so that it logs nothing after the test:
// Stop never waits for a caller's goroutine.
func (e *env) manageInBackground(id string) <-chan error {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	done := make(chan error, 1)
	finished := make(chan struct{})
	e.t.Cleanup(func() {
		cancel()
		<-finished
	})
	go func() {
		defer close(finished)
		_, err := e.m.ManageVolumeImmediate(ctx, id)
		done <- err
	}()
	return done
}

// manageAndIssue calls ManageVolumeImmediate for a registered volume, signs its request with
// the test CA, and returns the signed request once the call has succeeded.
func (e *env) manageAndIssue(id string) *cmapi.CertificateRequest {
	e.t.Helper()
	done := make(chan error, 1)
	go func() { _, err := e.m.ManageVolumeImmediate(context.Background(), id); done <- err }()
	issued := e.issuePending()
	if err := <-done; err != nil {
		e.t.Fatal(err)
	}
	return issued
}

// issuePending signs the pending request with the test CA, valid from the fake clock's now.
func (e *env) issuePending() *cmapi.CertificateRequest {
	e.t.Helper()
	req := e.waitForPending()
	issued, err := testkit.Issue(context.Background(), e.client, e.ca, req, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return issued
}

func (e *env) counter(name, volume string) float64 {
	e.t.Helper()
	return e.metricValue(name, func(m *dto.Metric) bool { return labelValue(m, "volume") == volume })
}

// metricValue returns the value (gauge or counter) of the first series of the family name that
// match selects; 0 if there is none.
func (e *env) metricValue(name string, match func(*dto.Metric) bool) float64 {
	e.t.Helper()
	families, err := e.registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !match(m) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// defaultNextIssuanceTime is the renewal point of a chain's leaf, without jitter.
func defaultNextIssuanceTime(chain []byte) (time.Time, error) {
	cert, err := certs.ParseLeaf(chain)
	if err != nil {
		return time.Time{}, err
	}
	return certs.RenewalPoint(cert), nil
}

// withExtendedMetrics turns on the metric families upstream lacks (gate-pending, admission,
// publish-to-first-certificate, the state gauge), for the tests that read them, then applies
// configure.
func withExtendedMetrics(configure func(*Options)) func(*Options) {
	return func(o *Options) {
		o.Metrics.EnableExtendedMetrics()
		if configure != nil {
			configure(o)
		}
	}
}

// teeSink sends every log line to both sinks (each at the verbosity it takes); helper is the
// test's Helper, so that a line's location is the caller's.
type teeSink struct {
	a, b   logr.LogSink
	helper func()
}

func (t teeSink) Init(info logr.RuntimeInfo) {
	t.a.Init(info)
	t.b.Init(info)
}

func (t teeSink) Enabled(level int) bool { return t.a.Enabled(level) || t.b.Enabled(level) }

func (t teeSink) Info(level int, msg string, keysAndValues ...any) {
	t.helper()
	for _, s := range []logr.LogSink{t.a, t.b} {
		if s.Enabled(level) {
			s.Info(level, msg, keysAndValues...)
		}
	}
}

func (t teeSink) Error(err error, msg string, keysAndValues ...any) {
	t.helper()
	t.a.Error(err, msg, keysAndValues...)
	t.b.Error(err, msg, keysAndValues...)
}

func (t teeSink) WithValues(keysAndValues ...any) logr.LogSink {
	return teeSink{t.a.WithValues(keysAndValues...), t.b.WithValues(keysAndValues...), t.helper}
}

func (t teeSink) WithName(name string) logr.LogSink {
	return teeSink{t.a.WithName(name), t.b.WithName(name), t.helper}
}

// logged returns the lines the manager logged with the message msg.
func (e *env) logged(msg string) []string {
	return e.logs.Matching(`"msg"="` + msg + `"`)
}

// waitLogged waits (bounded) until the manager has logged n lines with the message msg, and
// returns them.
func (e *env) waitLogged(msg string, n int) []string {
	e.t.Helper()
	var lines []string
	e.poll(fmt.Sprintf("%d log lines %q", n, msg), func() bool {
		lines = e.logged(msg)
		return len(lines) >= n
	})
	return lines
}

// loopsStartedFor is how many renewal loops the managers started for the volume ID.
func (e *env) loopsStartedFor(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loopsStarted[id]
}

// checkEnded is closed once the start-up access check of the latest manager started has ended.
func (e *env) checkEnded() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accessChecked
}

// alreadyManaged reports whether the volume is managed, as ManageVolume tells it: it reports
// false, doing nothing, for a volume managed already (on a manager that is not stopped). A
// volume it finds unmanaged is managed from then on, its loop started, so a test asks it where
// that no longer matters.
func alreadyManaged(m *Manager, id string) bool {
	return !m.ManageVolume(id)
}

// managedCount is how many volumes the state gauge counts, in every state: the managed volumes
// (the gauge must be on).
func (e *env) managedCount() float64 {
	n := 0.0
	for _, v := range e.states() {
		n += v
	}
	return n
}

// persistedKey returns the request that the pending key persisted for the volume belongs to
// (namespace/name), if the store holds one.
func (e *env) persistedKey(id string) (reqKey string, ok bool) {
	e.t.Helper()
	data, err := e.store.ReadPendingKey(id)
	if errors.Is(err, storage.ErrNotFound) {
		return "", false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		e.t.Fatalf("the pending key persisted for %s is not PEM", id)
	}
	return block.Headers[pendingkeys.RequestHeader], true
}

// expectKeyForgotten asserts that nothing is kept of the key of the volume's last request once
// its key pair is written: no pending key is left in the store, and the volume's renewal, once
// due, makes a new request. A key still held would resume the issued request instead, and write
// its certificate again, with no create.
func (e *env) expectKeyForgotten(id string) {
	e.t.Helper()
	if reqKey, ok := e.persistedKey(id); ok {
		e.t.Fatalf("the key of %s is still persisted after its key pair was written", reqKey)
	}
	meta, err := e.store.ReadMetadata(id)
	if err != nil || meta.NextIssuanceTime == nil {
		e.t.Fatalf("the volume's renewal time: %v, %v", meta.NextIssuanceTime, err)
	}
	creates := testkit.CountActions(e.client, "create")
	e.clock.SetTime(*meta.NextIssuanceTime)
	e.poll("the renewal to create a request, not resume the issued one with a kept key", func() bool {
		return testkit.CountActions(e.client, "create") > creates
	})
}

// drainTimers forgets the timers reported so far (a manager stopped before made them).
func (e *env) drainTimers() {
	for len(e.clock.Timers) > 0 {
		<-e.clock.Timers
	}
}

// expectLoopWait reads the timers the manager creates until the loop's wait of exactly wait,
// and waits until the clock holds waiters timers in all (the loop blocked on that wait). It
// asserts that the timers longer than the wait created before it, since the timers were last
// read, are exactly deadlines: the certificate's deadlines (overdue, expiry, the pod condition's
// margin), which the loop's turn arms before it waits, and which all lie past its renewal time.
func (e *env) expectLoopWait(wait time.Duration, waiters int, deadlines ...time.Duration) {
	e.t.Helper()
	var longer []time.Duration
	for {
		d := e.nextTimer()
		if d == wait {
			break
		}
		if d > wait {
			longer = append(longer, d)
		}
	}
	slices.Sort(longer)
	want := slices.Sorted(slices.Values(deadlines))
	if !slices.Equal(longer, want) {
		e.t.Fatalf("the certificate's timers before the loop's %v wait: %v, want %v", wait, longer, want)
	}
	e.poll(fmt.Sprintf("the loop to block on its %v wait (%d waiters)", wait, waiters), func() bool {
		return e.clock.Waiters() == waiters
	})
}
