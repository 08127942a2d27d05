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

// Command fleet measures what a fleet of nodes running the library costs one real
// kube-apiserver. It starts kube-apiserver and etcd (envtest, with cert-manager's
// CertificateRequest CRD) and simulates F nodes in one process, each with its own Manager, node
// ID, informer, client connection and MemoryFS, V volumes each, plus an auto-signer that signs
// every request through the API. Every figure about requests and watches is read from the
// apiserver's own /metrics (apiserver_request_total, apiserver_longrunning_requests). `make
// bench` runs it after hack/bench; KUBEBUILDER_ASSETS must point at the envtest binaries.
//
// For each fleet size it reports, per certificate, the apiserver requests the nodes made by verb
// for a first issuance and for a renewal, the open watches, and how many requests each node's
// informer holds and the heap per node (flat as F grows when each node caches only its own).
// Then every node of the largest fleet restarts at once with every volume past due, twice:
// without admission limits, and with MaxConcurrentIssuances and IssuanceRateLimit set; the peak
// of CertificateRequest creates per second cluster-wide is read from /metrics every 250 ms.
//
// Before the fleets, the example approver (examples/approver) decides 1,000 pending requests of
// 1,000 pods, with and without its pod cache: decisions per second, and the apiserver reads its
// clients make per decision.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

const (
	namespace = "fleet"
	lifetime  = time.Hour
)

func main() {
	sizes := flag.String("nodes", "50,100", "fleet sizes F (comma-separated, at least two to compare memory)")
	volumes := flag.Int("volumes", 10, "volumes per node V")
	capFlag := flag.Int("limit-concurrency", 4, "MaxConcurrentIssuances in the limited restart")
	rate := flag.Float64("limit-rate", 0.5, "IssuanceRateLimit.PerSecond in the limited restart")
	burst := flag.Int("limit-burst", 1, "IssuanceRateLimit.Burst in the limited restart")
	accessNodes := flag.Int("access-nodes", 5000, "nodes starting at once in the access check's measurement (0: skip it)")
	accessInFlight := flag.Int("access-in-flight", 50, "reviews in flight at once in the access check's measurement")
	onlyAccess := flag.Bool("only-access", false, "measure the access check and the outage calls alone")
	outageCalls := flag.Int("outage-calls", 2000, "calls of each kind in the outage calls' measurement (0: skip it)")
	approverRequests := flag.Int("approver-requests", 1000, "pending requests the example approver decides in its measurement (0: skip it)")
	onlyApprover := flag.Bool("only-approver", false, "measure the example approver alone")
	flag.Parse()
	var fs []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		must(err)
		fs = append(fs, n)
	}
	limited := manager.Options{MaxConcurrentIssuances: *capFlag, IssuanceRateLimit: &manager.RateLimit{PerSecond: *rate, Burst: *burst}}
	if *onlyAccess {
		fs, *approverRequests = nil, 0
	}
	if *onlyApprover {
		fs, *accessNodes, *outageCalls = nil, 0, 0
	}
	if err := run(fs, *volumes, limited, *accessNodes, *accessInFlight, *outageCalls, *approverRequests); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// bench is the shared control plane, admin clients and signer.
type bench struct {
	cfg    *rest.Config
	kube   kubernetes.Interface
	cm     cmclient.Interface
	ca     *testkit.CA
	signed atomic.Int64
	// chartConfig authenticates as the charts' account, once chartAccount made it.
	chartConfig *rest.Config
	// signerNow is the NotBefore of signed certificates: a fleet's fake clock, or the real one.
	signerNow atomic.Pointer[func() time.Time]
	// watchEnds counts client-go's "watch ended with error" reports ("very short watch"): a
	// re-opened watch that the apiserver closed again at once; the informers re-open them.
	watchEnds atomic.Int64
}

