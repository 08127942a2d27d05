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

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
)

// logLine is one line of a container's log with kubelet's timestamp.
type logLine struct {
	at   time.Time
	text string
}

// containerLines returns the checker's log lines with their timestamps.
func (c *cluster) containerLines(ctx context.Context, pod string) ([]logLine, error) {
	return c.logLines(ctx, namespace, pod, "checker")
}

// logLines returns a container's log lines with their timestamps.
func (c *cluster) logLines(ctx context.Context, ns, pod, container string) ([]logLine, error) {
	raw, err := c.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		ts, text, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		out = append(out, logLine{at: at, text: text})
	}
	return out, nil
}

// waitLines waits until the checker's log satisfies cond, and returns the lines.
func (c *cluster) waitLines(ctx context.Context, pod, what string, timeout time.Duration, cond func([]logLine) bool) ([]logLine, error) {
	return c.waitLinesIn(ctx, namespace, pod, "checker", what, timeout, cond)
}

// waitLinesIn waits until a container's log satisfies cond, and returns the lines.
func (c *cluster) waitLinesIn(ctx context.Context, ns, pod, container, what string, timeout time.Duration, cond func([]logLine) bool) ([]logLine, error) {
	var lines []logLine
	err := poll(ctx, what, 100*time.Millisecond, timeout, func() (bool, error) {
		var err error
		if lines, err = c.logLines(ctx, ns, pod, container); err != nil {
			return false, nil // not started yet
		}
		return cond(lines), nil
	})
	return lines, err
}

// okSerials returns the distinct serials the checker reported as good, in order, and the first
// bad line if any.
func okSerials(lines []logLine) (serials []string, bad string) {
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.text, "certificate ok serial="):
			s := strings.Fields(strings.TrimPrefix(l.text, "certificate ok serial="))[0]
			if !slices.Contains(serials, s) {
				serials = append(serials, s)
			}
		case strings.HasPrefix(l.text, "certificate bad") && bad == "":
			bad = l.text
		}
	}
	return serials, bad
}

// waitSerials waits until the checker has reported at least n distinct good certificates, or a
// bad set, and returns its lines, the serials and the first bad line.
func (c *cluster) waitSerials(ctx context.Context, pod, what string, n int, timeout time.Duration) (lines []logLine, serials []string, bad string, err error) {
	lines, err = c.waitLines(ctx, pod, what, timeout, func(l []logLine) bool {
		s, b := okSerials(l)
		return len(s) >= n || b != ""
	})
	serials, bad = okSerials(lines)
	return lines, serials, bad, err
}

// volumeDirOf returns the driver's directory of the pod's volume ("" if there is none).
func (c *cluster) volumeDirOf(pod string) string {
	dirs, _ := filepath.Glob(filepath.Join(c.n.dir, "driver", "inmemfs", "*", "metadata.json"))
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var meta struct {
			VolumeContext map[string]string `json:"volumeContext"`
		}
		if json.Unmarshal(data, &meta) == nil && meta.VolumeContext[metadata.PodNameVolumeContextKey] == pod {
			return filepath.Dir(f)
		}
	}
	return ""
}

// waitRequestsCollected waits until the garbage collector has deleted the pod's requests
// (their owner reference names the deleted pod).
func (c *cluster) waitRequestsCollected(ctx context.Context, pod string) error {
	return poll(ctx, "the garbage collector to delete the requests of "+pod, 200*time.Millisecond, time.Minute, func() (bool, error) {
		n, err := c.requestsOf(ctx, pod)
		return n == 0, err
	})
}

// seriesOf counts the driver's metric series labelled with the volume.
func (c *cluster) seriesOf(ctx context.Context, volume string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.metricsAddress+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.Count(string(body), `volume="`+volume+`"`), err
}

