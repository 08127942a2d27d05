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
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// The demo on the real node: `make demo` tells the demo's four stories here when the machine
// can run a node (hack/demo tells them with its kubelet stand-in otherwise).

// demoStory is one of the demo's stories: what it showed, or why it failed.
type demoStory struct {
	name    string
	ok      bool
	summary string
}

// runDemo tells the four stories and returns them for the summary.
func (c *cluster) runDemo(ctx context.Context, pods int) []demoStory {
	return []demoStory{
		c.demoGate(ctx, pods),
		c.demoRenewal(ctx),
		c.demoCrash(ctx),
		c.demoOutage(ctx),
	}
}

func printDemoSummary(stories []demoStory) {
	fmt.Println("\n== Summary (real node: kubelet, containerd, runc)")
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for i, s := range stories {
		verdict := ""
		if !s.ok {
			verdict = "FAILED: "
		}
		fmt.Fprintf(w, "  %d. %s\t%s%s\n", i+1, s.name, verdict, s.summary)
	}
	_ = w.Flush()
}

// demoGate: the gate waits for the pod's IP; with RequeuePod the certificate follows the IP at
// once; with v0.12.0's gate settings (this driver with the 1–10 s gate backoff, no gate poll and
// no RequeuePod: upstream v0.12.0's settings, not its code) it waits for the backoff's next step.
func (c *cluster) demoGate(ctx context.Context, pods int) demoStory {
	s := demoStory{name: "gate-open -> certificate"}
	fmt.Println("\n== Story 1: the readiness gate opens (the pod gets its IP from CNI) -> certificate")
	var parts []string
	for _, v := range []struct {
		name   string
		prefix string
		flags  driverFlags
	}{
		{"RequeuePod", "app", driverFlags{gateOnPodIP: true, requeuePods: true}},
		{"v0.12.0's gate settings", "v012", driverFlags{gateOnPodIP: true, v012Gate: true}},
	} {
		if v.flags.v012Gate {
			fmt.Println("   ...and the same with v0.12.0's gate settings (1–10 s backoff, no poll, no RequeuePod)")
		}
		c.stopDriver(syscall.SIGTERM)
		if err := c.startDriver(ctx, v.flags); err != nil {
			s.summary = err.Error()
			return s
		}
		f, err := c.gateVariant(ctx, v.prefix, pods)
		if err != nil {
			s.summary = err.Error()
			return s
		}
		for i, d := range f.ipToWritten {
			logf("%s-%02d  got its IP %v after kubelet's publish; certificate written %v after the IP", v.prefix, i, f.publishToIP[i].Round(10*time.Millisecond), d.Round(time.Millisecond))
		}
		parts = append(parts, fmt.Sprintf("%s p50 %v, max %v", v.name, percentile(f.ipToWritten, 50), percentile(f.ipToWritten, 100)))
	}
	c.stopDriver(syscall.SIGTERM)
	if err := c.startDriver(ctx, driverFlags{}); err != nil {
		s.summary = err.Error()
		return s
	}
	s.ok = true
	s.summary = fmt.Sprintf("pod IP -> certificate written: %s (%d pods each)", strings.Join(parts, "; "), pods)
	return s
}

// demoRenewal: a container watches its certificate through ..data and sees it renewed.
func (c *cluster) demoRenewal(ctx context.Context) demoStory {
	s := demoStory{name: "renewal before expiry"}
	fmt.Println("\n== Story 2: renewal before expiry, seen from inside the container through ..data")
	const pod = "renewing"
	if err := c.createPod(ctx, pod, 15*time.Second, 9*time.Second, nil); err != nil {
		s.summary = err.Error()
		return s
	}
	defer func() { _ = c.deletePod(ctx, pod) }()
	lines, serials, bad, err := c.waitSerials(ctx, pod, "a renewal seen in the container", 2, time.Minute)
	switch {
	case err != nil:
		s.summary = err.Error()
	case bad != "":
		s.summary = bad
	default:
		for _, l := range lines {
			logf("%s  the container says: %s", pod, l.text)
		}
		s.ok = true
		s.summary = fmt.Sprintf("15 s certificates: the container saw serial %s replaced by %s, every set consistent", serials[0], serials[1])
	}
	return s
}