func run(sizes []int, v int, limited manager.Options, accessNodes, accessInFlight, outageCalls, approverRequests int) error {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run it with `make bench`")
	}
	cfg, stopControlPlane, err := controlplane.StartControlPlane()
	if err != nil {
		return err
	}
	defer func() { _ = stopControlPlane() }()
	b := &bench{cfg: rest.CopyConfig(cfg)}
	klog.SetLogger(funcr.New(func(_, args string) {
		if strings.Contains(args, "watch ended with error") {
			b.watchEnds.Add(1)
		}
	}, funcr.Options{}))
	b.cfg.QPS = -1 // no client-side limiter anywhere: the figures show the library's own behaviour
	b.kube = kubernetes.NewForConfigOrDie(b.cfg)
	b.cm = cmclient.NewForConfigOrDie(b.cfg)
	if b.ca, err = testkit.NewCA("fleet-ca"); err != nil {
		return err
	}
	now := time.Now
	b.signerNow.Store(&now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := b.startSigner(ctx); err != nil {
		return err
	}

	fmt.Printf("Fleet on one kube-apiserver (envtest), %d CPUs, %s RAM, %s, %s\n", runtime.NumCPU(), memTotal(), runtime.Version(), time.Now().UTC().Format("2006-01-02"))
	if accessNodes > 0 {
		r, err := b.accessCheckCost(ctx, accessNodes, accessInFlight)
		if err != nil {
			return err
		}
		printAccess(r)
	}
	if outageCalls > 0 {
		costs, err := b.outageCallsCost(ctx, outageCalls, accessInFlight, 1000)
		if err != nil {
			return err
		}
		printCallCosts(costs)
	}
	if approverRequests > 0 {
		results, err := b.approverCost(ctx, approverRequests, []approverRun{
			{name: "pod cache, no client-side limit", podCache: true, qps: -1},
			{name: "no pod cache (a GET each), no client-side limit", podCache: false, qps: -1},
			{name: "pod cache, the approver's default 50/s burst 100", podCache: true, qps: 50, burst: 100},
		})
		if err != nil {
			return err
		}
		printApprover(results)
	}
	if len(sizes) == 0 {
		return nil
	}
	fmt.Printf("Each simulated node: its own Manager, node ID, informer, client connection (no client-side rate limit) and MemoryFS; V=%d volumes; one auto-signer for the cluster.\n\n", v)
	var results []*sizeResult
	var last *fleet
	for i, f := range sizes {
		fl := b.newFleet(fmt.Sprintf("f%d", f), f, v)
		r, err := b.measureSize(ctx, fl)
		if err != nil {
			return err
		}
		results = append(results, r)
		if i < len(sizes)-1 {
			fl.stop()
			// The stopped nodes' watches count in apiserver_request_total when they end: let
			// them end before the next size is measured.
			if err := b.waitWatches(ctx, 1); err != nil {
				return err
			}
		} else {
			last = fl
		}
	}
	printSizes(results)

	last.stop()
	unlimited := manager.Options{MaxConcurrentIssuances: manager.UnlimitedConcurrentIssuances}
	var storms []*stormResult
	for _, c := range []struct {
		name string
		opts manager.Options
	}{
		{"no admission limits (MaxConcurrentIssuances unlimited, no rate limit)", unlimited},
		{fmt.Sprintf("MaxConcurrentIssuances %d, IssuanceRateLimit %g/s burst %d", limited.MaxConcurrentIssuances, limited.IssuanceRateLimit.PerSecond, limited.IssuanceRateLimit.Burst), limited},
	} {
		s, err := b.storm(ctx, last, c.opts)
		if err != nil {
			return err
		}
		s.name = c.name
		storms = append(storms, s)
	}
	printStorms(last, storms)
	return nil
}

// fleet is F simulated nodes.
type fleet struct {
	b       *bench
	name    string
	v       int
	nodes   []*node
	written atomic.Int64
}

type node struct {
	id      string
	store   *storage.MemoryFS
	client  cmclient.Interface
	m       *manager.Manager
	metrics *metrics.Metrics
}

func (b *bench) newFleet(name string, f, v int) *fleet {
	fl := &fleet{b: b, name: name, v: v}
	for i := 0; i < f; i++ {
		// A dialer of its own gives each node its own connection, as on separate machines
		// (client-go shares the transport of identical configurations).
		cfg := rest.CopyConfig(b.cfg)
		cfg.Dial = (&net.Dialer{}).DialContext
		fl.nodes = append(fl.nodes, &node{
			id:     fmt.Sprintf("%s-node-%03d", name, i),
			store:  storage.NewMemoryFS(),
			client: cmclient.NewForConfigOrDie(cfg),
		})
	}
	return fl
}