// requestsOf lists the pod's CertificateRequests that exist now.
func (c *cluster) requestsOf(ctx context.Context, pod string) (int, error) {
	list, err := c.cm.CertmanagerV1().CertificateRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range list.Items {
		for _, o := range r.OwnerReferences {
			if o.Name == pod {
				n++
			}
		}
	}
	return n, nil
}

// createPod creates a pod whose certificates live for lifetime; with renewBefore > 0 the driver
// persists NotAfter less renewBefore as the renewal point (a volume attribute, as
// csi.cert-manager.io/renew-before); attrs are further volume attributes.
func (c *cluster) createPod(ctx context.Context, name string, lifetime, renewBefore time.Duration, attrs map[string]string) error {
	pod := certPod(name, lifetime)
	if renewBefore > 0 {
		pod.Spec.Volumes[0].CSI.VolumeAttributes[renewBeforeAttribute] = renewBefore.String()
	}
	for k, v := range attrs {
		pod.Spec.Volumes[0].CSI.VolumeAttributes[k] = v
	}
	_, err := c.kube.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// renewBeforeAttribute is the example driver's renew-before volume attribute.
const renewBeforeAttribute = plugin.RenewBeforeAttribute

// storiesWithLivePods tells stories 1, 3, 5, 6 and 7 on two pods: one with a long-lived
// certificate, one renewed every ten seconds or so.
func (c *cluster) storiesWithLivePods(ctx context.Context) []result {
	const longLived, renewing = "cert-in-container", "renewing"
	s1 := result{story: "1 certificate in a real container"}
	s3 := result{story: "3 renewal seen from inside"}
	s5 := result{story: "5 driver restart with live pods"}
	s6 := result{story: "6 pod deleted"}
	s7 := result{story: "7 events on the pod"}
	all := func() []result { return []result{s1, s3, s5, s6, s7} }

	created, stopWatch, err := c.watchRequestCreations(ctx)
	if err != nil {
		s1.detail = err.Error()
		return all()
	}
	defer stopWatch()
	start := time.Now()
	// The long-lived pod's requests name the CA ClusterIssuer, the renewing pod's the Issuer.
	if err := c.createPod(ctx, longLived, time.Hour, 0, clusterIssuerAttributes); err != nil {
		s1.detail = err.Error()
		return all()
	}
	// 15 s certificates renewed 9 s before NotAfter: 6 s into their life, where the library's
	// default would be 10 s.
	if err := c.createPod(ctx, renewing, 15*time.Second, 9*time.Second, nil); err != nil {
		s3.detail = err.Error()
		return all()
	}
	defer func() { _ = c.deletePod(ctx, longLived) }()

	// 1: the first thing the container says.
	lines, err := c.waitLines(ctx, longLived, "the container's verdict", 2*time.Minute, func(l []logLine) bool { return len(l) > 0 })
	if err != nil {
		s1.detail = err.Error()
	} else if err := c.signedByCertManager(ctx, longLived, "ClusterIssuer", clusterIssuerName); err != nil {
		s1.detail = err.Error()
	} else {
		s1.ok = strings.HasPrefix(lines[0].text, "certificate ok")
		s1.detail = fmt.Sprintf("%q, %v after the pod's creation; approved and signed by cert-manager through the CA ClusterIssuer", lines[0].text, lines[0].at.Sub(start).Round(10*time.Millisecond))
	}

	// 7: the library's events, listed on the pod through the API.
	var reasons []string
	err = poll(ctx, "a CertificateIssued event on the pod", 200*time.Millisecond, 30*time.Second, func() (bool, error) {
		evs, err := c.kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", longLived).String()})
		if err != nil {
			return false, err
		}
		reasons = reasons[:0]
		for _, e := range evs.Items {
			if e.Source.Component == driverName {
				reasons = append(reasons, e.Reason)
			}
		}
		return slices.Contains(reasons, manager.EventReasonCertificateIssued), nil
	})
	s7.ok = err == nil
	s7.detail = fmt.Sprintf("the driver's events on the pod: %v", reasons)
	if err != nil {
		s7.detail += "; " + err.Error()
	}

	// 3: the renewing pod's container sees its serial change, never a mismatched set, and each
	// renewal's request is created at the renewal point the driver persisted.
	_, serials, bad, err := c.waitSerials(ctx, renewing, "renewals seen in the container", 6, time.Minute)
	var late []time.Duration
	if err == nil && bad == "" {
		late, err = c.renewalLateness(renewing, created)
	}
	switch {
	case err != nil:
		s3.detail = err.Error()
	case bad != "":
		s3.detail = bad
	case len(late) < 2 || slices.Min(late) < 0 || slices.Max(late) > time.Second:
		s3.detail = fmt.Sprintf("renewal request created - persisted renewal point: %v (want at least 2 renewals, none before the point, none a second after it)", late)
	default:
		s3.ok = true
		s3.detail = fmt.Sprintf("serials seen in the container: %d, never a key that does not match its chain (15 s certificates, renew-before 9 s); "+
			"renewal request created - persisted renewal point: %v / %v (p50 / max, %d renewals)", len(serials), percentile(late, 50), percentile(late, 100), len(late))
		fmt.Printf("story 3: renewal request created - persisted renewal point (p50 / max): %v / %v (%d renewals)\n", percentile(late, 50), percentile(late, 100), len(late))
	}

	// 5: restart the driver; the long-lived pod keeps its certificate with no new request, and
	// the renewing pod keeps being renewed.
	before := c.requestsCreatedFor(longLived)
	c.stopDriver(syscall.SIGTERM)
	if err := c.startDriver(ctx, driverFlags{}); err != nil {
		s5.detail = err.Error()
		return all()
	}
	restarted := len(serials)
	_, serials, bad, err = c.waitSerials(ctx, renewing, "a renewal after the restart", restarted+1, time.Minute)
	longLines, _ := c.containerLines(ctx, longLived)
	longSerials, longBad := okSerials(longLines)
	switch {
	case err != nil:
		s5.detail = err.Error()
	case bad != "" || longBad != "":
		s5.detail = bad + longBad
	case c.requestsCreatedFor(longLived) != before || len(longSerials) != 1:
		s5.detail = fmt.Sprintf("the long-lived pod: %d requests before the restart, %d after; serials %v", before, c.requestsCreatedFor(longLived), longSerials)
	default:
		s5.ok = true
		s5.detail = "the long-lived pod kept its certificate with no new request; the renewing pod renewed again after the restart"
	}

	// 6: delete the renewing pod (the restarted driver has counted its renewals): kubelet
	// unpublishes, the volume's files go, its metric series stay with their final counts (for
	// manager.MetricSeriesRetention, as upstream keeps them; the unit tests step a fake clock
	// past it), and the garbage collector removes its requests.
	volDir := c.volumeDirOf(renewing)
	volume := filepath.Base(volDir)
	if n, err := c.seriesOf(ctx, volume); err != nil || n == 0 {
		s6.detail = fmt.Sprintf("the live volume has %d metric series (%v)", n, err)
		return all()
	}
	deleted := time.Now()
	if err := c.deletePod(ctx, renewing); err != nil {
		s6.detail = err.Error()
		return all()
	}
	gone := time.Since(deleted)
	if _, err := os.Stat(volDir); volDir == "" || !os.IsNotExist(err) {
		s6.detail = fmt.Sprintf("the volume's files are still there (%q: %v)", volDir, err)
		return all()
	}
	if n, err := c.seriesOf(ctx, volume); err != nil || n == 0 {
		s6.detail = fmt.Sprintf("the unpublished volume's metric series went at once (%d left, %v): they stay for the retention", n, err)
		return all()
	}
	if err := c.waitRequestsCollected(ctx, renewing); err != nil {
		s6.detail = err.Error()
		return all()
	}
	s6.ok = true
	s6.detail = fmt.Sprintf("pod gone %v after its deletion, its volume's files removed (its metric series kept for the retention), its requests deleted by the garbage collector %v after", gone.Round(10*time.Millisecond), time.Since(deleted).Round(10*time.Millisecond))
	return all()
}

// journalEntry is a line of the driver's journal.
type journalEntry struct {
	Time   time.Time  `json:"time"`
	Event  string     `json:"event"`
	Volume string     `json:"volume"`
	Pod    string     `json:"pod"`
	Next   *time.Time `json:"next,omitempty"` // the NextIssuanceTime written with a key pair
}

// requestCreations records when the apiserver reports each CertificateRequest of the namespace
// added, by owner pod, in order.
type requestCreations struct {
	mu sync.Mutex
	at map[string][]time.Time
}

// watchRequestCreations starts recording; the returned function stops it.
func (c *cluster) watchRequestCreations(ctx context.Context) (*requestCreations, func(), error) {
	w, err := c.cm.CertmanagerV1().CertificateRequests(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	r := &requestCreations{at: map[string][]time.Time{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			req, ok := ev.Object.(*cmapi.CertificateRequest)
			if !ok || ev.Type != watch.Added {
				continue
			}
			now := time.Now()
			r.mu.Lock()
			for _, o := range req.OwnerReferences {
				r.at[o.Name] = append(r.at[o.Name], now)
			}
			r.mu.Unlock()
		}
	}()
	return r, func() { w.Stop(); <-done }, nil
}

// renewalLateness pairs each renewal point the driver persisted for the pod (its journal) with
// the first of the pod's requests created after the previous point, and returns how long after
// the point each was created (negative: before it). A point with no request after it yet is
// left out.
func (c *cluster) renewalLateness(pod string, created *requestCreations) ([]time.Duration, error) {
	f, err := os.Open(c.journalPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []time.Time
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e journalEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Pod == pod && e.Event == "written" && e.Next != nil {
			points = append(points, *e.Next)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	created.mu.Lock()
	defer created.mu.Unlock()
	var late []time.Duration
	for i, p := range points {
		after := time.Time{}
		if i > 0 {
			after = points[i-1]
		}
		for _, t := range created.at[pod] {
			if t.After(after) && t.After(p.Add(-5*time.Second)) {
				late = append(late, t.Sub(p))
				break
			}
		}
	}
	return late, nil
}

// journal reads the driver's journal: the first time of each event, by pod.
func (c *cluster) journal() (map[string]map[string]time.Time, error) {
	f, err := os.Open(c.journalPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[string]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e journalEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if out[e.Pod] == nil {
			out[e.Pod] = map[string]time.Time{}
		}
		if _, seen := out[e.Pod][e.Event]; !seen {
			out[e.Pod][e.Event] = e.Time
		}
	}
	return out, sc.Err()
}

// podIPWatcher records when each pod of the namespace first has an IP in the API.
type podIPWatcher struct {
	mu sync.Mutex
	at map[string]time.Time
}

// watchPodIPs starts recording; the returned function stops it (an open watch holds up the
// apiserver's shutdown).
func (c *cluster) watchPodIPs(ctx context.Context) (*podIPWatcher, func(), error) {
	w := &podIPWatcher{at: map[string]time.Time{}}
	stop, err := c.watchPods(ctx, func(pod *corev1.Pod) {
		if pod.Status.PodIP == "" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.at[pod.Name]; !seen {
			w.at[pod.Name] = time.Now()
		}
	})
	return w, stop, err
}

// watchPods calls seen with every pod of the namespace the apiserver reports, added or changed,
// until the returned function is called (an open watch holds up the apiserver's shutdown).
func (c *cluster) watchPods(ctx context.Context, seen func(*corev1.Pod)) (stop func(), err error) {
	watch, err := c.kube.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range watch.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				seen(pod)
			}
		}
	}()
	return func() { watch.Stop(); <-done }, nil
}

func (w *podIPWatcher) get(pod string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.at[pod]
	return t, ok
}

// gateInProcessVariant is story 2's RequeuePod variant signed by the e2e program's own signer,
// against which the others (signed by cert-manager) compare.
const gateInProcessVariant = "RequeuePod, in-process"

// gateFigures are story 2's measurements for one variant.
type gateFigures struct {
	publishToIP, ipToWritten, createdToSeen []time.Duration
	publishedAfterIP, startedWithout        int
}

// storyGateOnPodIP is story 2: the readiness gate waits for the pod's IP, with
// ContinueOnNotReady, for pods pods at once; once with RequeuePod from a pod informer, once with
// the gate polled only.
func (c *cluster) storyGateOnPodIP(ctx context.Context, pods int) (result, map[string]*gateFigures) {
	r := result{story: "2 readiness gate on the pod's IP"}
	figures := map[string]*gateFigures{}
	for _, variant := range []struct {
		name      string
		requeue   bool
		inProcess bool // the e2e program's own signer, where cert-manager signs the others
	}{{"RequeuePod", true, false}, {"gate polled", false, false}, {gateInProcessVariant, true, true}} {
		if variant.inProcess {
			c.useInProcessSigner()
		}
		c.stopDriver(syscall.SIGTERM)
		if err := c.startDriver(ctx, driverFlags{gateOnPodIP: true, requeuePods: variant.requeue}); err != nil {
			r.detail = err.Error()
			return r, figures
		}
		f, err := c.gateVariant(ctx, strings.NewReplacer(", ", "-", " ", "-").Replace(strings.ToLower(variant.name)), pods)
		if err != nil {
			r.detail = variant.name + ": " + err.Error()
			return r, figures
		}
		figures[variant.name] = f
		if variant.inProcess {
			if err := c.useCertManager(ctx); err != nil {
				r.detail = err.Error()
				return r, figures
			}
		}
	}
	c.stopDriver(syscall.SIGTERM)
	if err := c.startDriver(ctx, driverFlags{}); err != nil {
		r.detail = err.Error()
		return r, figures
	}
	r.ok = true
	var parts []string
	for _, v := range []string{"RequeuePod", "gate polled", gateInProcessVariant} {
		f := figures[v]
		parts = append(parts, fmt.Sprintf("%s: pod IP -> certificate written p50 %v", v, percentile(f.ipToWritten, 50)))
	}
	r.detail = fmt.Sprintf("%d pods per variant; %s (table below)", pods, strings.Join(parts, ", "))
	return r, figures
}

func (c *cluster) gateVariant(ctx context.Context, prefix string, pods int) (*gateFigures, error) {
	ips, stopWatch, err := c.watchPodIPs(ctx)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	created := map[string]time.Time{}
	var names []string
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		created[name] = time.Now()
		if err := c.createPod(ctx, name, time.Hour, 0, nil); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, name := range names {
			_ = c.kube.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}
		for _, name := range names {
			_ = c.deletePod(ctx, name)
		}
	}()
	f := &gateFigures{}
	for _, name := range names {
		lines, _, bad, err := c.waitSerials(ctx, name, name+"'s certificate in the container", 1, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		if bad != "" {
			return nil, fmt.Errorf("%s: %s", name, bad)
		}
		if !strings.HasPrefix(lines[0].text, "certificate ok") {
			f.startedWithout++
		}
		for _, l := range lines {
			if strings.HasPrefix(l.text, "certificate ok") {
				f.createdToSeen = append(f.createdToSeen, l.at.Sub(created[name]))
				break
			}
		}
	}
	j, err := c.journal()
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		ip, ok := ips.get(name)
		published, written := j[name]["publish"], j[name]["written"]
		if !ok || published.IsZero() || written.IsZero() {
			return nil, fmt.Errorf("%s: pod IP seen %t, publish %v, written %v", name, ok, published, written)
		}
		f.publishToIP = append(f.publishToIP, ip.Sub(published))
		f.ipToWritten = append(f.ipToWritten, written.Sub(ip))
		if published.After(ip) {
			f.publishedAfterIP++
		}
	}
	return f, nil
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)].Round(time.Millisecond)
}

