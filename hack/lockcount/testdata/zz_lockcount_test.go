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

// hack/lockcount writes this test into a throwaway copy of the repository whose lock owners it
// has instrumented, and runs it there: one first publish and one renewal on a fake clock, with
// the lock acquisitions of each written to $LOCKCOUNT_OUT.

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/lockcount"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// lockcountHit is one acquisition as written for hack/lockcount. Class is "publish" (the
// publishing goroutine, entry to return), "first turn" (goroutines the publish started),
// "renewal" (goroutines started by the clock step to the renewal point), "other" (any other
// goroutine: the informer's handlers, the pod-condition writer) or "test" (this test's own).
type lockcountHit struct {
	Owner string `json:"owner"`
	Class string `json:"class"`
	G     uint64 `json:"g"`
	Stack string `json:"stack"`
}

type lockcountWindow struct {
	Name string         `json:"name"`
	Hits []lockcountHit `json:"hits"`
}

const lockcountBound = 20 * time.Second

func TestLockCount(t *testing.T) {
	out := os.Getenv("LOCKCOUNT_OUT")
	if out == "" {
		t.Fatal("LOCKCOUNT_OUT is not set: this test is run by hack/lockcount")
	}
	self, _ := lockcount.Goid()
	child := make(chan []uint64)
	go func() { _, anc := lockcount.Goid(); child <- anc }()
	if anc := <-child; !lockcount.Descends(anc, self) {
		t.Fatal("goroutines' creators are not known: run with GODEBUG=tracebackancestors=100")
	}

	const id, podName, podUID = "vol-1", "pod-1", "uid-1"
	ca, err := testkit.NewCA("lockcount-ca")
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cm := fake.NewClientset()
	kube := kubefake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: "ns", UID: types.UID(podUID)}})
	store := storage.NewMemoryFS()
	const condType = corev1.PodConditionType("csi.example.com/certificate-ready")

	// Each write of a key pair records the goroutine that made it, to check that the operation
	// counted is the one that wrote.
	var (
		writesMu sync.Mutex
		writes   []writer
	)
	log := logr.Discard()
	opts := Options{
		Client:             cm,
		MetadataReader:     store,
		Clock:              clk,
		Log:                &log,
		NodeID:             "node-1",
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
			return &CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
				Namespace: "ns",
				IssuerRef: cmmeta.IssuerReference{Name: "issuer", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:  time.Hour,
				Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature},
			}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(store, func(metadata.Metadata, crypto.PrivateKey, []byte) {
			g, anc := lockcount.Goid()
			writesMu.Lock()
			writes = append(writes, writer{g: g, anc: anc})
			writesMu.Unlock()
		}),
		ReadyToRequest: func(metadata.Metadata) (bool, string) { return true, "" },
		PodCondition:   &PodCondition{Type: condType, Client: kube.CoreV1()},
		EventRecorder:  record.NewFakeRecorder(1000),
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), lockcountBound)
	defer cancel()
	if err := testkit.WaitInformerWatching(ctx, cm); err != nil {
		t.Fatal(err)
	}

	// The node server's publish: register, read once, ManageVolumeForPublish.
	meta := metadata.Metadata{
		VolumeID:   id,
		TargetPath: "/target/" + id,
		VolumeContext: map[string]string{
			metadata.PodNameVolumeContextKey:      podName,
			metadata.PodNamespaceVolumeContextKey: "ns",
			metadata.PodUIDVolumeContextKey:       podUID,
		},
	}
	if _, err := store.RegisterMetadata(meta); err != nil {
		t.Fatal(err)
	}
	stored, err := store.ReadMetadata(id)
	if err != nil {
		t.Fatal(err)
	}

	var windows []lockcountWindow

	// (a) A first publish: the publishing goroutine from entry to return; then the goroutines
	// it started, until every one has ended.
	lockcount.Start()
	pub := make(chan uint64, 1)
	done := make(chan error, 1)
	go func() {
		g, _ := lockcount.Goid()
		pub <- g
		done <- m.ManageVolumeForPublish(ctx, stored, false)
	}()
	p := <-pub
	signPending(t, ctx, cm, ca, clk.Now())
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitEnded(t, p)
	hits := lockcount.Stop()
	windows = append(windows, classify("publish", hits, self, func(g uint64, anc []uint64) string {
		switch {
		case g == p:
			return "publish"
		case lockcount.Descends(anc, p):
			return "first turn"
		}
		return ""
	}))
	if w := writesOf(&writesMu, &writes); len(w) != 1 || w[0].g != p {
		t.Fatalf("the publish did not write the key pair on its own goroutine: %+v (publish %d)", w, p)
	}
	// The pod condition's writer answers the publish on its own goroutine: let it finish
	// before the renewal is counted.
	pollUntil(t, "the pod condition True", func() bool {
		obj, err := kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", podName)
		if err != nil {
			return false
		}
		for _, c := range obj.(*corev1.Pod).Status.Conditions {
			if c.Type == condType && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})

	// (b) A renewal: the clock steps to the renewal point on a goroutine of its own; every
	// goroutine that step starts is the renewal's, until all have ended (the loop waits again).
	issued, err := store.ReadMetadata(id)
	if err != nil {
		t.Fatal(err)
	}
	if issued.NextIssuanceTime == nil || !issued.NextIssuanceTime.After(clk.Now()) {
		t.Fatalf("no renewal point ahead after the publish: %v", issued.NextIssuanceTime)
	}
	lockcount.Start()
	step := make(chan uint64, 1)
	go func() {
		g, _ := lockcount.Goid()
		step <- g
		clk.Step(issued.NextIssuanceTime.Sub(clk.Now()))
	}()
	r := <-step
	signPending(t, ctx, cm, ca, *issued.NextIssuanceTime)
	pollUntil(t, "the renewal's key pair written", func() bool { return len(writesOf(&writesMu, &writes)) == 2 })
	waitEnded(t, r)
	hits = lockcount.Stop()
	windows = append(windows, classify("renewal", hits, self, func(g uint64, anc []uint64) string {
		if g == r || lockcount.Descends(anc, r) {
			return "renewal"
		}
		return ""
	}))
	if w := writesOf(&writesMu, &writes); !lockcount.Descends(w[1].anc, r) {
		t.Fatalf("the renewal's key pair was written on a goroutine the clock step did not start: %+v (step %d)", w[1], r)
	}

	data, err := json.MarshalIndent(windows, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type writer struct {
	g   uint64
	anc []uint64
}

func writesOf(mu *sync.Mutex, w *[]writer) []writer {
	mu.Lock()
	defer mu.Unlock()
	return append([]writer(nil), *w...)
}

// classify names each hit's class: of the operation (op), the test's own goroutine, or other.
func classify(name string, hits []lockcount.Hit, self uint64, op func(g uint64, anc []uint64) string) lockcountWindow {
	w := lockcountWindow{Name: name}
	for _, h := range hits {
		class := op(h.G, h.Ancestors)
		switch {
		case class != "":
		case h.G == self:
			class = "test"
		default:
			class = "other"
		}
		w.Hits = append(w.Hits, lockcountHit{Owner: h.Owner, Class: class, G: h.G, Stack: h.Stack})
	}
	return w
}

// signPending signs the one request not yet finished, once it exists, valid from notBefore.
func signPending(t *testing.T, ctx context.Context, cm *fake.Clientset, ca *testkit.CA, notBefore time.Time) {
	t.Helper()
	var pending *cmapi.CertificateRequest
	pollUntil(t, "a pending CertificateRequest", func() bool {
		list, err := cm.CertmanagerV1().CertificateRequests("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if !testkit.IsFinished(&list.Items[i]) {
				pending = &list.Items[i]
				return true
			}
		}
		return false
	})
	if _, err := testkit.Issue(ctx, cm, ca, pending, notBefore); err != nil {
		t.Fatal(err)
	}
}

// waitEnded waits until root and every goroutine it started, directly or not, have ended.
func waitEnded(t *testing.T, root uint64) {
	t.Helper()
	var alive []uint64
	pollUntil(t, "the operation's goroutines to end", func() bool {
		alive = alive[:0]
		for g, anc := range lockcount.Goroutines() {
			if g == root || lockcount.Descends(anc, root) {
				alive = append(alive, g)
			}
		}
		return len(alive) == 0
	})
}

// pollUntil waits, with a bound, for cond: for what other goroutines do, never to let time
// pass (the clock is fake).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(lockcountBound)
	for !cond() {
		if time.Now().After(deadline) {
			var all strings.Builder
			for g, anc := range lockcount.Goroutines() {
				all.WriteString(" " + fmtIDs(g, anc))
			}
			t.Fatalf("timed out after %v waiting for %s; goroutines (id<-creators):%s", lockcountBound, what, all.String())
		}
		time.Sleep(time.Millisecond)
	}
}

func fmtIDs(g uint64, anc []uint64) string {
	s := strconv.FormatUint(g, 10)
	for _, a := range anc {
		s += "<-" + strconv.FormatUint(a, 10)
	}
	return s
}
