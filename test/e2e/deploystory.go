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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/examples/approver/controller"
	"github.com/cert-manager/csi-lib/test/testkit"
)

const (
	// setCASecret is the Secret issuer.yaml's ClusterIssuer reads: the operator's CA.
	setCASecret = "csi-ca"
	// setAppNamespace and setAppLabel find the set's application pod (app.yaml).
	setAppNamespace = "csi-example"
	setAppLabel     = "app=example-app"
	// setDriverNamespace and setDriverLabel find the driver's DaemonSet pod (daemonset.yaml).
	setDriverNamespace = "csi-driver"
	setDriverLabel     = "app=csi-driver"
	setDriverAccount   = "system:serviceaccount:csi-driver:csi-driver"
	// prometheusOperator is the module whose CRDs (PodMonitor, PrometheusRule) the set's
	// monitoring objects need.
	prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// upstreamFamilies are the metric families upstream v0.12.0's metrics serve once a driver has
// issued without an error (with a request lister): 6 of its 7, since
// certmanager_csi_issue_errors_total appears with the first issuance error; extendedFamilies are the fork's, with
// EnableExtendedMetrics.
var (
	upstreamFamilies = []string{
		"certmanager_csi_issue_requests_total",
		"certmanager_csi_certificate_request_expiration_timestamp_seconds",
		"certmanager_csi_certificate_request_ready_status",
		"certmanager_csi_certificate_request_renewal_timestamp_seconds",
		"certmanager_csi_managed_certificate_request_count",
		"certmanager_csi_managed_volume_count",
	}
	extendedFamilies = []string{
		"certmanager_csi_publish_to_first_certificate_seconds",
		"certmanager_csi_volumes",
	}
)

// storyDeploymentAppliedWhole: examples/deploy, applied whole (through the overlay of
// deployset.go), runs: the DaemonSet's driver registers with kubelet and creates requests as its
// service account with a token bound to its pod on this node; the example approver approves
// them; cert-manager's CA ClusterIssuer signs them; the application pod becomes Ready (its
// readiness gate) with a valid certificate; the driver's /metrics serves upstream's families and
// the fork's; every alert and dashboard expression evaluates against that scrape. The driver
// process of the other stories is stopped first (one driver of a name per node).
func (c *cluster) storyDeploymentAppliedWhole(ctx context.Context) (r result) {
	r = result{story: "13 examples/deploy applied whole"}
	start := time.Now()
	c.setAuditFrom = fileSize(filepath.Join(c.n.dir, "audit.log"))
	fail := func(err error) result {
		r.detail = err.Error()
		return r
	}
	c.stopDriver(syscall.SIGTERM)
	// kubelet forgets the driver process once its registration socket is gone: the driver
	// registered below is the DaemonSet's.
	if err := c.waitDriverRegistered(ctx, false); err != nil {
		return fail(err)
	}
	// cert-manager's approver keeps approving for every other issuer, not for the set's
	// ClusterIssuer (approveSignerNames, docs/deploying.md): the set's approver alone decides
	// the driver's requests.
	c.stopCertManager()
	if err := c.startCertManagerApprovingFor(setApproveSignerNames...); err != nil {
		return fail(err)
	}
	defer func() {
		c.stopCertManager()
		_ = c.startCertManager()
	}()
	// The operator's part: the CA, and the Prometheus operator's CRDs.
	secret, err := testkit.CAIssuerSecret(clusterResourceNamespace, setCASecret, c.ca)
	if err != nil {
		return fail(err)
	}
	if _, err := c.kube.CoreV1().Secrets(clusterResourceNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fail(err)
	}
	crds, err := prometheusOperatorCRDs(ctx)
	if err != nil {
		return fail(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		return fail(fmt.Errorf("installing the Prometheus operator's CRDs: %w", err))
	}

	// Render the set through the overlay, build the images it names and import them.
	host, port, err := net.SplitHostPort(strings.TrimPrefix(cfg.Host, "https://"))
	if err != nil {
		return fail(err)
	}
	metricsAddress, err := freeLoopbackAddress()
	if err != nil {
		return fail(err)
	}
	o := setOverlay{
		kubeletDir: c.n.kubeletDir(), dataDir: filepath.Join(c.n.dir, "set-driver-data"),
		apiHost: host, apiPort: port, metricsAddress: metricsAddress,
		appImage: imageName, appCommand: []string{"/checker", "/tls"},
	}
	overlay := filepath.Join(c.n.dir, "deploy-overlay")
	base, err := filepath.Abs(deployDir)
	if err != nil {
		return fail(err)
	}
	if err := o.writeOverlay(overlay, base); err != nil {
		return fail(err)
	}
	objs, err := renderSet(overlay)
	if err != nil {
		return fail(err)
	}
	if err := c.importSetImages(ctx, objs); err != nil {
		return fail(err)
	}
	if err := applySet(ctx, cfg, objs); err != nil {
		return fail(err)
	}
	logf("story 13: examples/deploy applied (%d objects) in %v", len(objs), time.Since(start).Round(100*time.Millisecond))
	// The application stays for story 14, which removes it.

	// The driver: Running as its DaemonSet pod, registered with kubelet.
	driverPod, err := c.waitPodMatching(ctx, setDriverNamespace, setDriverLabel, "the DaemonSet's driver pod to run", isRunning)
	if err != nil {
		return fail(fmt.Errorf("%w; %s", err, c.warnings(ctx, setDriverNamespace)))
	}
	if driverPod.Spec.ServiceAccountName != "csi-driver" {
		return fail(fmt.Errorf("the driver pod runs as %q", driverPod.Spec.ServiceAccountName))
	}
	if err := c.waitDriverRegistered(ctx, true); err != nil {
		return fail(err)
	}

	// The application: Ready (its readiness gate is the driver's pod condition) with a
	// certificate approved by the example approver.
	app, err := c.waitPodMatching(ctx, setAppNamespace, setAppLabel, "the application pod to be Ready", isReady)
	if err != nil {
		return fail(fmt.Errorf("%w; %s; the driver's last lines: %s", err, c.warnings(ctx, setAppNamespace), c.logTail(ctx, setDriverNamespace, driverPod.Name, "csi-driver", 5)))
	}
	ready := time.Since(start)
	reqs, err := c.cm.CertmanagerV1().CertificateRequests(setAppNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fail(err)
	}
	if err := approvedAndIssued(reqs.Items, app.Name); err != nil {
		return fail(err)
	}
	if err := c.approvedByCertManager(ctx); err != nil {
		return fail(err)
	}
	lines, err := c.waitLinesIn(ctx, setAppNamespace, app.Name, "app", "the application's checker to verify its certificate", 30*time.Second, func(ls []logLine) bool {
		serials, _ := okSerials(ls)
		return len(serials) > 0
	})
	if err != nil {
		return fail(err)
	}
	if _, bad := okSerials(lines); bad != "" {
		return fail(fmt.Errorf("the application saw %s", bad))
	}
	if err := createdAsTheDriver(filepath.Join(c.n.dir, "audit.log"), setAppNamespace); err != nil {
		return fail(err)
	}

	// /metrics, and the alerts against it.
	scrape, err := scrapeMetrics(ctx, metricsAddress)
	if err != nil {
		return fail(err)
	}
	for _, family := range append(append([]string{}, upstreamFamilies...), extendedFamilies...) {
		if !strings.Contains(scrape, "\n# TYPE "+family+" ") {
			return fail(fmt.Errorf("the driver's /metrics has no %s", family))
		}
	}
	scrapeFile := filepath.Join(c.n.dir, "set-driver-metrics.txt")
	if err := os.WriteFile(scrapeFile, []byte(scrape), 0o644); err != nil {
		return fail(err)
	}
	labels := fmt.Sprintf("namespace=%s,pod=%s,container=csi-driver,endpoint=metrics,job=%s/csi-driver,instance=%s",
		setDriverNamespace, driverPod.Name, setDriverNamespace, metricsAddress)
	out, err := evaluateAlerts(ctx, scrapeFile, labels)
	if err != nil {
		return fail(fmt.Errorf("the alerts against the driver's series: %v\n%s", err, out))
	}
	r.ok = true
	r.detail = fmt.Sprintf("%d objects applied; app %s Ready %v after the apply, its requests approved by the example approver, not by cert-manager's (%d of its approvals for %s refused), which approved a request for %s meanwhile; created as %s with a token bound to node %s; /metrics: %d upstream + %d extended families; %s",
		len(objs), app.Name, ready.Round(100*time.Millisecond), c.refusedApprovals(setSignerName), setSignerName, "ClusterIssuer/"+clusterIssuerName,
		setDriverAccount, nodeName, len(upstreamFamilies), len(extendedFamilies), summarizeEvaluation(out, scrape))
	return r
}

// setApproveSignerNames is what story 13 runs cert-manager's approver with, as an operator sets
// the chart's approveSignerNames for the set: every namespaced Issuer and the stories' CA
// ClusterIssuer, leaving out the set's ClusterIssuer (issuer.yaml).
var setApproveSignerNames = []string{"issuers.cert-manager.io/*", "clusterissuers.cert-manager.io/" + clusterIssuerName}

// setSignerName is the set's ClusterIssuer's signer name, which setApproveSignerNames leaves out.
const setSignerName = "clusterissuers.cert-manager.io/csi-ca"

// refusedApprovals counts the lines of cert-manager's controllers' log where its approver's
// approval for signer was refused (hack/cm-controllers's -approve-signer-names). It may be 0:
// the set's approver can decide a request before cert-manager's approver comes to it.
func (c *cluster) refusedApprovals(signer string) int {
	data, err := os.ReadFile(filepath.Join(c.n.dir, "cm-controllers.log"))
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "does not have permissions to set approved/denied conditions") && strings.Contains(line, signer+",") {
			n++
		}
	}
	return n
}