// printGateFigures prints story 2's table.
func printGateFigures(figures map[string]*gateFigures) {
	if len(figures) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("story 2, per pod (p50 / p90 / max):")
	fmt.Printf("%-22s %-28s %-28s %-28s %s\n", "variant", "publish -> pod IP in API", "pod IP -> certificate written", "pod created -> container sees it", "started without it / published after IP")
	for _, v := range []string{"RequeuePod", "gate polled", gateInProcessVariant} {
		f := figures[v]
		if f == nil {
			continue
		}
		row := func(ds []time.Duration) string {
			return fmt.Sprintf("%v / %v / %v", percentile(ds, 50), percentile(ds, 90), percentile(ds, 100))
		}
		fmt.Printf("%-22s %-28s %-28s %-28s %d of %d / %d\n", v, row(f.publishToIP), row(f.ipToWritten), row(f.createdToSeen), f.startedWithout, len(f.createdToSeen), f.publishedAfterIP)
	}
}

// storyKilledDuringFirstIssuance is story 4: the driver is killed while a publish waits for the
// first certificate (the signer holds it). Three variants: the pod deleted while the driver is
// down, with kubelet running, and with kubelet restarted meanwhile (kubelet unpublishes, the
// sweep has removed the volume, nothing is requested for the deleted pod); and the pod not
// deleted (kubelet retries the publish, which resumes the held request: one request in all).
func (c *cluster) storyKilledDuringFirstIssuance(ctx context.Context) []result {
	return []result{
		c.killVariant(ctx, "4a killed mid-publish, pod deleted", "killed-deleted", true, false),
		c.killVariant(ctx, "4b same, kubelet restarted too", "killed-kubelet", true, true),
		c.killVariant(ctx, "4c killed mid-publish, pod lives", "killed-lives", false, false),
	}
}

