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

package faults

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// Scenario is one run of the library against a real apiserver with faults injected between the
// manager's client and the apiserver; a signer on its own, unfaulted client signs every request.
type Scenario struct {
	// Config reaches the apiserver (an admin's).
	Config *rest.Config
	// Name names the run's namespace and node.
	Name string
	// Volumes are issued and renewed at once and on their own schedule (default 20).
	Volumes int
	// Lifetime of the certificates (renewed at two thirds of it; default 24 s).
	Lifetime time.Duration
	// Duration the faults last (default two lifetimes); the run then settles without faults.
	Duration time.Duration
	// Settings are the create faults, for Duration.
	Settings Settings
	// WatchCuts: every watch is down for 3 s of every 5 s during Duration.
	WatchCuts bool
	// Outage: connections are refused for this long, from a third of Duration.
	Outage time.Duration
	// Seed draws the faults.
	Seed int64
	// Log receives the manager's logs (default: discarded).
	Log logr.Logger
}

// Figures is what a Scenario measured.
type Figures struct {
	Issuances, Requests int
	// InFlight counts the issuances the end of the run cut short: a volume's newest request
	// whose key pair was never written (not yet signed, or signed as the manager stopped). Each
	// is one issuance with its one request; a second request of a volume would be an orphan.
	InFlight int
	// MaxAlive is the most requests of one volume that existed at once; VolumesOverOne how many
	// volumes ever had more than one.
	MaxAlive, VolumesOverOne int
	// Orphans are the requests left beyond each volume's newest once the run settled.
	Orphans int
	// SignedToWritten is, for every certificate written, the time from its signing to its
	// WriteKeypair; Recovery, for every volume due during the outage, the time from the end of
	// the outage to its next certificate.
	SignedToWritten, Recovery []time.Duration
	Counts                    Counts
	// Calls are the requests the manager's client made, by CallOf.
	Calls map[string]int
}

// RequestsPerIssuance is Requests / (Issuances + InFlight).
func (f Figures) RequestsPerIssuance() float64 {
	if f.Issuances+f.InFlight == 0 {
		return math.NaN()
	}
	return float64(f.Requests) / float64(f.Issuances+f.InFlight)
}

// Percentile is the p-th percentile of ds (nearest rank); zero for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// observer is the signer's view: when each request was signed (by certificate serial), and the
// requests of each volume that exist.
type observer struct {
	mu       sync.Mutex
	signedAt map[string]time.Time // serial -> signed
	alive    map[string]map[string]bool
	maxAlive map[string]int
	created  map[string]bool
	writes   []write
}

type write struct {
	volume string
	at     time.Time
	serial string
	due    time.Time
}

// Run runs the scenario and returns its figures.
func (s Scenario) Run(ctx context.Context) (Figures, error) {
	if s.Volumes == 0 {
		s.Volumes = 20
	}
	if s.Lifetime == 0 {
		s.Lifetime = 24 * time.Second
	}
	if s.Duration == 0 {
		s.Duration = 2 * s.Lifetime
	}
	if s.Log.GetSink() == nil {
		s.Log = logr.Discard()
	}
	kube, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return Figures{}, err
	}
	ns := "faults-" + s.Name
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return Figures{}, err
	}
	signerClient, err := cmclient.NewForConfig(s.Config)
	if err != nil {
		return Figures{}, err
	}
	ca, err := testkit.NewCA("faults CA")
	if err != nil {
		return Figures{}, err
	}
	obs := &observer{signedAt: map[string]time.Time{}, alive: map[string]map[string]bool{}, maxAlive: map[string]int{}, created: map[string]bool{}}
	signCtx, stopSigner := context.WithCancel(ctx)
	signerDone := make(chan struct{})
	go func() {
		defer close(signerDone)
		obs.sign(signCtx, signerClient, ca, ns)
	}()
	defer func() {
		stopSigner()
		<-signerDone
	}()

	var tr *Transport
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = Wrap(s.Seed, &tr)
	client, err := cmclient.NewForConfig(cfg)
	if err != nil {
		return Figures{}, err
	}
	store := storage.NewMemoryFS()
	log := s.Log
	m, err := manager.NewManager(manager.Options{
		Client:             client,
		MetadataReader:     store,
		Clock:              clock.RealClock{},
		Log:                &log,
		NodeID:             "node-" + s.Name,
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
				Namespace: ns,
				IssuerRef: cmmeta.IssuerReference{Name: "faults", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:  s.Lifetime,
			}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(store, func(meta metadata.Metadata, _ crypto.PrivateKey, chain []byte) {
			leaf, err := certs.ParseLeaf(chain)
			if err != nil {
				return
			}
			obs.mu.Lock()
			obs.writes = append(obs.writes, write{volume: meta.VolumeID, at: time.Now(), serial: leaf.SerialNumber.String(), due: certs.RenewalPoint(leaf)})
			obs.mu.Unlock()
		}),
		RenewalBackoffConfig: &wait.Backoff{Duration: 2 * time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32},
	})
	if err != nil {
		return Figures{}, err
	}
	defer m.Stop()
	for i := range s.Volumes {
		id := fmt.Sprintf("%s-%02d", s.Name, i)
		if _, err := store.RegisterMetadata(metadata.Metadata{VolumeID: id, TargetPath: "/target/" + id, VolumeContext: map[string]string{
			metadata.PodNameVolumeContextKey: "pod-" + id, metadata.PodNamespaceVolumeContextKey: ns, metadata.PodUIDVolumeContextKey: "uid-" + id,
		}}); err != nil {
			return Figures{}, err
		}
		m.ManageVolume(id)
	}

	// The faults.
	tr.Set(s.Settings)
	start := time.Now()
	var back time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for elapsed := time.Duration(0); elapsed < s.Duration; elapsed = time.Since(start) {
		if s.WatchCuts {
			tr.WatchesDown(elapsed%(5*time.Second) < 3*time.Second)
		}
		if s.Outage > 0 {
			from := s.Duration / 3
			down := elapsed >= from && elapsed < from+s.Outage
			tr.Refuse(down)
			if !down && elapsed >= from+s.Outage && back.IsZero() {
				back = time.Now()
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Figures{}, ctx.Err()
		}
	}
	tr.Set(Settings{})
	tr.WatchesDown(false)
	tr.Refuse(false)
	if s.Outage > 0 && back.IsZero() {
		back = time.Now()
	}

	// Settle: every volume renews once more without faults.
	settleFrom := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*s.Lifetime+30*time.Second, true, func(context.Context) (bool, error) {
		return obs.everyVolumeWroteAfter(settleFrom, s.Volumes), nil
	}); err != nil {
		return Figures{}, fmt.Errorf("settling after the faults: %w", err)
	}
	m.Stop()
	f := obs.figures(back)
	orphans, inFlight, err := obs.countLeftovers(ctx, signerClient, ns)
	if err != nil {
		return Figures{}, err
	}
	f.Orphans, f.InFlight = orphans, inFlight
	f.Counts = tr.Counts()
	f.Calls = tr.Calls()
	return f, nil
}

