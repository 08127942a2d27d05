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

package driver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	cmv1 "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/typed/certmanager/v1"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// throttledClient is a client whose CertificateRequest creates, reads (gets and lists) and
// deletes wait for a token of one rate limiter under the caller's context, as client-go's
// client-side rate limiter makes them wait (csi-driver configures 5 per second, burst 10). The
// informer's watch is not throttled.
type throttledClient struct {
	cmclient.Interface
	limiter *rate.Limiter
}

func (c throttledClient) CertmanagerV1() cmv1.CertmanagerV1Interface {
	return throttledV1{CertmanagerV1Interface: c.Interface.CertmanagerV1(), limiter: c.limiter}
}

// IsWatchListSemanticsUnSupported passes on the fake clientset's marker below, so that the
// informer lists as it does on the fake itself.
func (c throttledClient) IsWatchListSemanticsUnSupported() bool {
	m, ok := c.Interface.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && m.IsWatchListSemanticsUnSupported()
}

type throttledV1 struct {
	cmv1.CertmanagerV1Interface
	limiter *rate.Limiter
}

func (c throttledV1) CertificateRequests(namespace string) cmv1.CertificateRequestInterface {
	return throttledRequests{CertificateRequestInterface: c.CertmanagerV1Interface.CertificateRequests(namespace), limiter: c.limiter}
}

type throttledRequests struct {
	cmv1.CertificateRequestInterface
	limiter *rate.Limiter
}

func (c throttledRequests) Create(ctx context.Context, req *cmapi.CertificateRequest, opts metav1.CreateOptions) (*cmapi.CertificateRequest, error) {
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	return c.CertificateRequestInterface.Create(ctx, req, opts)
}

func (c throttledRequests) Get(ctx context.Context, name string, opts metav1.GetOptions) (*cmapi.CertificateRequest, error) {
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	return c.CertificateRequestInterface.Get(ctx, name, opts)
}

func (c throttledRequests) List(ctx context.Context, opts metav1.ListOptions) (*cmapi.CertificateRequestList, error) {
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	return c.CertificateRequestInterface.List(ctx, opts)
}

func (c throttledRequests) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if err := c.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	return c.CertificateRequestInterface.Delete(ctx, name, opts)
}

// churnLedger is what the churn's apiserver records: every request created, and every create
// that found another request of the same volume still open.
type churnLedger struct {
	mu         sync.Mutex
	creates    map[string]int // by volume-hash label
	doubleOpen []string
}

// TestChurnMakesOneRequestPerVolume publishes volumes the way kubelet does under pod churn:
// CertificateRequest creates (and reads) throttled at 5 per second with a burst of 10, a signer
// that answers 300 ms after each create, publishes with a 2 s deadline retried at once on
// failure, and every third retry doubled by a second publish of the same volume while the first
// still runs. Every volume gets exactly one request, a create never finds another request of its
// volume still open, and no publish returns OK on a volume without its certificate. With a slow
// watch (the informer's events 2 s late, so every first publish ends before its cache shows its
// request) the same holds. The driver's client holds exactly the consumers' charts' verbs
// (watch, create, delete, list: a get is refused with 403, as the apiserver refuses it); in the
// pod-token variants the driver's client may not create and each pod's client may only create.
// No call is refused and every publish ends with a certificate.
func TestChurnMakesOneRequestPerVolume(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lag       time.Duration
		podTokens bool
	}{
		{"charts' verbs, informer in step", 0, false},
		{"charts' verbs, slow watch", 2 * time.Second, false},
		{"pod tokens, informer in step", 0, true},
		{"pod tokens, slow watch", 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) { runChurn(t, 40, tc.lag, tc.podTokens) })
	}
}

