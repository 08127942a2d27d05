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

// Command demo shows the library doing its whole job on one machine: a real kube-apiserver and
// etcd (envtest), cert-manager's own controllers signing from a CA Issuer (hack/cm-controllers,
// CM_CONTROLLERS; the signer outage of story 4 has a signer of the demo's own, which can fail
// requests, in a namespace of its own), the example node driver (examples/csi-driver's package
// plugin, built from the library's public API, run in this process), and a kubelet stand-in that creates pods and publishes their
// volumes over CSI gRPC. Run it with `make demo` (which builds the envtest binaries first);
// `make demo ARGS=--help` lists the options.
//
// It tells four stories and checks each one, exiting non-zero if one did not happen:
//  1. gate-open -> CertificateRequest latency with RequeuePod, against v0.12.0's gate settings
//     (this library's code with a 1–10 s gate backoff, no gate poll and no RequeuePod);
//  2. a renewal before expiry, with the volume's files swapped atomically through ..data;
//  3. a driver crash during a first issuance while the pod is deleted: swept at restart;
//  4. a signer outage: attempts back off on the issuance backoff and recover.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

type options struct {
	pods         int
	lifetime     time.Duration
	issueBackoff time.Duration
	outage       time.Duration
	keep         bool
	verbose      int
	short        bool
	metricsAddr  string
}

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", 8, "pods (volumes) per pass in story 1")
	flag.DurationVar(&o.lifetime, "cert-lifetime", 2*time.Minute, "certificate lifetime; renewal happens at two thirds of it")
	flag.DurationVar(&o.issueBackoff, "issue-backoff", 5*time.Second, "the example driver's issuance (renewal) backoff base, so story 4 fits in a demo; the pass with v0.12.0's gate settings uses the library default (30 s), v0.12.0's")
	flag.DurationVar(&o.outage, "outage", 12*time.Second, "how long the signer fails every request in story 4")
	flag.BoolVar(&o.keep, "keep", false, "keep running (and serving /metrics) after the stories, until interrupted")
	flag.IntVar(&o.verbose, "v", -1, "also print the library's logs at this verbosity (they always go to a file)")
	flag.BoolVar(&o.short, "short", false, "a shorter run for CI: 3 pods, 45 s certificates, 8 s outage")
	flag.StringVar(&o.metricsAddr, "metrics-address", "127.0.0.1:0", "where the example driver serves /metrics")
	flag.Parse()
	if o.short {
		o.pods, o.lifetime, o.outage = 3, 45*time.Second, 8*time.Second
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// demo holds the shared pieces and the timeline.
type demo struct {
	o       options
	start   time.Time
	out     io.Writer
	kube    kubernetes.Interface
	cm      cmclient.Interface
	ca      *testkit.CA
	log     logr.Logger
	workDir string
	// kubeconfig is the apiserver's kubeconfig, for cert-manager's controllers and the driver.
	kubeconfig string
	mounter    mount.Interface
	plain      bool

	refuse  atomic.Bool        // story 4: the demo's signer fails every request
	mu      sync.Mutex         // guards vols
	vols    map[string]*volume // by volume hash
	written chan writtenEvent  // certificate written (any volume)
}

type volume struct {
	id, pod, ns string
	gateOpen    time.Time
	requested   time.Time
	writes      []time.Time
	dataTargets []string
	serials     []string
}

type writtenEvent struct {
	id     string
	target string
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(o options) error {
	d := &demo{o: o, start: time.Now(), out: os.Stdout, vols: map[string]*volume{}, written: make(chan writtenEvent, 1000)}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the demo with `make demo`")
	}
	work, err := os.MkdirTemp("", "csi-lib-demo-")
	if err != nil {
		return err
	}
	d.workDir = work
	defer os.RemoveAll(work)
	logFile, err := os.Create(filepath.Join(work, "library.log"))
	if err != nil {
		return err
	}
	d.log = funcr.New(func(prefix, args string) {
		line := prefix + " " + args + "\n"
		_, _ = logFile.WriteString(line)
		if o.verbose >= 0 {
			_, _ = os.Stderr.WriteString(line)
		}
	}, funcr.Options{Verbosity: max(o.verbose, 2)})
	klog.SetLogger(d.log.WithName("klog"))

	fmt.Fprintf(d.out, "csi-lib demo: %d pods per pass, %v certificates, issuance backoff %v, outage %v\n", o.pods, o.lifetime, o.issueBackoff, o.outage)
	fmt.Fprintf(d.out, "signer: cert-manager's own controllers (approver, CA issuer) from a CA Issuer; story 4's outage: the demo's own signer, which fails requests\n")
	cmControllers := os.Getenv("CM_CONTROLLERS")
	if _, err := os.Stat(cmControllers); err != nil {
		return fmt.Errorf("cert-manager's controllers (CM_CONTROLLERS=%q): %w; run the demo with make demo", cmControllers, err)
	}
	d.say("starting kube-apiserver and etcd (envtest) with cert-manager's CRDs")
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	cfg := cp.Config
	d.kube = kubernetes.NewForConfigOrDie(cfg)
	d.cm = cmclient.NewForConfigOrDie(cfg)
	d.say("apiserver ready at %s", cfg.Host)
	if d.ca, err = testkit.NewCA("demo-ca"); err != nil {
		return err
	}
	d.chooseMounts()
	defer d.cleanupMounts()
	for _, ns := range []string{"demo", "demo-v012", "demo-crash", outageNamespace} {
		if _, err := d.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	d.kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(d.kubeconfig, cp.KubeConfig, 0o600); err != nil {
		return err
	}
	stopCertManager, err := d.startCertManager(cmControllers, work, "demo", "demo-v012")
	if err != nil {
		return err
	}
	defer stopCertManager()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.runSigner(ctx)
	go d.watchRequests(ctx)

	results := map[int]string{}
	failures := 0
	check := func(story int, err error, ok string) {
		if err != nil {
			failures++
			results[story] = "FAILED: " + err.Error()
			d.say("story %d FAILED: %v", story, err)
			return
		}
		results[story] = ok
	}

	// The example driver, new behaviour.
	newCfg := driverConfig{name: "driver", nodeID: "demo-node", base: "base-new", requeuePods: true, metrics: true}
	drv, err := d.startDriver(newCfg)
	if err != nil {
		return err
	}
	defer func() {
		if drv != nil {
			drv.stop()
		}
	}()
	metricsURL := drv.metricsURL()
	d.say("example driver serving CSI on %s, metrics at %s", drv.socket, metricsURL)

	// Story 1.
	fmt.Fprintln(d.out, "\n== Story 1: the readiness gate opens (pod gets its IP) -> CertificateRequest")
	newLat, err := d.pass(drv, "demo", "app", o.pods)
	v012Res := ""
	if err == nil {
		// The same driver with v0.12.0's gate settings: the baseline the fork is compared with.
		fmt.Fprintln(d.out, "\n   ...and the same with "+v012GateLabel)
		v012Drv, serr := d.startDriver(driverConfig{name: "driver-v012", nodeID: "demo-node-v012", base: "base-v012", v012Gate: true})
		if serr != nil {
			return serr
		}
		var v012Lat []time.Duration
		v012Lat, err = d.pass(v012Drv, "demo-v012", "v012", o.pods)
		d.unpublishAll(v012Drv, "demo-v012")
		v012Drv.stop()
		v012Res = fmt.Sprintf("v0.12.0's gate settings p50 %s, p99 %s", pct(v012Lat, 50), pct(v012Lat, 99))
	}
	check(1, err, fmt.Sprintf("RequeuePod p50 %s, p99 %s; %s (%d volumes each)", pct(newLat, 50), pct(newLat, 99), v012Res, o.pods))

	// Story 2.
	fmt.Fprintln(d.out, "\n== Story 2: renewal before expiry, files swapped atomically through ..data")
	res, err := d.renewal()
	check(2, err, res)

	// Story 3.
	fmt.Fprintln(d.out, "\n== Story 3: the driver dies during a first issuance and the pod is deleted meanwhile")
	drv, res, err = d.crash(drv, newCfg)
	check(3, err, res)
	if drv == nil {
		return fmt.Errorf("story 3 left no driver running: %w", err)
	}
	metricsURL = drv.metricsURL()

	// Story 4.
	fmt.Fprintln(d.out, "\n== Story 4: signer outage")
	res, err = d.outage(drv, metricsURL)
	check(4, err, res)

	fmt.Fprintln(d.out, "\n== /metrics of the example driver ("+metricsURL+"), certmanager_csi_* families")
	printMetrics(d.out, metricsURL)

	fmt.Fprintln(d.out, "\n== Unpublishing")
	d.unpublishAll(drv, "demo")
	d.unpublishAll(drv, outageNamespace)

	fmt.Fprintln(d.out, "\n== Summary")
	for i, name := range []string{"", "gate-open -> request", "renewal before expiry", "crash during first issuance", "signer outage"} {
		if i > 0 {
			fmt.Fprintf(d.out, "  %d. %-30s %s\n", i, name, results[i])
		}
	}
	fmt.Fprintf(d.out, "  library logs: %s (removed at exit)\n", filepath.Join(work, "library.log"))
	if o.keep {
		fmt.Fprintf(d.out, "\nKeeping the apiserver and driver running; /metrics at %s. Ctrl-C to stop.\n", metricsURL)
		select {}
	}
	if failures > 0 {
		return fmt.Errorf("%d of 4 stories did not happen", failures)
	}
	fmt.Fprintf(d.out, "\n4 passed, 0 failed\n")
	return nil
}

// chooseMounts uses real tmpfs and bind mounts when this process may mount, else a plain
// directory and a recording mounter.
func (d *demo) chooseMounts() {
	src, dst := filepath.Join(d.workDir, "probe-src"), filepath.Join(d.workDir, "probe-dst")
	_ = os.MkdirAll(src, 0o755)
	_ = os.MkdirAll(dst, 0o755)
	real := mount.New("")
	if err := real.Mount(src, dst, "", []string{"bind"}); err == nil {
		_ = real.Unmount(dst)
		d.mounter = real
		d.say("this process may mount: volumes live on a tmpfs and are bind-mounted read-only for real")
		return
	}
	d.mounter = mount.NewFakeMounter(nil)
	d.plain = true
	d.say("this process may not mount: volumes live in a plain directory and bind mounts are recorded, not made")
}

// cleanupMounts unmounts whatever the demo left mounted under its work directory.
func (d *demo) cleanupMounts() {
	if d.plain {
		return
	}
	mps, err := d.mounter.List()
	if err != nil {
		return
	}
	// Deepest first, so bind mounts go before the tmpfs they come from.
	sort.Slice(mps, func(i, j int) bool { return len(mps[i].Path) > len(mps[j].Path) })
	for _, mp := range mps {
		if strings.HasPrefix(mp.Path, d.workDir+"/") {
			_ = d.mounter.Unmount(mp.Path)
		}
	}
}

// onWritten is the drivers' OnWritten: it notes the certificate written, where ..data points
// and the serial of the chain.
func (d *demo) onWritten(meta metadata.Metadata) {
	target, _ := os.Readlink(filepath.Join(meta.TargetPath, "..data"))
	if target == "" {
		// With a recording mounter the target path is empty: read the store's directory.
		target = readDataLink(d.workDir, meta.VolumeID)
	}
	chain := readVolumeFile(d.workDir, meta.VolumeID, "tls.crt")
	d.mu.Lock()
	v := d.vols[util.HashIdentifier(meta.VolumeID)]
	if v != nil {
		v.writes = append(v.writes, time.Now())
		v.dataTargets = append(v.dataTargets, target)
		v.serials = append(v.serials, serialOf(chain))
	}
	d.mu.Unlock()
	select {
	case d.written <- writtenEvent{id: meta.VolumeID, target: target}:
	default:
	}
}

// runSigner is the demo's own signer, for story 4's namespace only (cert-manager signs in the
// namespaces with its Issuer, and leaves requests elsewhere waiting): it approves and signs
// every CertificateRequest there; during an outage it fails them.
func (d *demo) runSigner(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := d.cm.CertmanagerV1().CertificateRequests("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for ev := range w.ResultChan() {
			req, ok := ev.Object.(*cmapi.CertificateRequest)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || testkit.IsFinished(req) {
				continue
			}
			if req.Namespace != outageNamespace {
				continue
			}
			if d.refuse.Load() {
				_, _ = testkit.SetConditions(ctx, d.cm, req, testkit.Failed("demo signer outage: the CA is unreachable"))
				continue
			}
			_, _ = testkit.Issue(ctx, d.cm, d.ca, req, time.Now())
		}
		w.Stop()
	}
}

// watchRequests records when each volume's CertificateRequests appear.
func (d *demo) watchRequests(ctx context.Context) {
	list, err := d.cm.CertmanagerV1().CertificateRequests("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	w, err := d.cm.CertmanagerV1().CertificateRequests("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		req, ok := ev.Object.(*cmapi.CertificateRequest)
		if !ok || ev.Type != watch.Added {
			continue
		}
		d.mu.Lock()
		v := d.vols[req.Labels[api.VolumeIDHashLabelKey]]
		first := v != nil && v.requested.IsZero()
		if first {
			v.requested = time.Now()
		}
		d.mu.Unlock()
		if first && !v.gateOpen.IsZero() {
			d.say("%-10s CertificateRequest %s created, %s after the gate opened", v.pod, req.Name[:8], fmtDur(v.requested.Sub(v.gateOpen)))
		}
	}
}

// publish is the kubelet stand-in: create the Pod, publish its volume over CSI, and assign the
// pod an IP after ipDelay (zero: before publishing).
func (d *demo) publish(ctx context.Context, drv *exampleDriver, ns, pod string, ipDelay time.Duration) (*volume, error) {
	p, err := d.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns},
		// On the driver's node: the driver watches its own node's pods.
		Spec: corev1.PodSpec{NodeName: drv.nodeID, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	v := &volume{id: "csi-" + ns + "-" + pod, pod: pod, ns: ns}
	d.mu.Lock()
	d.vols[util.HashIdentifier(v.id)] = v
	d.mu.Unlock()
	assignIP := func() error {
		p.Status.PodIP = fmt.Sprintf("10.1.%d.%d", rand.IntN(250), rand.IntN(250)+1)
		if _, err := d.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return err
		}
		d.mu.Lock()
		v.gateOpen = time.Now()
		d.mu.Unlock()
		return nil
	}
	if ipDelay == 0 {
		if err := assignIP(); err != nil {
			return nil, err
		}
		// Publish only once the driver's pod informer has seen the IP, so the gate is open.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if seen, err := drv.serving.Pods.Pods(ns).Get(pod); err == nil && seen.Status.PodIP != "" {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the driver's pod informer never saw the IP of %s", pod)
			}
		}
	}
	client, err := nodeClient(drv.socket)
	if err != nil {
		return nil, err
	}
	target := filepath.Join(d.workDir, "pods", ns, pod, "tls")
	req := &csi.NodePublishVolumeRequest{
		VolumeId: v.id, TargetPath: target, Readonly: true,
		VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}},
		VolumeContext: map[string]string{
			metadata.EphemeralVolumeContextKey: "true", metadata.PodNameVolumeContextKey: pod,
			metadata.PodNamespaceVolumeContextKey: ns, metadata.PodUIDVolumeContextKey: string(p.UID),
			plugin.DurationAttribute: d.o.lifetime.String(),
		},
	}
	if _, err := client.NodePublishVolume(ctx, req); err != nil {
		return v, err
	}
	if ipDelay > 0 {
		d.say("%-10s published (no IP yet: the gate is closed); IP in %s", pod, fmtDur(ipDelay))
		go func() {
			time.Sleep(ipDelay)
			if err := assignIP(); err == nil {
				d.say("%-10s got its IP: gate open", pod)
			}
		}()
	}
	return v, nil
}