// approvedByCertManager creates a request for the stories' CA ClusterIssuer, which
// setApproveSignerNames lists, and waits until cert-manager's approver approves it and its CA
// issuer signs it: cert-manager's approver runs beside the set's, and approves for the issuers
// it was left. The request is deleted after.
func (c *cluster) approvedByCertManager(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csr, err := testkit.CSR(&x509.CertificateRequest{Subject: pkix.Name{CommonName: "approved-by-cert-manager"}}, key)
	if err != nil {
		return err
	}
	req := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "other-issuer-", Namespace: namespace},
		Spec: cmapi.CertificateRequestSpec{
			Request:   csr,
			IssuerRef: cmmeta.IssuerReference{Name: clusterIssuerName, Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"},
			Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
		},
	}
	requests := c.cm.CertmanagerV1().CertificateRequests(namespace)
	if req, err = requests.Create(ctx, req, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = requests.Delete(context.WithoutCancel(ctx), req.Name, metav1.DeleteOptions{}) }()
	return poll(ctx, "cert-manager's approver to approve a request for ClusterIssuer/"+clusterIssuerName, 100*time.Millisecond, time.Minute, func() (bool, error) {
		got, err := requests.Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		approved := false
		for _, cond := range got.Status.Conditions {
			approved = approved || (cond.Type == cmapi.CertificateRequestConditionApproved && cond.Message == cmApprovedMessage)
		}
		return approved && len(got.Status.Certificate) > 0, nil
	})
}

