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

// Command e2e runs the library's stories on a real node: kubelet, containerd, runc and Debian's
// CNI plugins on this machine, against an envtest kube-apiserver, with a CSI driver built from
// the library's public API (examples/csi-driver's plugin, run by ./testdriver) that kubelet
// discovers through its plugin registration socket. With -demo it tells the demo's four stories instead (make demo on a
// machine that can run a node). It needs root; it says why and exits 2 where the machine cannot
// run a node. Every process it starts is stopped by its recorded PID, and everything it creates
// is removed, when it ends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

func main() {
	keep := flag.Bool("keep", false, "leave the run directory (logs, configs) in place")
	flag.IntVar(&gatePods, "gate-pods", 20, "pods per variant in story 2, and in story 8")
	check := flag.Bool("check", false, "only say whether this machine can run the node (exit 2 and why if not)")
	flag.BoolVar(&demoMode, "demo", false, "tell the demo's four stories (make demo) instead of the e2e stories")
	flag.BoolVar(&onlyDeploy, "only-deploy", false, "tell only stories 13 and 14 (examples/deploy applied whole, then CSILIBDEBUG set on its DaemonSet)")
	flag.BoolVar(&onlyStartupTaint, "only-startup-taint", false, "tell only story 15 (the node's startup taint removed once the driver is registered)")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging
	bins := os.Getenv("KUBEBUILDER_ASSETS")
	if err := checkMachine(bins); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: this machine cannot run the real node: %v\n", err)
		os.Exit(2)
	}
	if *check {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	results, err := run(ctx, bins, *keep)
	if !demoMode {
		printResults(results)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	for _, r := range results {
		if !r.ok {
			os.Exit(1)
		}
	}
}

// gatePods is the number of pods per variant in story 2 (and in the demo's first story).
var gatePods int

// demoMode: tell the demo's stories rather than the e2e stories.
var demoMode bool

// onlyDeploy: tell only the story of examples/deploy applied whole.
var onlyDeploy bool

// onlyStartupTaint: tell only the startup taint's story.
var onlyStartupTaint bool

// result is one story's outcome, a row of the table.
type result struct {
	story  string
	ok     bool
	detail string
}

func printResults(results []result) {
	if len(results) == 0 {
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "story\tresult\tdetail")
	for _, r := range results {
		verdict := "ok"
		if !r.ok {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.story, verdict, r.detail)
	}
	_ = w.Flush()
}

// logf prints a progress line with the time since start.
var started = time.Now()

func logf(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, bins string, keep bool) (results []result, err error) {
	if _, err := os.Stat(os.Getenv("CM_CONTROLLERS")); err != nil {
		return nil, fmt.Errorf("cert-manager's controllers (CM_CONTROLLERS=%q): %w; run the stories with make e2e or make demo", os.Getenv("CM_CONTROLLERS"), err)
	}
	dir, err := os.MkdirTemp("", "csi-lib-e2e-")
	if err != nil {
		return nil, err
	}
	logf("run directory %s", dir)
	defer func() {
		failed := slices.ContainsFunc(results, func(r result) bool { return !r.ok })
		if keep || err != nil || failed {
			logf("kept the run directory %s (logs of every process)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()

	binDir := filepath.Join(dir, "bin")
	if err := buildBinaries(ctx, binDir); err != nil {
		return nil, err
	}
	archive := filepath.Join(dir, "e2e-image.tar")
	if err := buildImage(binDir, archive); err != nil {
		return nil, err
	}

	// The audit log tells who created each CertificateRequest (the deployment story).
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML), 0o600); err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(controlplane.Options{APIServerArgs: map[string]string{
		// kubelet refuses a loopback node IP; the apiserver reaches it (pods/log) by name.
		"kubelet-preferred-address-types": "Hostname",
		// Pods get their service account's token, as in a cluster (envtest turns the admission
		// plugin off): the deployment story's driver and approver run with it.
		"disable-admission-plugins": "",
		"audit-policy-file":         auditPolicy,
		"audit-log-path":            filepath.Join(dir, "audit.log"),
	}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			logf("stopping the control plane: %v", err)
		}
	}()
	kube, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	logf("control plane up")

	n := &node{dir: dir, bins: bins, log: logf}
	defer n.stop()
	if err := n.start(ctx, cp.KubeConfig, archive); err != nil {
		return nil, err
	}
	if err := waitNodeReady(ctx, kube); err != nil {
		return nil, err
	}
	logf("node %s Ready", nodeName)

	c, err := newCluster(ctx, cp, kube, n, binDir)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if demoMode {
		if err := c.useCertManager(ctx); err != nil {
			return nil, err
		}
		stories := c.runDemo(ctx, gatePods)
		printDemoSummary(stories)
		for _, s := range stories {
			results = append(results, result{story: "demo: " + s.name, ok: s.ok, detail: s.summary})
		}
		return results, nil
	}
	if err := c.useCertManager(ctx); err != nil {
		return nil, err
	}
	if onlyDeploy {
		return append(results, c.storyDeploymentAppliedWhole(ctx), c.storyOperatorSwitch(ctx)), nil
	}
	if onlyStartupTaint {
		return append(results, c.storyStartupTaint(ctx)), nil
	}
	results = append(results, c.storiesWithLivePods(ctx)...)
	gate, figures := c.storyGateOnPodIP(ctx, gatePods)
	results = append(results, gate)
	results = append(results, c.storyKilledDuringFirstIssuance(ctx)...)
	results = append(results, c.storyTerminatingPodPublish(ctx))
	results = append(results, c.storyCARotation(ctx))
	results = append(results, c.storyDenial(ctx))
	readiness, readinessFigures := c.storyReadiness(ctx, gatePods)
	results = append(results, readiness)
	nodeBound, nodeBoundFigures := c.storyNodeBound(ctx)
	results = append(results, nodeBound, c.storyIdentityBound(ctx))
	results = append(results, c.storyStartupTaint(ctx))
	// Last: it replaces the driver process of the other stories by the set's DaemonSet, which
	// story 14 then restarts with the operator's switch.
	results = append(results, c.storyDeploymentAppliedWhole(ctx), c.storyOperatorSwitch(ctx))
	slices.SortStableFunc(results, func(a, b result) int { return strings.Compare(a.story, b.story) })
	defer printNodeBoundFigures(nodeBoundFigures)
	defer printReadinessFigures(readinessFigures)
	defer printGateFigures(figures)
	return results, nil
}

// buildBinaries builds the commands the node runs, static, into dir: pause, checker and
// testdriver (the driver the stories run: the example's plugin with the stories' knobs) in this
// module (test/e2e), and the approver and the example driver itself (csi-driver) in the examples
// module. Each is a module of its own, so each gets its own go build, run in the module's
// directory (the working directory is the repository's root).
func buildBinaries(ctx context.Context, dir string) error {
	start := time.Now()
	for _, b := range []struct {
		module string
		pkgs   []string
	}{
		{"test/e2e", []string{"./pause", "./checker", "./testdriver"}},
		{"examples", []string{"./csi-driver", "./approver"}},
	} {
		args := append([]string{"build", "-trimpath", "-o", dir + "/"}, b.pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = b.module
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building the e2e binaries in %s: %v: %s", b.module, err, out)
		}
	}
	logf("built pause, checker, testdriver, csi-driver and approver in %v", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// buildImage packs pause and checker into the node's one image.
func buildImage(binDir, archive string) error {
	var files []imageFile
	for _, b := range []string{"pause", "checker"} {
		data, err := os.ReadFile(filepath.Join(binDir, b))
		if err != nil {
			return err
		}
		files = append(files, imageFile{name: b, data: data})
	}
	return writeImageArchive(archive, imageName, files, []string{"/pause"})
}

// auditPolicyYAML records who creates CertificateRequests, and nothing else.
const auditPolicyYAML = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create]
  resources:
  - group: cert-manager.io
    resources: [certificaterequests]
  - group: authorization.k8s.io
    resources: [selfsubjectaccessreviews]
- level: None
`

// errTimeout marks a bounded wait that ran out.
var errTimeout = errors.New("timed out")

// poll calls cond every interval until it reports done, returns an error, ctx ends or timeout
// passes.
func poll(ctx context.Context, what string, interval, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %v", what, errTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
