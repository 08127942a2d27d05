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

// Command csi-driver is the example CSI node driver: a driver built from the library's public API
// only, as a driver author writes one, with the flags of cert-manager csi-driver where it has
// them (--driver-name, --node-id, --data-root, --metrics-address), plus the registration socket
// through which kubelet discovers it (kubelet's plugin registration API, what
// node-driver-registrar serves in a cluster). make demo and the real node's stories (make e2e)
// run it; examples/deploy holds what an operator applies to run it in a cluster.
//
//	(cd examples && go run ./csi-driver --help)   # from the repository's root; examples is a module of its own
package main

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/examples/csi-driver/podgate"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// IssuerName is the issuer a request names unless its volume names another; the e2e program
// signs them with its own signer or cert-manager's controllers.
const IssuerName = "e2e-ca"

func main() {
	var (
		name        = flag.String("driver-name", "csi.example.com", "CSI driver name")
		nodeID      = flag.String("node-id", "localhost", "node ID")
		kubeconfig  = flag.String("kubeconfig", "", "kubeconfig of the driver's account")
		dataRoot    = flag.String("data-root", "", "base directory of the volumes (a tmpfs is mounted at <data-root>/inmemfs)")
		socket      = flag.String("csi-socket", "", "path of the CSI socket")
		registry    = flag.String("plugins-registry", "", "kubelet's plugins_registry directory, to register with kubelet without node-driver-registrar (empty: none, as in a DaemonSet with the registrar)")
		gateOnIP    = flag.Bool("gate-on-pod-ip", false, "readiness gate: the pod has an IP (with ContinueOnNotReady)")
		requeuePods = flag.Bool("requeue-pods", false, "call RequeuePod when a pod changes (the gate opens at once)")
		oldGate     = flag.Bool("old-gate-behaviour", false, "retry a closed gate on the 30 s issuance backoff, with no gate poll (upstream's behaviour)")
		issueBase   = flag.Duration("issue-backoff", 0, "the issuance (renewal) backoff's first step (0: the library's default, 30 s)")
		journalPath = flag.String("journal", "", "append a JSON line per publish and per key pair written to this file")
		metricsAddr = flag.String("metrics-address", "", "serve /metrics on this loopback address (host:port)")
		podCond     = flag.String("pod-condition", "", "keep a pod condition of this type (manager.Options.PodCondition)")
		verbosity   = flag.Int("v", 2, "log verbosity")
	)
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)
	j, err := openJournal(*journalPath)
	if err != nil {
		log.Error(err, "opening the journal")
		os.Exit(1)
	}
	b := managerFlags{old: *oldGate, issue: *issueBase, podCondition: corev1.PodConditionType(*podCond)}
	if err := run(log, j, b, *metricsAddr, *name, *nodeID, *kubeconfig, *dataRoot, *socket, *registry, *gateOnIP, *requeuePods); err != nil {
		log.Error(err, "driver failed")
		os.Exit(1)
	}
}

// managerFlags configures the manager from the flags.
type managerFlags struct {
	old          bool
	issue        time.Duration
	podCondition corev1.PodConditionType
}

// apply sets the manager's backoffs and pod condition (written with client).
func (b managerFlags) apply(o *manager.Options, client typedcorev1.PodsGetter) {
	if b.podCondition != "" {
		o.PodCondition = &manager.PodCondition{Type: b.podCondition, Client: client}
	}
	if b.issue > 0 {
		issue := manager.DefaultRenewalBackoff()
		issue.Duration = b.issue
		o.RenewalBackoffConfig = &issue
	}
	if b.old {
		gate := manager.DefaultRenewalBackoff()
		o.GateBackoffConfig = &gate
		o.GatePollInterval = -1
	}
}