// sign watches the namespace's requests from its own client: it records which exist, signs
// every pending one, and records when.
func (o *observer) sign(ctx context.Context, client cmclient.Interface, ca *testkit.CA, ns string) {
	reqs := client.CertmanagerV1().CertificateRequests(ns)
	rv := ""
	for ctx.Err() == nil {
		w, err := reqs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // too old: watch again from now
				continue
			}
			req, ok := ev.Object.(*cmapi.CertificateRequest)
			if !ok {
				continue
			}
			rv = req.ResourceVersion
			o.seen(ev.Type, req)
			if ev.Type != watch.Deleted && !testkit.IsFinished(req) {
				// Signed: when the signer sends the certificate to the apiserver.
				signed := time.Now()
				if issued, err := testkit.Issue(ctx, client, ca, req, signed); err == nil {
					if leaf, err := certs.ParseLeaf(issued.Status.Certificate); err == nil {
						o.mu.Lock()
						o.signedAt[leaf.SerialNumber.String()] = signed
						o.mu.Unlock()
					}
				}
			}
		}
	}
}

func (o *observer) seen(t watch.EventType, req *cmapi.CertificateRequest) {
	volume := req.Labels[api.VolumeIDHashLabelKey]
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.alive[volume] == nil {
		o.alive[volume] = map[string]bool{}
	}
	switch t {
	case watch.Added:
		o.created[req.Name] = true
		o.alive[volume][req.Name] = true
	case watch.Deleted:
		delete(o.alive[volume], req.Name)
	}
	o.maxAlive[volume] = max(o.maxAlive[volume], len(o.alive[volume]))
}

func (o *observer) everyVolumeWroteAfter(t time.Time, volumes int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	wrote := map[string]bool{}
	for _, w := range o.writes {
		if w.at.After(t) {
			wrote[w.volume] = true
		}
	}
	return len(wrote) == volumes
}

func (o *observer) figures(back time.Time) Figures {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := Figures{Issuances: len(o.writes), Requests: len(o.created)}
	for _, n := range o.maxAlive {
		f.MaxAlive = max(f.MaxAlive, n)
		if n > 1 {
			f.VolumesOverOne++
		}
	}
	recovered := map[string]bool{}
	for _, w := range o.writes {
		if signed, ok := o.signedAt[w.serial]; ok {
			f.SignedToWritten = append(f.SignedToWritten, w.at.Sub(signed))
		}
	}
	if !back.IsZero() {
		// A volume due during the outage: its newest certificate before the end of the outage
		// was due before it.
		dueBefore := map[string]bool{}
		for _, w := range o.writes {
			if w.at.Before(back) {
				dueBefore[w.volume] = w.due.Before(back)
			}
		}
		for _, w := range o.writes {
			if w.at.After(back) && dueBefore[w.volume] && !recovered[w.volume] {
				recovered[w.volume] = true
				f.Recovery = append(f.Recovery, w.at.Sub(back))
			}
		}
	}
	return f
}

// countLeftovers counts, once the manager has stopped, the requests beyond each volume's newest
// (orphans), and the volumes whose newest request's key pair was never written (in flight).
func (o *observer) countLeftovers(ctx context.Context, client cmclient.Interface, ns string) (orphans, inFlight int, err error) {
	list, err := client.CertmanagerV1().CertificateRequests(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	o.mu.Lock()
	written := make(map[string]bool, len(o.writes))
	for _, w := range o.writes {
		written[w.serial] = true
	}
	o.mu.Unlock()
	newest := map[string]*cmapi.CertificateRequest{}
	perVolume := map[string]int{}
	for i := range list.Items {
		r := &list.Items[i]
		volume := r.Labels[api.VolumeIDHashLabelKey]
		perVolume[volume]++
		if n := newest[volume]; n == nil || n.CreationTimestamp.Before(&r.CreationTimestamp) {
			newest[volume] = r
		}
	}
	for _, n := range perVolume {
		orphans += n - 1
	}
	for _, r := range newest {
		leaf, err := certs.ParseLeaf(r.Status.Certificate)
		if err != nil || !written[leaf.SerialNumber.String()] {
			inFlight++
		}
	}
	return orphans, inFlight, nil
}