// start starts every node's manager at once and returns when all have synced.
func (fl *fleet) start(clk clock.Clock, admission manager.Options) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(fl.nodes))
	for _, n := range fl.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := logr.Discard()
			n.metrics = metrics.New(n.id, &log, prometheus.NewRegistry(), n.store, nil)
			n.metrics.EnableExtendedMetrics()
			m, err := manager.NewManager(manager.Options{
				Client:                 n.client,
				MetadataReader:         n.store,
				Clock:                  clk,
				Log:                    &log,
				NodeID:                 n.id,
				GeneratePrivateKey:     testkit.GenerateKey,
				GenerateRequest:        generateRequest,
				SignRequest:            testkit.SignCSR,
				WriteKeypair:           testkit.KeypairWriter(n.store, func(metadata.Metadata, crypto.PrivateKey, []byte) { fl.written.Add(1) }),
				Metrics:                n.metrics,
				MaxConcurrentIssuances: admission.MaxConcurrentIssuances,
				IssuanceRateLimit:      admission.IssuanceRateLimit,
			})
			if err != nil {
				errs <- fmt.Errorf("node %s: %w", n.id, err)
				return
			}
			n.m = m
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (fl *fleet) stop() {
	var wg sync.WaitGroup
	for _, n := range fl.nodes {
		if n.m != nil {
			wg.Add(1)
			go func(m *manager.Manager) { defer wg.Done(); m.Stop() }(n.m)
			n.m = nil
		}
	}
	wg.Wait()
}

func generateRequest(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
	return &manager.CertificateRequestBundle{
		Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
		Namespace: namespace,
		IssuerRef: cmmeta.IssuerReference{Name: "fleet-ca", Kind: "Issuer", Group: "cert-manager.io"},
		Duration:  lifetime,
		Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature},
	}, nil
}