func run(log logr.Logger, j *journal, b managerFlags, metricsAddr, name, nodeID, kubeconfig, dataRoot, socket, registry string, gateOnIP, requeuePods bool) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// kubelet's own client limits rather than client-go's 5 per second: events, the pod
	// condition and the pod informer share this client.
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cm, err := cmclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mounter := mount.New("")
	fsys, err := storage.NewFilesystemWithOptions(log.WithName("storage"), dataRoot, storage.FilesystemOptions{Mounter: mounter})
	if err != nil {
		return err
	}
	fs := &journalStore{Filesystem: fsys, j: j}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// Pods on this node, for the readiness gate and RequeuePod.
	podFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + nodeID
	}))
	pods := podFactory.Core().V1().Pods()
	podLister := pods.Lister()
	var gate manager.ReadyToRequestFunc // nil: always ready
	if gateOnIP {
		gate = podgate.OnPodIP(podLister)
	}

	events := record.NewBroadcaster()
	defer events.Shutdown()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: name})

	// The node's CertificateRequests, for upstream's request families on /metrics: an informer of
	// the driver's own (the manager's exists only once NewManager has returned, and NewManager
	// takes the metrics), selected by the label the manager puts on the node's requests.
	requestFactory := cminformers.NewSharedInformerFactoryWithOptions(cm, 0, cminformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "csi.cert-manager.io/node-id-hash=" + nodeIDHash(nodeID)
	}))
	requestLister := requestFactory.Certmanager().V1().CertificateRequests().Lister()
	met := metrics.New(nodeID, &log, prometheus.NewRegistry(), fs, requestLister)
	met.EnableExtendedMetrics()
	if metricsAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", metricsAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: met.DefaultHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
	}

	mlog := log.WithName("manager")
	opts := manager.Options{
		Client:             cm,
		MetadataReader:     fs,
		Log:                &mlog,
		NodeID:             nodeID,
		GeneratePrivateKey: generateKey,
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			d, err := time.ParseDuration(meta.VolumeContext["csi.e2e.csi-lib.example/duration"])
			if err != nil {
				d = time.Hour
			}
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeContext[metadata.PodNameVolumeContextKey]}},
				Namespace: meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
				IssuerRef: issuerRef(meta),
				Duration:  d,
				Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
			}, nil
		},
		SignRequest: signCSR,
		WriteKeypair: keypairWriter(fs, func(meta metadata.Metadata) {
			j.record("written", meta)
		}),
		ReadyToRequest: gate,
		EventRecorder:  recorder,
		Metrics:        met,
	}
	b.apply(&opts, kube.CoreV1())
	m, err := manager.NewManager(opts)
	if err != nil {
		return err
	}
	defer m.Stop()
	// A pod being deleted is told to the manager (PodTerminating): a publish of its volume ends
	// at once and nothing more is requested for it. With requeuePods, every change requeues.
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			pod := obj.(*corev1.Pod)
			if pod.DeletionTimestamp != nil {
				m.PodTerminating(pod.UID)
			}
			if requeuePods {
				m.RequeuePod(pod.UID)
			}
		},
		DeleteFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				m.PodTerminating(pod.UID)
			} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if pod, ok := tomb.Obj.(*corev1.Pod); ok {
					m.PodTerminating(pod.UID)
				}
			}
		},
	}); err != nil {
		return err
	}
	podFactory.Start(ctx.Done())
	requestFactory.Start(ctx.Done())
	podFactory.WaitForCacheSync(ctx.Done())
	requestFactory.WaitForCacheSync(ctx.Done())

	d, err := driver.New(ctx, "unix://"+socket, log.WithName("csi"), driver.Options{
		DriverName: name, DriverVersion: "e2e", NodeID: nodeID,
		Store: fs, Manager: m, Mounter: mounter, ContinueOnNotReady: gateOnIP,
	})
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- d.Run() }()

	if registry != "" {
		reg, err := serveRegistration(log, registry, name, socket)
		if err != nil {
			d.Stop()
			return err
		}
		defer reg.Stop()
	}
	log.Info("driver serving", "csi_socket", socket)
	select {
	case <-ctx.Done():
		d.Stop()
		return <-served
	case err := <-served:
		return err
	}
}