// importSetImages builds the images the set names for the example driver and approver, from
// the binaries built for this run, and imports them into the node's containerd under those
// names. The driver's image holds Debian's mount and umount beside the driver, as the
// driver's Dockerfile's base does: k8s.io/mount-utils runs them.
func (c *cluster) importSetImages(ctx context.Context, objs []*unstructured.Unstructured) error {
	images := map[string]string{} // binary (its container's name too) -> the image the set names for it
	for _, w := range []struct{ kind, name, binary string }{
		{"DaemonSet", "csi-driver", "csi-driver"},
		{"Deployment", "csi-approver", "approver"},
	} {
		u := objectOf(objs, w.kind, w.name)
		if u == nil {
			return fmt.Errorf("examples/deploy has no %s %s", w.kind, w.name)
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, ctr := range containers {
			if name, _ := ctr.(map[string]any)["name"].(string); name == w.binary {
				images[w.binary], _ = ctr.(map[string]any)["image"].(string)
			}
		}
		if images[w.binary] == "" {
			return fmt.Errorf("%s %s has no container %s", w.kind, w.name, w.binary)
		}
	}
	for binary, image := range images {
		data, err := os.ReadFile(filepath.Join(c.binDir, binary))
		if err != nil {
			return err
		}
		files := []imageFile{{name: binary, data: data}}
		if binary == "csi-driver" {
			tools, err := hostFilesOf("/usr/bin/mount", "/usr/bin/umount")
			if err != nil {
				return err
			}
			files = append(files, tools...)
		}
		archive := filepath.Join(c.n.dir, binary+"-image.tar")
		if err := writeImageArchive(archive, normalizedImage(image), files, []string{"/" + binary}); err != nil {
			return err
		}
		if err := c.n.importImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// hostFilesOf returns the named programs of this machine and the shared libraries they load
// (as ldd lists them), at the same paths, for an image.
func hostFilesOf(programs ...string) ([]imageFile, error) {
	paths := map[string]bool{}
	for _, p := range programs {
		paths[p] = true
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", p, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					paths[f] = true
				}
			}
		}
	}
	var files []imageFile
	for p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files = append(files, imageFile{name: strings.TrimPrefix(p, "/"), data: data})
	}
	return files, nil
}

