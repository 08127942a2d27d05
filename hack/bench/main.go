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

// Command bench measures the manager against the performance targets of the project (see the
// README for the latest figures). It runs on a fake clientset with an auto-signer that issues
// real certificates, so it needs no cluster. It is in the hack module; from the repository's root:
//
//	(cd hack && go run ./bench)            # all scenarios
//	(cd hack && go run ./bench -quick)     # smaller sizes, for a smoke run
//
// Scenarios:
//   - gate: 1000 volumes published as the node server publishes them with ContinueOnNotReady (the
//     publish asks the gate once and, closed, hands the volume to its loop), whose readiness
//     gate opens uniformly 0.5–5 s after the publish; the latency from gate-open to
//     CertificateRequest created, and the gate's asks per volume (the publish's included), with
//     RequeuePod called on gate open, without it (the defaults: the 1 s to 10 s gate backoff
//     alone), without it and with the opt-in 1 s gate poll, and with the behaviour of releases
//     before v0.11.0 (gate pending retried on the 30 s issuance backoff) as the baseline. Every
//     row has the same gate-open times. Upstream csi-lib v0.12.0's schedule is printed beside
//     them as a reference, simulated on those times (see upstreamGateSchedule).
//   - idle: cost of N issued volumes that are not yet due: CPU, storage reads, goroutines, heap.
//   - issue: wall and CPU time to issue N volumes, twice, and 2N, beside the crypto floor: the
//     CPU per volume of the keys, CSRs and certificates alone (see cryptoFloor); and the
//     metadata reads made while they are issued, per volume. The first run of N also pays for
//     the process's heap growing; the second shows the cost once it has.
//   - start: NewManager with N mounted volumes, on MemoryFS and on Filesystem.
//   - heap: the heap after GC once N volumes are issued, their requests in the informer, the
//     fake API's objects and the in-memory store included, in all and per volume
//     (-memprofile writes the heap profile of the largest N).
package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