// demoCrash: the driver dies during a first issuance and the pod is deleted meanwhile.
func (c *cluster) demoCrash(ctx context.Context) demoStory {
	s := demoStory{name: "crash during first issuance"}
	fmt.Println("\n== Story 3: the driver dies during a first issuance and the pod is deleted meanwhile")
	r := c.killVariant(ctx, "", "doomed", true, false)
	s.ok = r.ok
	s.summary = r.detail
	logf("doomed  %s", r.detail)
	return s
}

// demoOutage: the signer fails every request for a while; attempts back off and recover, and
// the pod's events tell its owner. cert-manager fails no request in an outage (its requests wait,
// and an attempt waits 60 s for its request), so the demo's own signer tells this story.
func (c *cluster) demoOutage(ctx context.Context) demoStory {
	s := demoStory{name: "signer outage"}
	fmt.Println("\n== Story 4: signer outage (signed by the demo's own signer, which fails every request for a while)")
	c.useInProcessSigner()
	const pod = "outage-0"
	c.stopDriver(syscall.SIGTERM)
	if err := c.startDriver(ctx, driverFlags{issueBackoff: 2 * time.Second}); err != nil {
		s.summary = err.Error()
		return s
	}
	end := c.failAll()
	start := time.Now()
	if err := c.createPod(ctx, pod, time.Hour, 0, nil); err != nil {
		end()
		s.summary = err.Error()
		return s
	}
	defer func() { _ = c.deletePod(ctx, pod) }()
	// The outage ends once the driver has seen its attempts fail twice.
	if err := poll(ctx, "two failed attempts", 100*time.Millisecond, time.Minute, func() (bool, error) {
		return c.requestsCreatedFor(pod) >= 2, nil
	}); err != nil {
		end()
		s.summary = err.Error()
		return s
	}
	end()
	logf("%s  signer outage ends after %v, %d requests failed", pod, time.Since(start).Round(10*time.Millisecond), c.requestsCreatedFor(pod))
	lines, _, _, err := c.waitSerials(ctx, pod, "the certificate after the outage", 1, time.Minute)
	if err != nil {
		s.summary = err.Error()
		return s
	}
	var issuedAt time.Time
	for _, l := range lines {
		if strings.HasPrefix(l.text, "certificate ok") {
			issuedAt = l.at
			break
		}
	}
	failed := c.requestsCreatedFor(pod) - 1
	logf("%s  certificate in the container %v after the pod's creation, after %d failed attempts", pod, issuedAt.Sub(start).Round(10*time.Millisecond), failed)
	fmt.Printf("   kubectl describe pod %s -n %s\n", pod, namespace)
	reasons, err := c.printEvents(ctx, pod)
	if err != nil {
		s.summary = err.Error()
		return s
	}
	s.ok = failed > 0 && strings.Contains(reasons, "CertificateRequestFailed") && strings.Contains(reasons, "CertificateIssued")
	s.summary = fmt.Sprintf("%d failed attempts backed off, certificate %v after the pod's creation; events %s", failed, issuedAt.Sub(start).Round(10*time.Millisecond), reasons)
	return s
}

// printEvents prints the pod's events as kubectl describe does, once the issued one is there,
// and returns their reasons.
func (c *cluster) printEvents(ctx context.Context, pod string) (string, error) {
	var reasons string
	var lines []string
	err := poll(ctx, "the pod's CertificateIssued event", 200*time.Millisecond, 30*time.Second, func() (bool, error) {
		evs, err := c.kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String()})
		if err != nil {
			return false, err
		}
		var rs []string
		lines = lines[:0]
		for _, e := range evs.Items {
			if e.Source.Component != driverName {
				continue
			}
			rs = append(rs, e.Reason)
			lines = append(lines, fmt.Sprintf("     %s\t%s\t%s\t%s", e.Type, e.Reason, e.Source.Component, e.Message))
		}
		reasons = strings.Join(rs, ",")
		return strings.Contains(reasons, "CertificateIssued"), nil
	})
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "   Events:\n     Type\tReason\tFrom\tMessage")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	_ = w.Flush()
	return reasons, err
}