// waitPodGone waits, for at most two minutes, until the pod no longer exists.
func (c *cluster) waitPodGone(ctx context.Context, pod string) error {
	return poll(ctx, "the pod to be gone", 100*time.Millisecond, 2*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// podWaitingForFirstCertificate creates a pod whose first certificate the signer holds, and
// waits until its publish has created the request. release lets the signer sign; cleanup deletes
// the pod and releases the signer (call it in any case).
func (c *cluster) podWaitingForFirstCertificate(ctx context.Context, pod string) (release, cleanup func(), err error) {
	release = c.hold(pod)
	cleanup = release
	if err := c.createPod(ctx, pod, time.Hour, 0, nil); err != nil {
		return release, cleanup, err
	}
	cleanup = func() {
		_ = c.deletePod(ctx, pod)
		release()
	}
	err = poll(ctx, "the first issuance's request", 50*time.Millisecond, time.Minute, func() (bool, error) {
		return c.requestsCreatedFor(pod) > 0, nil
	})
	return release, cleanup, err
}

func (c *cluster) killVariant(ctx context.Context, story, pod string, deletePod, restartKubelet bool) (r result) {
	r.story = story
	release, cleanup, err := c.podWaitingForFirstCertificate(ctx, pod)
	defer cleanup()
	if err != nil {
		r.detail = err.Error()
		return r
	}
	driverLog := filepath.Join(c.n.dir, "driver.log")
	c.stopDriver(syscall.SIGKILL)
	if deletePod {
		if err := c.kube.CoreV1().Pods(namespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
			r.detail = err.Error()
			return r
		}
	}
	if restartKubelet {
		if err := c.n.restartProcess("kubelet"); err != nil {
			r.detail = err.Error()
			return r
		}
	}
	logStart := fileSize(driverLog)
	back := time.Now()
	if err := c.startDriver(ctx, driverFlags{}); err != nil {
		r.detail = err.Error()
		return r
	}
	if deletePod {
		if err := c.waitPodGone(ctx, pod); err != nil {
			r.detail = err.Error()
			return r
		}
		goneAfter := time.Since(back)
		calls := grpcCallsSince(driverLog, logStart)
		if n := c.requestsCreatedFor(pod); n != 1 {
			r.detail = fmt.Sprintf("%d requests for the deleted pod, want the held one only", n)
			return r
		}
		if err := c.waitRequestsCollected(ctx, pod); err != nil {
			r.detail = err.Error()
			return r
		}
		r.ok = true
		r.detail = fmt.Sprintf("pod gone %v after the driver came back; kubelet called %v; no new request, the held one garbage-collected", goneAfter.Round(100*time.Millisecond), calls)
		return r
	}
	release()
	_, _, bad, err := c.waitSerials(ctx, pod, "the certificate after kubelet's retry", 1, 2*time.Minute)
	if err != nil {
		r.detail = err.Error()
		return r
	}
	if bad != "" {
		r.detail = bad
		return r
	}
	calls := grpcCallsSince(driverLog, logStart)
	n := c.requestsCreatedFor(pod)
	r.ok = n == 1
	r.detail = fmt.Sprintf("certificate in the container %v after the driver came back; kubelet called %v; %d request(s) in all", time.Since(back).Round(100*time.Millisecond), calls, n)
	return r
}

// storyTerminatingPodPublish is story 11: a publish waits for its first certificate (the signer
// holds it) when kubelet restarts; back, kubelet publishes the volume again, and the pod is
// deleted while that publish waits. Kubelet cannot finish the pod while a publish of its volume
// is in flight. The driver's pod informer tells the manager the pod is terminating
// (PodTerminating): the publish ends at once with Aborted, nothing more is requested, kubelet
// unpublishes, and the pod goes within seconds, where a publish waiting its full minute for the
// certificate held the pod for a minute.
func (c *cluster) storyTerminatingPodPublish(ctx context.Context) (r result) {
	const pod = "deleted-in-restart"
	r.story = "11 pod deleted during a kubelet restart"
	_, cleanup, err := c.podWaitingForFirstCertificate(ctx, pod)
	defer cleanup()
	if err != nil {
		r.detail = err.Error()
		return r
	}
	driverLog := filepath.Join(c.n.dir, "driver.log")
	logStart := fileSize(driverLog)
	if err := c.n.restartProcess("kubelet"); err != nil {
		r.detail = err.Error()
		return r
	}
	if err := poll(ctx, "kubelet's publish after its restart", 100*time.Millisecond, 2*time.Minute, func() (bool, error) {
		return grpcCallsSince(driverLog, logStart)["NodePublishVolume"] > 0, nil
	}); err != nil {
		r.detail = err.Error()
		return r
	}
	deleted := time.Now()
	if err := c.kube.CoreV1().Pods(namespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		r.detail = err.Error()
		return r
	}
	if err := c.waitPodGone(ctx, pod); err != nil {
		r.detail = err.Error()
		return r
	}
	gone := time.Since(deleted)
	calls := grpcCallsSince(driverLog, logStart)
	n := c.requestsCreatedFor(pod)
	r.ok = gone < 5*time.Second && n == 1
	r.detail = fmt.Sprintf("pod gone %v after its deletion (goal: under 5 s); kubelet called %v after its restart; %d request(s) for the pod in all", gone.Round(100*time.Millisecond), calls, n)
	return r
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// grpcCallsSince counts the node RPCs the driver logged after offset of its log, by method.
func grpcCallsSince(path string, offset int64) map[string]int {
	calls := map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return calls
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return calls
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, m := range []string{"NodePublishVolume", "NodeUnpublishVolume"} {
			if strings.Contains(sc.Text(), "/csi.v1.Node/"+m) && strings.Contains(sc.Text(), `"Call"`) {
				calls[m]++
			}
		}
	}
	return calls
}