// waitWritten waits until the fleet has written want key pairs in total.
func (fl *fleet) waitWritten(want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for fl.written.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d key pairs written after %v", fl.name, fl.written.Load(), want, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

type sizeResult struct {
	f, v                            int
	startup, issuance, renewal      verbs // per node, per certificate, per certificate
	watches                         float64
	cachedMin, cachedMax            int
	apiserverObjects                int
	heapPerNode                     float64
	startWall, issueWall, renewWall time.Duration
	watchEnds                       int64
	terminated                      float64
}

// measureSize runs one fleet size on a fake clock shared by its nodes and the signer: start-up,
// first issuance of every volume, then one renewal of every volume (the clock stepped past the
// renewal point).
func (b *bench) measureSize(ctx context.Context, fl *fleet) (*sizeResult, error) {
	f, v := len(fl.nodes), fl.v
	fc := testclock.NewFakeClock(time.Now())
	now := fc.Now
	b.signerNow.Store(&now)
	r := &sizeResult{f: f, v: v}
	watchEnds := b.watchEnds.Load()

	heapBefore := heapAfterGC()
	before, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := fl.start(fc, manager.Options{}); err != nil {
		return nil, err
	}
	r.startWall = time.Since(t0)
	started, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.startup = started.requests.minus(before.requests).per(float64(f))

	t0 = time.Now()
	for _, n := range fl.nodes {
		for j := 0; j < v; j++ {
			id := fmt.Sprintf("%s-vol-%02d", n.id, j)
			meta := metadata.Metadata{VolumeID: id, TargetPath: "/t/" + id, VolumeContext: map[string]string{
				metadata.PodNameVolumeContextKey: "pod-" + id, metadata.PodNamespaceVolumeContextKey: namespace, metadata.PodUIDVolumeContextKey: "uid-" + id,
			}}
			if _, err := n.store.RegisterMetadata(meta); err != nil {
				return nil, err
			}
			n.m.ManageVolume(id)
		}
	}
	total := int64(f * v)
	if err := fl.waitWritten(total, 5*time.Minute); err != nil {
		return nil, err
	}
	r.issueWall = time.Since(t0)
	issued, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.watches = issued.watches
	r.issuance = issued.requests.minus(started.requests).per(float64(total))

	t0 = time.Now()
	fc.Step(lifetime*2/3 + time.Minute)
	if err := fl.waitWritten(2*total, 5*time.Minute); err != nil {
		return nil, err
	}
	r.renewWall = time.Since(t0)
	// Wait for the informers to see the deletions before counting what they hold.
	if err := waitFor(30*time.Second, func() bool {
		for _, n := range fl.nodes {
			if reqs, _ := n.m.CertificateRequestLister().List(labels.Everything()); len(reqs) != v {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("informers did not settle at %d requests each: %w", v, err)
	}
	renewed, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	r.renewal = renewed.requests.minus(issued.requests).per(float64(total))

	r.cachedMin = 1 << 30
	for _, n := range fl.nodes {
		reqs, err := n.m.CertificateRequestLister().List(labels.Everything())
		if err != nil {
			return nil, err
		}
		r.cachedMin = min(r.cachedMin, len(reqs))
		r.cachedMax = max(r.cachedMax, len(reqs))
	}
	all, err := b.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	r.apiserverObjects = len(all.Items)
	r.heapPerNode = float64(heapAfterGC()-heapBefore) / float64(f)
	r.watchEnds = b.watchEnds.Load() - watchEnds
	r.terminated = renewed.terminated - before.terminated
	return r, nil
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

type stormResult struct {
	name           string
	volumes        int
	wall           time.Duration
	peakPerSecond  float64
	creates        float64
	admissionWaits float64
}

// storm restarts every node of fl at once, on the real clock, with every volume past due, and
// samples the apiserver's CertificateRequest creates until every volume is renewed.
func (b *bench) storm(ctx context.Context, fl *fleet, admission manager.Options) (*stormResult, error) {
	now := time.Now
	b.signerNow.Store(&now)
	past := time.Now().Add(-time.Minute)
	volumes := 0
	for _, n := range fl.nodes {
		ids, err := n.store.ListVolumes()
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			meta, err := n.store.ReadMetadata(id)
			if err != nil {
				return nil, err
			}
			meta.NextIssuanceTime = &past
			meta.Mounted = true
			if err := n.store.WriteMetadata(id, meta); err != nil {
				return nil, err
			}
			volumes++
		}
	}
	before, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	type sample struct {
		at      time.Time
		creates float64
	}
	samples := []sample{{time.Now(), before.requests["POST"]}}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
			s, err := b.scrape(ctx)
			if err == nil {
				samples = append(samples, sample{time.Now(), s.requests["POST"]})
			}
		}
	}()
	base := fl.written.Load()
	t0 := time.Now()
	if err := fl.start(clock.RealClock{}, admission); err != nil {
		return nil, err
	}
	err = fl.waitWritten(base+int64(volumes), 10*time.Minute)
	wall := time.Since(t0)
	close(stopSampling)
	<-sampled
	if err != nil {
		return nil, err
	}
	after, err := b.scrape(ctx)
	if err != nil {
		return nil, err
	}
	samples = append(samples, sample{time.Now(), after.requests["POST"]})
	r := &stormResult{volumes: volumes, wall: wall, creates: after.requests["POST"] - before.requests["POST"]}
	// The peak: the most creates counted in any window of at most one second between two
	// samples (a lower bound of the busiest second; a storm shorter than a second counts whole).
	for i := range samples {
		j := i
		for j > 0 && samples[i].at.Sub(samples[j-1].at) <= time.Second {
			j--
		}
		r.peakPerSecond = max(r.peakPerSecond, samples[i].creates-samples[j].creates)
	}
	for _, n := range fl.nodes {
		r.admissionWaits += gatherValue(n.metrics.Registry(), "certmanager_csi_issuance_admission_waits_total")
	}
	fl.stop()
	return r, nil
}

func gatherValue(reg *prometheus.Registry, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// waitWatches waits until n watches on certificaterequests are open.
func (b *bench) waitWatches(ctx context.Context, n float64) error {
	var last float64
	err := waitFor(time.Minute, func() bool {
		s, err := b.scrape(ctx)
		last = s.watches
		return err == nil && s.watches == n
	})
	if err != nil {
		return fmt.Errorf("waiting for %v open watches (%v): %w", n, last, err)
	}
	return nil
}

func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// verbs counts apiserver requests on certificaterequests by verb; the signer's status updates
// are kept apart under "PUT status".
type verbs map[string]float64

func (a verbs) minus(b verbs) verbs {
	out := verbs{}
	for k, v := range a {
		out[k] = v - b[k]
	}
	return out
}

func (a verbs) per(n float64) verbs {
	out := verbs{}
	for k, v := range a {
		out[k] = v / n
	}
	return out
}

type scrapeResult struct {
	requests verbs
	watches  float64
	// terminated counts the watchers of certificaterequests the apiserver closed because they
	// did not take their events fast enough (apiserver_terminated_watchers_total).
	terminated float64
}

// scrape reads the apiserver's /metrics: requests on certificaterequests by verb (and status
// subresource), and the open watches on them.
func (b *bench) scrape(ctx context.Context) (scrapeResult, error) {
	raw, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return scrapeResult{}, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	// Only the two families are parsed: the full exposition is large.
	var keep bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "apiserver_request_total") || strings.Contains(line, "apiserver_longrunning_requests") ||
			strings.Contains(line, "apiserver_terminated_watchers_total") {
			keep.WriteString(line)
			keep.WriteByte('\n')
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&keep)
	if err != nil {
		return scrapeResult{}, fmt.Errorf("parsing the apiserver's /metrics: %w", err)
	}
	r := scrapeResult{requests: verbs{}}
	if f := families["apiserver_request_total"]; f != nil {
		for _, m := range f.GetMetric() {
			l := labelMap(m.GetLabel())
			if l["resource"] != "certificaterequests" {
				continue
			}
			verb := l["verb"]
			if l["subresource"] != "" {
				verb += " " + l["subresource"]
			}
			r.requests[verb] += m.GetCounter().GetValue()
		}
	}
	if f := families["apiserver_terminated_watchers_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if l := labelMap(m.GetLabel()); strings.HasPrefix(l["resource"], "certificaterequests") {
				r.terminated += m.GetCounter().GetValue()
			}
		}
	}
	if f := families["apiserver_longrunning_requests"]; f != nil {
		for _, m := range f.GetMetric() {
			l := labelMap(m.GetLabel())
			if l["resource"] == "certificaterequests" && l["verb"] == "WATCH" {
				r.watches += m.GetGauge().GetValue()
			}
		}
	}
	return r, nil
}