// nodeIDHash is the value of the label csi.cert-manager.io/node-id-hash on the node's requests:
// the FNV-1 32-bit hash of the node ID, in decimal, through apimachinery's SafeEncodeString.
func nodeIDHash(nodeID string) string {
	h := fnv.New32()
	_, _ = h.Write([]byte(nodeID))
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// registration answers kubelet's plugin watcher: the driver's name and CSI endpoint.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	log      logr.Logger
	name     string
	endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		r.log.Error(fmt.Errorf("%s", s.Error), "kubelet refused the driver's registration")
	} else {
		r.log.Info("registered with kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serveRegistration serves the registration socket <registry>/<name>-reg.sock, which kubelet
// watches for.
func serveRegistration(log logr.Logger, registry, name, csiSocket string) (*grpc.Server, error) {
	path := filepath.Join(registry, name+"-reg.sock")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{log: log.WithName("registration"), name: name, endpoint: csiSocket})
	go func() { _ = srv.Serve(lis) }()
	return srv, nil
}

// IssuerKindAttribute and IssuerNameAttribute are the volume attributes with which a pod names
// its issuer (as cert-manager csi-driver's csi.cert-manager.io/issuer-kind and issuer-name);
// without them, the Issuer IssuerName.
const (
	IssuerKindAttribute = "csi.e2e.csi-lib.example/issuer-kind"
	IssuerNameAttribute = "csi.e2e.csi-lib.example/issuer-name"
)

func issuerRef(meta metadata.Metadata) cmmeta.IssuerReference {
	ref := cmmeta.IssuerReference{Name: IssuerName, Kind: "Issuer", Group: "cert-manager.io"}
	if kind := meta.VolumeContext[IssuerKindAttribute]; kind != "" {
		ref.Kind = kind
	}
	if name := meta.VolumeContext[IssuerNameAttribute]; name != "" {
		ref.Name = name
	}
	return ref
}

// RenewBeforeAttribute is the volume attribute with which a pod asks for its renewal this long
// before its certificate's NotAfter, as cert-manager csi-driver's csi.cert-manager.io/renew-before:
// the driver persists its own renewal point (see keypairWriter).
const RenewBeforeAttribute = "csi.e2e.csi-lib.example/renew-before"

// CredentialBundleAttribute is the volume attribute with which a pod asks for the credential
// bundle of Kubernetes pod certificates (the projection's credentialBundlePath: the key, then the
// chain, in one file) under the name it gives, beside tls.key, tls.crt and ca.crt (see
// keypairWriter). Without it the volume holds those three alone.
const CredentialBundleAttribute = "csi.e2e.csi-lib.example/credential-bundle-file"

// journalStore is the driver's Filesystem, recording every publish (a publish registers the
// volume's metadata first) in the journal.
type journalStore struct {
	*storage.Filesystem
	j *journal
}

func (s *journalStore) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	s.j.record("publish", meta)
	return s.Filesystem.RegisterMetadata(meta)
}

// journal appends one JSON line per event: what the e2e program measures the node by.
type journal struct {
	mu sync.Mutex
	f  *os.File
}

// journalEntry is one line of the journal.
type journalEntry struct {
	Time   time.Time `json:"time"`
	Event  string    `json:"event"`
	Volume string    `json:"volume"`
	Pod    string    `json:"pod"`
	// Next is the NextIssuanceTime written with a key pair.
	Next *time.Time `json:"next,omitempty"`
}

func openJournal(path string) (*journal, error) {
	if path == "" {
		return &journal{}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	return &journal{f: f}, err
}

func (j *journal) record(event string, meta metadata.Metadata) {
	if j.f == nil {
		return
	}
	line, _ := json.Marshal(journalEntry{Time: time.Now(), Event: event, Volume: meta.VolumeID, Pod: meta.VolumeContext[metadata.PodNameVolumeContextKey], Next: meta.NextIssuanceTime})
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.Write(append(line, '\n'))
}