// pass publishes n pods whose IPs arrive 0.5-5 s later and waits until all have certificates.
func (d *demo) pass(drv *exampleDriver, ns, prefix string, n int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var vols []*volume
	for i := 0; i < n; i++ {
		delay := 500*time.Millisecond + time.Duration(rand.Int64N(int64(4500*time.Millisecond)))
		v, err := d.publish(ctx, drv, ns, fmt.Sprintf("%s-%d", prefix, i), delay)
		if err != nil {
			return nil, fmt.Errorf("publishing: %w", err)
		}
		vols = append(vols, v)
	}
	for {
		done := 0
		var lat []time.Duration
		d.mu.Lock()
		for _, v := range vols {
			if len(v.writes) > 0 {
				done++
			}
			if !v.requested.IsZero() && !v.gateOpen.IsZero() {
				lat = append(lat, v.requested.Sub(v.gateOpen))
			}
		}
		d.mu.Unlock()
		if done == n && len(lat) == n {
			d.say("all %d volumes have certificates: gate-open -> request p50 %s, p99 %s", n, pct(lat, 50), pct(lat, 99))
			return lat, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("only %d of %d volumes got certificates", done, n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// renewal waits for a story-1 volume to be renewed and shows the ..data swap.
func (d *demo) renewal() (string, error) {
	deadline := time.After(d.o.lifetime + 30*time.Second)
	d.say("waiting for the first renewal (due at 2/3 of the %v lifetime)", d.o.lifetime)
	for {
		select {
		case ev := <-d.written:
			d.mu.Lock()
			v := d.vols[util.HashIdentifier(ev.id)]
			var before, after, s1, s2 string
			renewed := v != nil && v.ns == "demo" && len(v.writes) >= 2
			if renewed {
				n := len(v.writes)
				before, after = v.dataTargets[n-2], v.dataTargets[n-1]
				s1, s2 = v.serials[n-2], v.serials[n-1]
			}
			d.mu.Unlock()
			if !renewed {
				continue
			}
			d.say("%-10s renewed: serial %s -> %s; ..data -> %s swapped to %s in one rename", v.pod, s1, s2, before, after)
			if before == after || s1 == s2 {
				return "", fmt.Errorf("renewal did not replace the files")
			}
			return fmt.Sprintf("%s renewed %s after issuance, ..data swapped atomically", v.pod, fmtDur(v.writes[len(v.writes)-1].Sub(v.writes[len(v.writes)-2]))), nil
		case <-deadline:
			return "", fmt.Errorf("no renewal within the certificate lifetime")
		}
	}
}

// frozenStore stands for a killed process: once frozen it drops every write, so the directory
// keeps exactly what the process had written.
// (It is the driver's store wrapped through plugin.Config.WrapStore.)
type frozenStore struct {
	plugin.Store
	frozen atomic.Bool
}

func (f *frozenStore) WriteMetadata(id string, m metadata.Metadata) error {
	if f.frozen.Load() {
		return nil
	}
	return f.Store.WriteMetadata(id, m)
}
func (f *frozenStore) WriteFiles(m metadata.Metadata, files map[string][]byte) error {
	if f.frozen.Load() {
		return nil
	}
	return f.Store.WriteFiles(m, files)
}
func (f *frozenStore) RemoveVolume(id string) error {
	if f.frozen.Load() {
		return nil
	}
	return f.Store.RemoveVolume(id)
}

func (d *demo) crash(drv *exampleDriver, cfg driverConfig) (*exampleDriver, string, error) {
	ctx := context.Background()
	// Restart the driver with a store we can freeze, keeping the same directory.
	var frozen *frozenStore
	drv.stop()
	cfg.wrapStore = func(s plugin.Store) plugin.Store { frozen = &frozenStore{Store: s}; return frozen }
	drv, err := d.startDriver(cfg)
	if err != nil {
		return nil, "", err
	}
	go func() { _, _ = d.publish(ctx, drv, "demo-crash", "doomed", 0) }()
	doomedHash := util.HashIdentifier("csi-demo-crash-doomed")
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.mu.Lock()
		v := d.vols[doomedHash]
		requested := v != nil && !v.requested.IsZero()
		d.mu.Unlock()
		if requested {
			break
		}
		if time.Now().After(deadline) {
			return drv, "", fmt.Errorf("the doomed volume never requested a certificate")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.say("doomed     published, request submitted, the signer has not answered yet: killing the driver now")
	// The nearest an in-process demo gets to a killed driver: the store keeps exactly what it
	// had written, and the stop (manager first, so the publish in flight fails at once) writes
	// and removes nothing.
	frozen.frozen.Store(true)
	drv.stop()
	if err := d.kube.CoreV1().Pods("demo-crash").Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		return nil, "", err
	}
	d.say("doomed     pod deleted while the driver is down: kubelet will never unpublish it")
	list, err := d.cm.CertmanagerV1().CertificateRequests("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	w, err := d.cm.CertmanagerV1().CertificateRequests("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, "", err
	}
	defer w.Stop()

	cfg.wrapStore = nil
	drv, err = d.startDriver(cfg)
	if err != nil {
		return nil, "", err
	}
	sweep := drv.serving.Filesystem.StartupSweep()
	d.say("driver restarted: start-up sweep removed never-published %v, kept %d mounted volumes", sweep.RemovedNeverMounted, sweep.Kept)
	// A resumed volume is ready: it has a certificate that is not due, renewing at once if it
	// fell due while the driver was down.
	resumed := 0
	for wait := time.Now().Add(30 * time.Second); time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
		resumed = 0
		d.mu.Lock()
		for _, v := range d.vols {
			if v.ns == "demo" && drv.serving.Manager.IsVolumeReady(v.id) {
				resumed++
			}
		}
		d.mu.Unlock()
		if resumed == d.o.pods {
			break
		}
	}
	d.say("%d mounted volumes resumed by the new manager; watching the API for 5 s for a request for the doomed volume", resumed)
	quiet := time.After(5 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if req, ok := ev.Object.(*cmapi.CertificateRequest); ok && ev.Type == watch.Added && req.Labels[api.VolumeIDHashLabelKey] == doomedHash {
				return drv, "", fmt.Errorf("a CertificateRequest was created for the swept volume")
			}
		case <-quiet:
			if len(sweep.RemovedNeverMounted) != 1 || sweep.RemovedNeverMounted[0] != "csi-demo-crash-doomed" {
				return drv, "", fmt.Errorf("sweep removed %v, want the doomed volume", sweep.RemovedNeverMounted)
			}
			if resumed != d.o.pods {
				return drv, "", fmt.Errorf("%d of %d mounted volumes resumed", resumed, d.o.pods)
			}
			d.say("no request for the doomed volume: it is gone for good")
			return drv, fmt.Sprintf("never-published volume swept at restart, no request for it afterwards, %d mounted volumes resumed", resumed), nil
		}
	}
}

func (d *demo) outage(drv *exampleDriver, metricsURL string) (string, error) {
	ctx := context.Background()
	d.refuse.Store(true)
	d.say("signer outage begins: every request fails for %v", d.o.outage)
	began := time.Now()
	v, err := d.publish(ctx, drv, outageNamespace, "outage-0", 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	seen := 0.0
	ended := false
	for {
		errs := metricValue(metricsURL, "certmanager_csi_issue_errors_total", v.id)
		if errs > seen {
			seen = errs
			d.say("outage-0   issuance attempt failed: issue_errors_total=%v, next attempt after the issuance backoff", errs)
		}
		if !ended && time.Since(began) > d.o.outage {
			ended = true
			d.refuse.Store(false)
			d.say("signer outage ends")
		}
		d.mu.Lock()
		issued := len(v.writes) > 0
		d.mu.Unlock()
		if issued {
			d.say("outage-0   certificate issued %s after publish, after %v failed attempts", fmtDur(time.Since(began)), seen)
			if seen < 1 {
				return "", fmt.Errorf("no failed attempt was recorded during the outage")
			}
			if err := d.printPodEvents(ctx, outageNamespace, "outage-0"); err != nil {
				return "", err
			}
			return fmt.Sprintf("%v failed attempts backed off (issue_errors_total), recovered %s after publish; the pod's events tell its owner", seen, fmtDur(time.Since(began))), nil
		}
		if time.Since(began) > d.o.outage+2*time.Minute {
			return "", fmt.Errorf("no recovery after the outage")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// printPodEvents prints the pod's events as kubectl describe pod lists them, once the events of
// the outage (failures, then the certificate) have reached the apiserver; it fails if they do
// not within 20 s.
func (d *demo) printPodEvents(ctx context.Context, ns, pod string) error {
	var events []corev1.Event
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, err := d.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
		if err != nil {
			return err
		}
		events = list.Items
		reasons := map[string]bool{}
		for _, ev := range events {
			reasons[ev.Reason] = true
		}
		if reasons[manager.EventReasonCertificateRequestFailed] && reasons[manager.EventReasonCertificateIssued] {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pod's events did not show the outage and the recovery: %v", reasons)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Slice(events, func(i, j int) bool { return events[i].FirstTimestamp.Before(&events[j].FirstTimestamp) })
	fmt.Fprintf(d.out, "   kubectl describe pod %s -n %s\n   Events:\n", pod, ns)
	fmt.Fprintf(d.out, "     %-8s %-26s %-16s %-16s %s\n", "Type", "Reason", "Age", "From", "Message")
	fmt.Fprintf(d.out, "     %-8s %-26s %-16s %-16s %s\n", "----", "------", "----", "----", "-------")
	for _, ev := range events {
		age := time.Since(ev.LastTimestamp.Time).Round(time.Second).String()
		if ev.Count > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, ev.Count, ev.LastTimestamp.Sub(ev.FirstTimestamp.Time).Round(time.Second))
		}
		fmt.Fprintf(d.out, "     %-8s %-26s %-16s %-16s %s\n", ev.Type, ev.Reason, age, ev.Source.Component, ev.Message)
	}
	return nil
}

func (d *demo) unpublishAll(drv *exampleDriver, ns string) {
	client, err := nodeClient(drv.socket)
	if err != nil {
		return
	}
	d.mu.Lock()
	var vols []*volume
	for _, v := range d.vols {
		if v.ns == ns {
			vols = append(vols, v)
		}
	}
	d.mu.Unlock()
	sort.Slice(vols, func(i, j int) bool { return vols[i].id < vols[j].id })
	for _, v := range vols {
		target := filepath.Join(d.workDir, "pods", v.ns, v.pod, "tls")
		if _, err := client.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: target}); err != nil {
			d.say("%-10s unpublish failed: %v", v.pod, err)
			continue
		}
	}
	d.say("unpublished %d volumes in %s", len(vols), ns)
}

var clients sync.Map

func nodeClient(socket string) (csi.NodeClient, error) {
	if c, ok := clients.Load(socket); ok {
		return c.(csi.NodeClient), nil
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := csi.NewNodeClient(conn)
	clients.Store(socket, c)
	return c, nil
}

func printMetrics(w io.Writer, url string) {
	resp, err := http.Get(url)
	if err != nil {
		fmt.Fprintln(w, "  (cannot read metrics:", err, ")")
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "certmanager_csi_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

func metricValue(url, family, volume string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, family+"{") && strings.Contains(line, `volume="`+volume+`"`) {
			var v float64
			fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v)
			return v
		}
	}
	return 0
}