func main() {
	quick := flag.Bool("quick", false, "smaller sizes for a smoke run")
	only := flag.String("only", "", "run one scenario: gate, idle, issue, start or heap")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	memProfile := flag.String("memprofile", "", "write the heap scenario's heap profile to this file")
	memProfileRate := flag.Int("memprofilerate", 0, "runtime.MemProfileRate for -memprofile (0: Go's default)")
	flag.Parse()
	if *memProfileRate > 0 {
		runtime.MemProfileRate = *memProfileRate
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	// The gate scenario's 1000 volumes: with 200, the p50 of the rows without RequeuePod moved
	// by about as much from run to run as it differs from upstream's schedule.
	gateN, idleN, issueN, startN := 1000, 5000, 5000, 5000
	idleFor := 10 * time.Second
	if *quick {
		gateN, idleN, issueN, startN = 50, 500, 500, 500
		idleFor = 2 * time.Second
	}
	ca, err := testkit.NewCA("bench-ca")
	must(err)
	run := func(name string) bool { return *only == "" || *only == name }

	fmt.Printf("csi-lib manager benchmarks (%s, %d CPUs, %s)\n\n", runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	if run("gate") {
		fmt.Printf("1. gate-open -> CertificateRequest created, %d volumes published with a closed gate that opens 0.5-5 s later\n", gateN)
		fmt.Printf("   %-46s %8s %8s %8s %8s\n", "configuration", "p50", "p99", "max", "asks/vol")
		opens := gateOpenings(gateN)
		for _, c := range []struct {
			name    string
			requeue bool
			gate    wait.Backoff
			poll    time.Duration
		}{
			{"RequeuePod on gate open (defaults)", true, manager.DefaultGateBackoff(), 0},
			{"no RequeuePod (defaults: gate backoff only)", false, manager.DefaultGateBackoff(), 0},
			{"no RequeuePod, GatePollInterval 1 s (opt-in)", false, manager.DefaultGateBackoff(), time.Second},
			{"before v0.11.0: gate on the 30 s issue backoff", false, manager.DefaultRenewalBackoff(), 0},
		} {
			lat, asks := gateScenario(ca, opens, c.requeue, c.gate, c.poll)
			fmt.Printf("   %-46s %8s %8s %8s %8.2f\n", c.name, pct(lat, 50), pct(lat, 99), pct(lat, 100), float64(asks)/float64(gateN))
		}
		lat, asks := upstreamGateSchedule(opens, upstreamRuns)
		fmt.Printf("   %-46s %8s %8s %8s %8.2f\n", "reference: upstream v0.12.0's schedule", pct(lat, 50), pct(lat, 99), pct(lat, 100), asks)
		fmt.Printf("   (simulated on the same gate-open times, %d times over: the publish's ask, a check on its 1 s tick,\n", upstreamRuns)
		fmt.Println("   then one after each step of the default gate backoff, jitter included)")
		fmt.Println()
	}
	if run("idle") {
		r := idleScenario(idleN, idleFor)
		fmt.Printf("2. idle, %d issued volumes not yet due, measured for %s\n", idleN, idleFor)
		fmt.Printf("   CPU %.5f cores, storage reads %.1f/s, %.2f goroutines/volume, %.1f KiB heap/volume, %.1f KiB goroutine stack/volume\n\n",
			r.cores, r.readsPerSec, r.goroutinesPerVolume, r.heapPerVolumeKiB, r.stackPerVolumeKiB)
	}
	if run("issue") {
		fmt.Println("3. issue N volumes at once (auto-signer, real ECDSA keys and certificates)")
		floorN := 3000
		if *quick {
			floorN = 500
		}
		driverFloor, signerFloor := cryptoFloor(ca, floorN)
		floor := driverFloor + signerFloor
		for _, r := range []struct {
			n     int
			label string
		}{{issueN, "#1"}, {issueN, "#2"}, {2 * issueN, ""}} {
			wall, cpu, reads := issueScenario(ca, r.n)
			perVolume := cpu / time.Duration(r.n)
			fmt.Printf("   N=%-6d %2s wall %6.2fs  CPU %6.2fs  CPU per volume %.2f ms (crypto floor %.2f ms: %.2fx)  metadata reads per volume %.1f\n", r.n, r.label, wall.Seconds(), cpu.Seconds(), ms(perVolume), ms(floor), float64(perVolume)/float64(floor), float64(reads)/float64(r.n))
		}
		fmt.Println("   #2 repeats N in the same process; #1 also pays for the process's heap growing (page faults, more")
		fmt.Println("   frequent garbage collection while the heap is small)")
		fmt.Printf("   crypto floor, CPU per volume of the cryptography alone (one goroutine, %d volumes): the driver's P-256 key,\n", floorN)
		fmt.Printf("   CSR and their PEM %.2f ms + the in-process signer's CSR parse and check, certificate and its PEM %.2f ms = %.2f ms\n", ms(driverFloor), ms(signerFloor), ms(floor))
		fmt.Println()
	}
	if run("start") {
		fmt.Printf("4. NewManager with %d mounted volumes\n", startN)
		mem, fs := startScenario(startN)
		fmt.Printf("   MemoryFS %.3fs, Filesystem %.3fs\n\n", mem.Seconds(), fs.Seconds())
	}
	if run("heap") {
		fmt.Println("5. heap after GC with N issued volumes (requests in the informer, fake API objects and store included; the fake's log of calls left out)")
		var heaps [2]uint64
		idleGoroutines := runtime.NumGoroutine()
		for i, n := range []int{issueN, 2 * issueN} {
			profile := ""
			if i == 1 {
				profile = *memProfile
			}
			heaps[i] = heapScenario(ca, n, profile, idleGoroutines)
			fmt.Printf("   N=%-6d %6.1f MiB\n", n, float64(heaps[i])/(1<<20))
		}
		// The difference between the two sizes leaves out what does not grow with N (the
		// fake clientset's watch buffers, the informer, the manager itself).
		perVolume := (float64(heaps[1]) - float64(heaps[0])) / 1024 / float64(issueN)
		fmt.Printf("   heap per volume, its request and key pair included: %.1f KiB\n", perVolume)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func pct(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "-"
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	if i < 0 {
		i = 0
	}
	v := d[i]
	if v < time.Second {
		return fmt.Sprintf("%.1fms", float64(v.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2fs", v.Seconds())
}

// countingReader counts metadata reads.
type countingReader struct {
	storage.MetadataReader
	reads atomic.Int64
}

func (c *countingReader) ReadMetadata(id string) (metadata.Metadata, error) {
	c.reads.Add(1)
	return c.MetadataReader.ReadMetadata(id)
}

// env is a manager on a fake clientset with an auto-signer.
type env struct {
	client *fake.Clientset
	store  *storage.MemoryFS
	reader *countingReader
	m      *manager.Manager
	// written counts key pairs written.
	written atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newEnv(ca *testkit.CA, store *storage.MemoryFS, gate manager.ReadyToRequestFunc, gateBackoff wait.Backoff, gatePoll time.Duration, sign bool) *env {
	e := &env{client: testkit.NewScalableFakeClient(), store: store}
	e.reader = &countingReader{MetadataReader: store}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if sign {
		e.startSigner(ctx, ca)
	}
	log := logr.Discard()
	renewal := manager.DefaultRenewalBackoff()
	m, err := manager.NewManager(manager.Options{
		Client:             e.client,
		MetadataReader:     e.reader,
		Log:                &log,
		NodeID:             "bench-node",
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
				Namespace: "bench", Duration: time.Hour,
				IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
			}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(store, func(metadata.Metadata, crypto.PrivateKey, []byte) {
			e.written.Add(1)
		}),
		ReadyToRequest:       gate,
		GateBackoffConfig:    &gateBackoff,
		GatePollInterval:     gatePoll,
		RenewalBackoffConfig: &renewal,
	})
	must(err)
	e.m = m
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	must(testkit.WaitInformerWatching(wctx, e.client))
	wcancel()
	return e
}

// startSigner issues every request it sees, with two workers.
func (e *env) startSigner(ctx context.Context, ca *testkit.CA) {
	w, err := e.client.CertmanagerV1().CertificateRequests("bench").Watch(ctx, metav1.ListOptions{})
	must(err)
	queue := make(chan *cmapi.CertificateRequest, 100000)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(queue)
		for {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case ev := <-w.ResultChan():
				if req, ok := ev.Object.(*cmapi.CertificateRequest); ok && ev.Type == watch.Added {
					queue <- req
				}
			}
		}
	}()
	for i := 0; i < 2; i++ {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for req := range queue {
				_, _ = testkit.Issue(ctx, e.client, ca, req, time.Now())
			}
		}()
	}
}

func (e *env) stop() {
	e.m.Stop()
	e.cancel()
	e.wg.Wait()
}

func volumeMeta(id string, nit *time.Time) metadata.Metadata {
	return metadata.Metadata{
		VolumeID: id, TargetPath: "/t/" + id, NextIssuanceTime: nit, Mounted: true,
		VolumeContext: map[string]string{metadata.PodNameVolumeContextKey: "pod-" + id, metadata.PodUIDVolumeContextKey: "uid-" + id},
	}
}

func register(store storage.Interface, meta metadata.Metadata) {
	_, err := store.RegisterMetadata(meta)
	must(err)
	must(store.WriteMetadata(meta.VolumeID, meta))
}

// upstreamRuns is how many times upstreamGateSchedule simulates each volume, so that the
// reference's own jitter hardly moves its figures from one run of the benchmark to the next.
const upstreamRuns = 20

// gateOpenings draws when each of n volumes' gates opens after its publish: uniformly in
// 0.5–5 s.
func gateOpenings(n int) []time.Duration {
	opens := make([]time.Duration, n)
	for i := range opens {
		opens[i] = 500*time.Millisecond + time.Duration(rand.Int64N(int64(4500*time.Millisecond)))
	}
	return opens
}

// upstreamGateSchedule simulates upstream csi-lib v0.12.0's timing for volumes whose gates open
// at opens after their publish, runs times over; it returns the latencies of every run and the
// asks per volume. Upstream's node server asks the gate once (IsVolumeReadyToRequest) and, with
// ContinueOnNotReady, hands a volume whose gate is closed to ManageVolume; its loop checks the
// volume on a 1 s wall-clock ticker from its start, so the first check, which asks the gate,
// comes one second after the publish, and each check that finds the gate closed is followed by
// the next Step() of the default gate backoff (1 s, factor 2, jitter 0.5, cap 10 s) before the
// next (a tick that came meanwhile is taken at once). The latency is the first check at or after
// the gate opens, minus the opening; checks take no time here.
func upstreamGateSchedule(opens []time.Duration, runs int) ([]time.Duration, float64) {
	lat := make([]time.Duration, 0, runs*len(opens))
	asks := 0
	for r := 0; r < runs; r++ {
		for _, open := range opens {
			backoff := manager.DefaultGateBackoff()
			asks += 2 // the publish's, and the check on the first tick
			at := time.Second
			for at < open {
				at += backoff.Step()
				asks++
			}
			lat = append(lat, at-open)
		}
	}
	return lat, float64(asks) / float64(runs*len(opens))
}

// gateScenario publishes len(opens) volumes as the node server does with ContinueOnNotReady,
// their gates opening at opens after the publishes, and returns each volume's latency from its
// gate opening to its request's creation, and how many times the gate was asked in all, the
// publishes' asks included.
func gateScenario(ca *testkit.CA, opens []time.Duration, requeue bool, gateBackoff wait.Backoff, gatePoll time.Duration) ([]time.Duration, int) {
	n := len(opens)
	store := storage.NewMemoryFS()
	var mu sync.Mutex
	openAt := map[string]time.Time{}
	asks := 0
	gate := func(meta metadata.Metadata) (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		asks++
		at, ok := openAt[meta.VolumeID]
		if !ok || time.Now().Before(at) {
			return false, "pod has no IP"
		}
		return true, ""
	}
	e := newEnv(ca, store, gate, gateBackoff, gatePoll, true)
	defer e.stop()
	created := make(chan [2]any, n)
	e.client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		created <- [2]any{req.Labels[api.VolumeIDHashLabelKey], time.Now()}
		return false, nil, nil
	})
	hashToID := map[string]string{}
	metas := make([]metadata.Metadata, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("gate-%d", i)
		// ContinueOnNotReady's zero time: "managed, no certificate yet".
		metas[i] = volumeMeta(id, &time.Time{})
		register(store, metas[i])
		hashToID[hashOf(id)] = id
	}
	var timers []*time.Timer
	for i, delay := range opens {
		id := metas[i].VolumeID
		mu.Lock()
		openAt[id] = time.Now().Add(delay)
		mu.Unlock()
		must(e.m.ManageVolumeForPublish(context.Background(), metas[i], true))
		if requeue {
			uid := "uid-" + id
			timers = append(timers, time.AfterFunc(delay, func() { e.m.RequeuePod(typesUID(uid)) }))
		}
	}
	var lat []time.Duration
	deadline := time.After(5 * time.Minute)
	for len(lat) < n {
		select {
		case c := <-created:
			id := hashToID[c[0].(string)]
			mu.Lock()
			lat = append(lat, c[1].(time.Time).Sub(openAt[id]))
			mu.Unlock()
		case <-deadline:
			fmt.Fprintf(os.Stderr, "gate scenario: only %d of %d requests created\n", len(lat), n)
			return lat, gateAsks(&mu, &asks)
		}
	}
	for _, t := range timers {
		t.Stop()
	}
	return lat, gateAsks(&mu, &asks)
}

func gateAsks(mu *sync.Mutex, asks *int) int {
	mu.Lock()
	defer mu.Unlock()
	return *asks
}

type idleResult struct {
	cores, readsPerSec, goroutinesPerVolume, heapPerVolumeKiB float64
	// stackPerVolumeKiB is the goroutine stacks in use per volume (runtime.MemStats.StackInuse),
	// which HeapAlloc leaves out: what a volume's own goroutine costs beyond the heap.
	stackPerVolumeKiB float64
}

func idleScenario(n int, d time.Duration) idleResult {
	// Let the goroutines of an earlier scenario end first: the heap they free must not count
	// against this one's.
	time.Sleep(time.Second)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	gBefore := runtime.NumGoroutine()
	store := storage.NewMemoryFS()
	nit := time.Now().Add(time.Hour)
	for i := 0; i < n; i++ {
		register(store, volumeMeta(fmt.Sprintf("idle-%d", i), &nit))
	}
	e := newEnv(nil, store, manager.AlwaysReadyToRequest, manager.DefaultGateBackoff(), 0, false)
	defer e.stop()
	// Let start-up settle (every loop reads its metadata once), then measure.
	time.Sleep(time.Second)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	g := runtime.NumGoroutine() - gBefore
	reads0 := e.reader.reads.Load()
	cpu0 := cpuTime()
	time.Sleep(d)
	cpu := cpuTime() - cpu0
	reads := e.reader.reads.Load() - reads0
	return idleResult{
		cores:               cpu.Seconds() / d.Seconds(),
		readsPerSec:         float64(reads) / d.Seconds(),
		goroutinesPerVolume: float64(g) / float64(n),
		heapPerVolumeKiB:    float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024 / float64(n),
		stackPerVolumeKiB:   float64(int64(after.StackInuse)-int64(before.StackInuse)) / 1024 / float64(n),
	}
}

func issueScenario(ca *testkit.CA, n int) (wall, cpu time.Duration, reads int64) {
	store := storage.NewMemoryFS()
	for i := 0; i < n; i++ {
		register(store, volumeMeta(fmt.Sprintf("issue-%d", i), nil))
	}
	// Registered but not resumed: the volumes are managed all at once below.
	for i := 0; i < n; i++ {
		m := volumeMeta(fmt.Sprintf("issue-%d", i), nil)
		m.Mounted = false
		must(store.SetRawMetadata(m.VolumeID, mustJSON(m)))
	}
	e := newEnv(ca, store, manager.AlwaysReadyToRequest, manager.DefaultGateBackoff(), 0, true)
	defer e.stop()
	cpu0, reads0, start := cpuTime(), e.reader.reads.Load(), time.Now()
	for i := 0; i < n; i++ {
		e.m.ManageVolume(fmt.Sprintf("issue-%d", i))
	}
	for e.written.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	return time.Since(start), cpuTime() - cpu0, e.reader.reads.Load() - reads0
}

// heapScenario issues n volumes and returns the heap they hold once all are written: the heap
// in use after GC, minus the heap before anything was created. With profile set, it writes the
// heap profile there.
func heapScenario(ca *testkit.CA, n int, profile string, idleGoroutines int) uint64 {
	// Wait (10 s at most) for the goroutines of an earlier run to end: while one still holds that
	// run's manager, its heap counts in this run's baseline, and the difference comes out too
	// small (N=10000 once measured below N=5000).
	for i := 0; i < 100 && runtime.NumGoroutine() > idleGoroutines; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	store := storage.NewMemoryFS()
	for i := 0; i < n; i++ {
		register(store, volumeMeta(fmt.Sprintf("heap-%d", i), nil))
		m := volumeMeta(fmt.Sprintf("heap-%d", i), nil)
		m.Mounted = false
		must(store.SetRawMetadata(m.VolumeID, mustJSON(m)))
	}
	e := newEnv(ca, store, manager.AlwaysReadyToRequest, manager.DefaultGateBackoff(), 0, true)
	defer e.stop()
	for i := 0; i < n; i++ {
		e.m.ManageVolume(fmt.Sprintf("heap-%d", i))
	}
	for e.written.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	// Let the informer see the last updates and the attempts finish.
	time.Sleep(time.Second)
	// The fake clientset keeps a copy of every call made through it, which no apiserver does.
	e.client.ClearActions()
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if profile != "" {
		f, err := os.Create(profile)
		must(err)
		must(pprof.WriteHeapProfile(f))
		must(f.Close())
	}
	runtime.KeepAlive(e)
	return after.HeapAlloc - before.HeapAlloc
}

func startScenario(n int) (time.Duration, time.Duration) {
	nit := time.Now().Add(time.Hour)
	mem := storage.NewMemoryFS()
	dir, err := os.MkdirTemp("", "csi-lib-bench-")
	must(err)
	defer os.RemoveAll(dir)
	fs, err := storage.NewFilesystemWithOptions(logr.Discard(), dir, storage.FilesystemOptions{PlainDirectory: true})
	must(err)
	for i := 0; i < n; i++ {
		meta := volumeMeta(fmt.Sprintf("start-%d", i), &nit)
		register(mem, meta)
		register(fs, meta)
	}
	measure := func(reader storage.MetadataReader) time.Duration {
		client := fake.NewSimpleClientset()
		log := logr.Discard()
		noop := func(metadata.Metadata) (crypto.PrivateKey, error) { return nil, nil }
		start := time.Now()
		m, err := manager.NewManager(manager.Options{
			Client: client, MetadataReader: reader, Log: &log, NodeID: "bench-node",
			GeneratePrivateKey: noop,
			GenerateRequest:    func(metadata.Metadata) (*manager.CertificateRequestBundle, error) { return nil, nil },
			SignRequest:        func(metadata.Metadata, crypto.PrivateKey, *x509.CertificateRequest) ([]byte, error) { return nil, nil },
			WriteKeypair:       func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error { return nil },
		})
		must(err)
		d := time.Since(start)
		m.Stop()
		return d
	}
	return measure(mem), measure(fs)
}

// cryptoFloor measures, as issueScenario does (the process's CPU time) and on one goroutine,
// the cryptography of n issuances and nothing else, and returns its CPU per volume in two
// parts. driver is what the benchmark's driver functions do for a volume (GeneratePrivateKey,
// SignRequest and the key's PEM in WriteKeypair: a P-256 key, a CSR signed with it, both
// PEM-encoded). signer is what the auto-signer does for the volume's request (CA.Sign: parsing
// the CSR and checking its signature, signing the certificate, its PEM). issueScenario's CPU
// includes both, since the signer runs in the same process, so the floor does too. Nothing of
// the library is in it: not the pending key's PKCS #8 and PEM, not the leaf's parsing.
func cryptoFloor(ca *testkit.CA, n int) (driver, signer time.Duration) {
	metas := make([]metadata.Metadata, n)
	for i := range metas {
		metas[i] = volumeMeta(fmt.Sprintf("floor-%d", i), nil)
	}
	csrs := make([][]byte, n)
	runtime.GC()
	cpu0 := cpuTime()
	for i, meta := range metas {
		key, err := testkit.GenerateKey(meta)
		must(err)
		csrs[i], err = testkit.SignCSR(meta, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}})
		must(err)
		_, err = testkit.KeyPEM(key)
		must(err)
	}
	driver = cpuTime() - cpu0
	runtime.GC()
	cpu0 = cpuTime()
	for _, csr := range csrs {
		_, err := ca.Sign(csr, time.Now(), time.Hour)
		must(err)
	}
	signer = cpuTime() - cpu0
	return driver / time.Duration(n), signer / time.Duration(n)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