// normalizedImage is the full name containerd's CRI gives a Docker-style image reference.
func normalizedImage(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	switch {
	case !found:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}

// prometheusOperatorCRDs returns the PodMonitor and PrometheusRule CRDs of the Prometheus
// operator's module (downloaded through the module proxy, cached).
func prometheusOperatorCRDs(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", prometheusOperator).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", prometheusOperator, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	var paths []string
	for _, kind := range []string{"podmonitors", "prometheusrules"} {
		paths = append(paths, filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml"))
	}
	return paths, nil
}

// waitDriverRegistered waits until the node's CSINode lists the driver (registered), or not.
func (c *cluster) waitDriverRegistered(ctx context.Context, registered bool) error {
	what := "kubelet to register the DaemonSet's driver"
	if !registered {
		what = "kubelet to forget the driver process"
	}
	return poll(ctx, what, 200*time.Millisecond, time.Minute, func() (bool, error) {
		node, err := c.kube.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		listed := err == nil && slices.ContainsFunc(node.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driverName })
		return listed == registered, nil
	})
}

// warnings returns the Warning Events of a namespace, for a failure's message.
func (c *cluster) warnings(ctx context.Context, ns string) string {
	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return err.Error()
	}
	var texts []string
	for _, e := range events.Items {
		texts = append(texts, fmt.Sprintf("%s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message))
	}
	return fmt.Sprintf("warnings in %s: [%s]", ns, strings.Join(texts, "; "))
}

// logTail returns a container's last n log lines, joined, or why it cannot.
func (c *cluster) logTail(ctx context.Context, ns, pod, container string, n int) string {
	lines, err := c.logLines(ctx, ns, pod, container)
	if err != nil {
		return err.Error()
	}
	texts := make([]string, 0, n)
	for _, l := range lines[max(0, len(lines)-n):] {
		texts = append(texts, l.text)
	}
	return strings.Join(texts, " | ")
}

// waitPodMatching waits until a pod of namespace with label selector satisfies cond, and returns it.
func (c *cluster) waitPodMatching(ctx context.Context, ns, selector, what string, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var found *corev1.Pod
	err := poll(ctx, what, 200*time.Millisecond, 2*time.Minute, func() (bool, error) {
		pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if cond(&pods.Items[i]) {
				found = &pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

// approvedAndIssued checks that the pod's requests were approved by the example approver and
// issued.
func approvedAndIssued(reqs []cmapi.CertificateRequest, pod string) error {
	n := 0
	for i := range reqs {
		req := &reqs[i]
		if req.Annotations[approval.PodNameAnnotationKey] != pod {
			continue
		}
		n++
		if !requestHas(req, cmapi.CertificateRequestConditionApproved, controller.Reason) || len(req.Status.Certificate) == 0 {
			return fmt.Errorf("request %s of %s: not approved by the example approver, or not issued: %+v", req.Name, pod, req.Status.Conditions)
		}
	}
	if n == 0 {
		return fmt.Errorf("no request names pod %s", pod)
	}
	return nil
}

// createdAsTheDriver reads the apiserver's audit log: every CertificateRequest created in ns
// was created by the driver's service account with a token bound to this node.
func createdAsTheDriver(auditLog, ns string) error {
	f, err := os.Open(auditLog)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		var ev struct {
			Verb      string `json:"verb"`
			Stage     string `json:"stage"`
			ObjectRef struct {
				Resource  string `json:"resource"`
				Namespace string `json:"namespace"`
			} `json:"objectRef"`
			User struct {
				Username string              `json:"username"`
				Extra    map[string][]string `json:"extra"`
			} `json:"user"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Verb != "create" || ev.Stage != "ResponseComplete" ||
			ev.ObjectRef.Resource != "certificaterequests" || ev.ObjectRef.Namespace != ns {
			continue
		}
		n++
		nodes := ev.User.Extra["authentication.kubernetes.io/node-name"]
		if ev.User.Username != setDriverAccount || len(nodes) != 1 || nodes[0] != nodeName {
			return fmt.Errorf("a request in %s was created by %s (node claims %v), not by %s with a token bound to node %s", ns, ev.User.Username, nodes, setDriverAccount, nodeName)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("the audit log has no create of a request in %s", ns)
	}
	return nil
}

// scrapeMetrics reads the driver's /metrics on its loopback address.
func scrapeMetrics(ctx context.Context, addr string) (string, error) {
	var body string
	err := poll(ctx, "the driver's /metrics", 200*time.Millisecond, 30*time.Second, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			return false, err
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, nil
		}
		body = "\n" + string(data)
		// The request families come from the driver's informer: wait until they are there.
		return strings.Contains(body, "\ncertmanager_csi_managed_certificate_request_count"), nil
	})
	return body, err
}

// eventFamilies appear on /metrics only once something has happened on the node: an issuance
// error, a gate wait, an admission wait (their series are per label set, created by the first).
var eventFamilies = []string{
	"certmanager_csi_issue_errors_total",
	"certmanager_csi_issue_gate_pending_total",
	"certmanager_csi_issuance_admission_waiting",
	"certmanager_csi_issuance_admission_waits_total",
}

// evaluateAlerts evaluates every alert and dashboard expression of examples/deploy against the
// scrape, with the labels a PodMonitor adds (examples/deploy/promql's evalalerts command). A
// selector of an event family that selects nothing is a note, not a failure.
func evaluateAlerts(ctx context.Context, scrapeFile, labels string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "run", "./cmd/evalalerts", "-scrape", scrapeFile, "-labels", labels,
		"-absent-ok", strings.Join(eventFamilies, ","))
	cmd.Dir = filepath.Join(deployDir, "promql")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// summarizeEvaluation counts the expressions evalalerts found evaluating, and the event
// families the scrape did not have.
func summarizeEvaluation(out, scrape string) string {
	ok := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ok ") {
			ok++
		}
	}
	var absent []string
	for _, f := range eventFamilies {
		if !strings.Contains(scrape, "\n# TYPE "+f+" ") {
			absent = append(absent, strings.TrimPrefix(f, "certmanager_csi_"))
		}
	}
	return fmt.Sprintf("%d alert and dashboard expressions evaluate against its series (absent until their event: %s)", ok, strings.Join(absent, ", "))
}

// removeSetApp deletes the application and waits until its pod is gone (the driver unpublishes
// its volume), so that the node's teardown finds no volume of the set's driver mounted.
func (c *cluster) removeSetApp(ctx context.Context) {
	if err := c.kube.AppsV1().Deployments(setAppNamespace).Delete(ctx, "example-app", metav1.DeleteOptions{}); err != nil {
		logf("story 13: deleting the application: %v", err)
		return
	}
	if err := poll(ctx, "the application's pod to be gone", 200*time.Millisecond, time.Minute, func() (bool, error) {
		pods, err := c.kube.CoreV1().Pods(setAppNamespace).List(ctx, metav1.ListOptions{LabelSelector: setAppLabel})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		logf("story 13: %v", err)
	}
}