func labelMap[L interface {
	GetName() string
	GetValue() string
}](labels []L) map[string]string {
	out := make(map[string]string, len(labels))
	for _, l := range labels {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// startSigner signs every new request in the namespace with the test CA, through a watch (no
// cache, so the process's heap is the nodes'), with eight workers. Its own requests are one
// LIST, one WATCH and one status PUT per request.
func (b *bench) startSigner(ctx context.Context) error {
	list, err := b.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	queue := make(chan *cmapi.CertificateRequest, 1<<16)
	rv := list.ResourceVersion
	go func() {
		defer close(queue)
		for ctx.Err() == nil {
			w, err := b.cm.CertmanagerV1().CertificateRequests(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				req, ok := ev.Object.(*cmapi.CertificateRequest)
				if !ok {
					continue
				}
				rv = req.ResourceVersion
				if ev.Type == watch.Added && !testkit.IsFinished(req) {
					queue <- req
				}
			}
		}
	}()
	for i := 0; i < 8; i++ {
		go func() {
			for req := range queue {
				notBefore := (*b.signerNow.Load())()
				if _, err := testkit.Issue(ctx, b.cm, b.ca, req, notBefore); err == nil {
					b.signed.Add(1)
				}
			}
		}()
	}
	return nil
}

func fmtVerb(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func printSizes(rs []*sizeResult) {
	header := fmt.Sprintf("  %-60s", "")
	for _, r := range rs {
		header += fmt.Sprintf(" %14s", fmt.Sprintf("F=%d", r.f))
	}
	row := func(label string, cell func(*sizeResult) string) {
		line := fmt.Sprintf("  %-60s", label)
		for _, r := range rs {
			line += fmt.Sprintf(" %14s", cell(r))
		}
		fmt.Println(line)
	}
	verbSet := map[string]bool{}
	for _, r := range rs {
		for _, m := range []verbs{r.startup, r.issuance, r.renewal} {
			for k, v := range m {
				if v != 0 {
					verbSet[k] = true
				}
			}
		}
	}
	for _, k := range []string{"POST", "DELETE", "GET", "LIST", "WATCH"} {
		verbSet[k] = true
	}
	var vs []string
	for k := range verbSet {
		vs = append(vs, k)
	}
	sort.Strings(vs)
	fmt.Printf("1. Requests to the apiserver on certificaterequests, by verb (from apiserver_request_total)\n%s\n", header)
	for _, phase := range []struct {
		name string
		get  func(*sizeResult) verbs
	}{
		{"start-up, per node", func(r *sizeResult) verbs { return r.startup }},
		{"first issuance, per certificate", func(r *sizeResult) verbs { return r.issuance }},
		{"renewal, per certificate", func(r *sizeResult) verbs { return r.renewal }},
	} {
		for _, verb := range vs {
			label := phase.name + ": " + verb
			switch verb {
			case "PUT status":
				label += " (the signer)"
			case "WATCH":
				label += " (ended)"
			}
			row(label, func(r *sizeResult) string { return fmtVerb(phase.get(r)[verb]) })
		}
	}
	fmt.Println()
	fmt.Println("  (client-go's informers list through their watch (WatchListClient), so start-up shows no LIST;")
	fmt.Println("  a WATCH counts in apiserver_request_total only when it ends: the open ones are in 2, and one")
	fmt.Println("  that ends during a phase was closed by the apiserver and re-opened by the informer: see 2.)")
	fmt.Println()
	fmt.Printf("2. Open watches on certificaterequests (apiserver_longrunning_requests), the signer's one included\n%s\n", header)
	row("open watches", func(r *sizeResult) string { return strconv.FormatFloat(r.watches, 'f', 0, 64) })
	row("nodes + signer", func(r *sizeResult) string { return strconv.Itoa(r.f + 1) })
	row("client-go \"very short watch\" reports (watch re-opened)", func(r *sizeResult) string { return strconv.FormatInt(r.watchEnds, 10) })
	row("watchers the apiserver closed as too slow (terminated_watchers)", func(r *sizeResult) string { return strconv.FormatFloat(r.terminated, 'f', 0, 64) })
	fmt.Println()
	fmt.Printf("3. What each node's informer holds, and memory per node\n%s\n", header)
	row("requests on the apiserver (all fleets so far)", func(r *sizeResult) string { return strconv.Itoa(r.apiserverObjects) })
	row("requests in one node's informer (min-max)", func(r *sizeResult) string { return fmt.Sprintf("%d-%d", r.cachedMin, r.cachedMax) })
	row("heap added per running node, after GC (KiB)", func(r *sizeResult) string { return strconv.FormatFloat(r.heapPerNode/1024, 'f', 0, 64) })
	row("fleet start-up (all NewManager at once)", func(r *sizeResult) string { return r.startWall.Round(time.Millisecond).String() })
	row("first issuance of every volume", func(r *sizeResult) string { return r.issueWall.Round(time.Millisecond).String() })
	row("renewal of every volume", func(r *sizeResult) string { return r.renewWall.Round(time.Millisecond).String() })
	fmt.Println()
}

func printStorms(fl *fleet, ss []*stormResult) {
	fmt.Printf("4. Every node restarts at once with every volume past due: F=%d, %d volumes\n", len(fl.nodes), ss[0].volumes)
	fmt.Printf("   peak/s: most creates in any window of at most 1 s, from apiserver_request_total read every 250 ms\n")
	fmt.Printf("  %-70s %12s %10s %14s %10s\n", "configuration", "peak/s", "creates", "all renewed", "waits")
	for _, s := range ss {
		fmt.Printf("  %-70s %12.0f %10.0f %14s %10.0f\n", s.name, s.peakPerSecond, s.creates, s.wall.Round(time.Millisecond), s.admissionWaits)
	}
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return fmt.Sprintf("%.0f GiB", kb/1024/1024)
		}
	}
	return "?"
}