func runChurn(t *testing.T, volumes int, watchLag time.Duration, podTokens bool) {
	gvr := cmapi.SchemeGroupVersion.WithResource("certificaterequests")
	fakeClient := fake.NewSimpleClientset()
	if watchLag > 0 {
		testkit.SlowWatches(fakeClient, gvr, watchLag)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ca := newCA(t)
	ledger := &churnLedger{creates: map[string]int{}}
	tracker := fakeClient.Tracker()
	fakeClient.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		volumeHash := req.Labels[api.VolumeIDHashLabelKey]
		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		// The tracker itself: a reactor runs under the fake's lock.
		obj, err := tracker.List(gvr, cmapi.SchemeGroupVersion.WithKind("CertificateRequest"), req.Namespace)
		if err != nil {
			return true, nil, err
		}
		existing := obj.(*cmapi.CertificateRequestList)
		if err := tracker.Create(gvr, req.DeepCopy(), req.Namespace); err != nil {
			return true, nil, err
		}
		for i := range existing.Items {
			if existing.Items[i].Labels[api.VolumeIDHashLabelKey] == volumeHash && !testkit.IsFinished(&existing.Items[i]) {
				ledger.doubleOpen = append(ledger.doubleOpen, fmt.Sprintf("%s created while %s was open", req.Name, existing.Items[i].Name))
			}
		}
		ledger.creates[volumeHash]++
		// The signer answers 300 ms after the create.
		time.AfterFunc(300*time.Millisecond, func() {
			if ctx.Err() != nil {
				return
			}
			if current, err := fakeClient.CertmanagerV1().CertificateRequests(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{}); err == nil {
				_, _ = testkit.Issue(ctx, fakeClient, ca, current, time.Now())
			}
		})
		return true, req, nil
	})

	store := storage.NewMemoryFS()
	driverVerbs := testkit.ChartVerbs
	var podClient *testkit.RBACClient
	if podTokens {
		driverVerbs = []string{"watch", "delete", "list"}
		podClient = testkit.WithRBAC(fakeClient, testkit.PodAccount, "create")
	}
	driverClient := testkit.WithRBAC(fakeClient, testkit.DriverAccount, driverVerbs...)
	o := testdriver.Options{Client: throttledClient{Interface: driverClient, limiter: rate.NewLimiter(5, 10)}}
	realIssuance(&o, store)
	if podTokens {
		// One limiter for the pods' clients: csi-driver-spiffe builds one client per call.
		podLimiter := rate.NewLimiter(5, 10)
		o.ClientForMetadata = func(metadata.Metadata) (cmclient.Interface, error) {
			return throttledClient{Interface: podClient, limiter: podLimiter}, nil
		}
	}
	_, cl, _ := testdriver.Run(t, o)

	var okOnEmpty, oks, failures atomic.Int64
	publish := func(req *csi.NodePublishVolumeRequest) bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		if _, err := cl.NodePublishVolume(pctx, req); err != nil {
			failures.Add(1)
			return false
		}
		oks.Add(1)
		if files, err := store.ReadFiles(req.VolumeId); err != nil || len(files["tls.crt"]) == 0 {
			okOnEmpty.Add(1)
		}
		return true
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for i := range volumes {
		req := publishRequest(t, fmt.Sprintf("churn-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for retry := 0; time.Now().Before(deadline); retry++ {
				if retry > 0 && retry%3 == 0 {
					// kubelet's own retry overlapping the one before it.
					wg.Add(1)
					go func() { defer wg.Done(); publish(req) }()
				}
				if publish(req) {
					return
				}
			}
			t.Errorf("volume %s: no successful publish within the bound", req.VolumeId)
		}()
	}
	wg.Wait()

	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	total := 0
	for hash, n := range ledger.creates {
		total += n
		if n != 1 {
			t.Errorf("volume with hash %s: %d requests created", hash, n)
		}
	}
	if total != volumes || len(ledger.creates) != volumes {
		t.Errorf("%d requests created for %d volumes (%d volumes with any)", total, volumes, len(ledger.creates))
	}
	for _, d := range ledger.doubleOpen {
		t.Errorf("two open requests for one volume: %s", d)
	}
	if n := okOnEmpty.Load(); n > 0 {
		t.Errorf("%d publishes returned OK on a volume without its certificate", n)
	}
	without := 0
	for i := range volumes {
		if files, err := store.ReadFiles(fmt.Sprintf("churn-%d", i)); err != nil || len(files["tls.crt"]) == 0 {
			without++
		}
	}
	if without > 0 {
		t.Errorf("%d of %d volumes without a certificate", without, volumes)
	}
	refused := driverClient.RefusedTotal()
	if podClient != nil {
		refused += podClient.RefusedTotal()
	}
	if refused > 0 {
		t.Errorf("calls beyond the charts' verbs: %v; pods: %v", driverClient, podClient)
	}
	t.Logf("%d volumes: %d without a certificate, %d OK publishes, %d failed ones, %d requests (%.2f per volume), %d refused calls",
		volumes, without, oks.Load(), failures.Load(), total, float64(total)/float64(volumes), refused)
}
