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

// Package plugin is the example CSI node driver's body: a driver built from the library's public
// API only, as a driver author writes one. Config says what to run and Run runs it until its
// context ends: the volumes' store, the manager with its readiness gate and pod condition, events
// on the pods, /metrics, the CSI node service and, optionally, the registration socket through
// which kubelet discovers the driver (what node-driver-registrar serves in a cluster).
//
// examples/csi-driver's main turns an operator's flags into a Config. Programs built on the
// example (the project's test driver, make demo) use the same Run with the optional hooks of
// Config; a driver of your own needs none of them. What a driver changes is what it requests
// (the request Run builds from the volume attributes below) and what it writes (keypair.go).
package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// The volume attributes with which a pod asks for what it gets, named after the driver
// (csi.example.com), as cert-manager csi-driver's are csi.cert-manager.io/…. A driver of your
// own uses its own name.
const (
	// IssuerKindAttribute and IssuerNameAttribute name the issuer of the volume's requests (as
	// csi.cert-manager.io/issuer-kind and issuer-name); without them, Config.Issuer.
	IssuerKindAttribute = "csi.example.com/issuer-kind"
	IssuerNameAttribute = "csi.example.com/issuer-name"
	// DurationAttribute is the requested certificate lifetime, a Go duration (as
	// csi.cert-manager.io/duration); without it, or unparsable, DefaultDuration.
	DurationAttribute = "csi.example.com/duration"
	// RenewBeforeAttribute asks for the renewal this long before the certificate's NotAfter (as
	// csi.cert-manager.io/renew-before): the driver persists its own renewal point (see
	// keypairWriter).
	RenewBeforeAttribute = "csi.example.com/renew-before"
	// CommonNameAttribute is the subject's common name (as csi.cert-manager.io/common-name),
	// with the variables of expandVariables; set and empty, the subject is empty (a SPIFFE
	// volume's); without it, the pod's name.
	CommonNameAttribute = "csi.example.com/common-name"
	// DNSNamesAttribute and URISANsAttribute are the DNS and URI names, comma-separated, with
	// the variables of expandVariables (as csi.cert-manager.io/dns-names and uri-sans).
	DNSNamesAttribute = "csi.example.com/dns-names"
	URISANsAttribute  = "csi.example.com/uri-sans"
	// CredentialBundleAttribute asks for the credential bundle of Kubernetes pod certificates
	// (the projection's credentialBundlePath: the key, then the chain, in one file) under the
	// name it gives, beside tls.key, tls.crt and ca.crt (see keypairWriter). Without it the
	// volume holds those three alone.
	CredentialBundleAttribute = "csi.example.com/credential-bundle-file"
)

// DefaultDuration is the certificate lifetime requested for a volume without DurationAttribute.
const DefaultDuration = time.Hour

// Version is the driver version the identity service reports.
const Version = "v0.0.0-example"

// Store is what the driver, the manager and the metrics use as the volumes' store: a
// storage.Interface with the optional interfaces the library looks for, all of which
// *storage.Filesystem has. A wrapper (Config.WrapStore) embeds the Store it wraps, so it keeps
// them.
type Store interface {
	storage.Interface
	storage.MetadataValidator
	storage.MountRecorder
	storage.PendingKeyStore
	storage.SweptKeyStore
}

// Config is what Run runs. DriverName, NodeID and CSISocket are required; everything else is
// optional.
type Config struct {
	// DriverName is the CSI driver's name: the CSIDriver object's, reported to kubelet, and the
	// source of the events on pods.
	DriverName string
	// NodeID is the node's name: reported by NodeGetInfo, and the node whose pods the driver
	// watches (spec.nodeName) and whose CertificateRequests it counts.
	NodeID string
	// Kubeconfig is the path of the driver's kubeconfig; empty: the in-cluster configuration,
	// falling back as client-go's clientcmd does.
	Kubeconfig string
	// DataRoot is the volumes' base directory; a tmpfs is mounted at <DataRoot>/inmemfs unless
	// PlainDirectory. Empty: the working directory.
	DataRoot string
	// CSISocket is the path of the CSI socket the driver serves on (--endpoint unix://<path>).
	CSISocket string
	// PluginsRegistry is kubelet's plugins_registry directory: the driver serves its
	// registration socket there, so kubelet registers it without node-driver-registrar. Empty:
	// none (as in a DaemonSet with the registrar).
	PluginsRegistry string
	// KubeletRegistrationPath is the CSI socket's path as kubelet, on the host, sees it: the
	// endpoint the registration socket announces. In a container the socket's path differs
	// from the host's. Empty: CSISocket.
	KubeletRegistrationPath string
	// MetricsAddress is where /metrics is served (host:port; port 0 picks one, see
	// Serving.MetricsAddress). Empty: not served.
	MetricsAddress string
	// GateOnPodIP gates every request on the pod having an IP (PodIPGate, from a pod informer),
	// and lets a publish whose gate is closed succeed (driver.Options.ContinueOnNotReady).
	GateOnPodIP bool
	// RequeuePods calls the manager's RequeuePod whenever a pod on the node changes, so a gate
	// that opened is seen at once.
	RequeuePods bool
	// PodCondition, if set, is the type of the pod condition the manager keeps on each pod
	// (manager.Options.PodCondition).
	PodCondition corev1.PodConditionType
	// Issuer is the issuer of a volume's requests unless its attributes name another
	// (IssuerKindAttribute, IssuerNameAttribute).
	Issuer cmmeta.IssuerReference
	// RemoveStartupTaint removes the node's startup taint <DriverName>/agent-not-ready once
	// kubelet has registered the driver (driver.Options.RemoveStartupTaint, with the driver's
	// client and metrics), the node being NodeID.
	RemoveStartupTaint bool
	// StartupTaintWatchWindow, with RemoveStartupTaint, is how long the node is watched for the
	// taint once the driver is registered. Zero: driver.DefaultStartupTaintWatchWindow.
	StartupTaintWatchWindow time.Duration

	// Mounter and PlainDirectory are for running without root, which may not mount: a mounter
	// that records mounts (mount.NewFakeMounter), and volumes in a plain directory instead of
	// on a tmpfs (storage.FilesystemOptions.PlainDirectory). Nil Mounter: the operating
	// system's.
	Mounter        mount.Interface
	PlainDirectory bool

	// Hooks for programs built on the example; all optional.

	// OnPublish is called with a volume's metadata at each publish, before it is registered.
	OnPublish func(metadata.Metadata)
	// OnWritten is called with a volume's metadata (its NextIssuanceTime the persisted renewal
	// point) after each key pair is written.
	OnWritten func(metadata.Metadata)
	// TuneManager may change the manager's options (backoffs, for one) before the manager is
	// made.
	TuneManager func(*manager.Options)
	// WrapStore may wrap the volumes' store before anything uses it.
	WrapStore func(Store) Store
	// OnServing is called once the driver serves CSI, with what is running.
	OnServing func(Serving)
}

// Serving is what a running driver shows the program that runs it (Config.OnServing).
type Serving struct {
	// Manager is the driver's manager.
	Manager *manager.Manager
	// Filesystem is the volumes' store, unwrapped (its StartupSweep says what the start-up sweep
	// removed).
	Filesystem *storage.Filesystem
	// Pods lists the node's pods, as the readiness gate sees them.
	Pods corev1listers.PodLister
	// MetricsAddress is where /metrics is served; nil if it is not.
	MetricsAddress net.Addr
}

// validate says what is wrong with the Config, before anything starts.
func (c Config) validate() error {
	var errs []error
	if c.DriverName == "" {
		errs = append(errs, errors.New("the driver name is empty"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("the node ID is empty"))
	}
	if c.CSISocket == "" {
		errs = append(errs, errors.New("the CSI socket's path is empty"))
	}
	if c.RemoveStartupTaint && c.DriverName != "" {
		if _, err := driver.StartupTaintKey(c.DriverName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid driver configuration: %w", err)
	}
	return nil
}

// Run runs the driver until ctx ends, then stops it: the manager first, so that a publish in
// flight fails at once rather than holding the stop, then the CSI server. It returns an error
// at once if cfg is invalid or a part cannot start.
func Run(ctx context.Context, log logr.Logger, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return err
	}
	// kubelet's own client limits rather than client-go's 5 per second: events, the pod
	// condition and the pod informer share this client.
	restCfg.QPS, restCfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	cm, err := cmclient.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	mounter := cfg.Mounter
	if mounter == nil {
		mounter = mount.New("")
	}
	fsys, err := storage.NewFilesystemWithOptions(log.WithName("storage"), cfg.DataRoot, storage.FilesystemOptions{Mounter: mounter, PlainDirectory: cfg.PlainDirectory})
	if err != nil {
		return err
	}
	var store Store = fsys
	if cfg.WrapStore != nil {
		store = cfg.WrapStore(store)
	}
	if cfg.OnPublish != nil {
		store = &publishHook{Store: store, onPublish: cfg.OnPublish}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Pods on this node, for the readiness gate, RequeuePod and PodTerminating.
	podFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + cfg.NodeID
	}))
	pods := podFactory.Core().V1().Pods()
	podLister := pods.Lister()
	var gate manager.ReadyToRequestFunc // nil: always ready
	if cfg.GateOnPodIP {
		gate = PodIPGate(podLister)
	}

	events := record.NewBroadcaster()
	defer events.Shutdown()
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: cfg.DriverName})

	// The node's CertificateRequests for upstream's request families on /metrics come from the
	// manager's own informer, handed to the metrics once NewManager has returned.
	met := metrics.New(cfg.NodeID, &log, prometheus.NewRegistry(), store, nil)
	met.EnableExtendedMetrics()
	var metricsAddr net.Addr
	if cfg.MetricsAddress != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.MetricsAddress)
		if err != nil {
			return err
		}
		metricsAddr = lis.Addr()
		srv := &http.Server{Handler: met.DefaultHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		defer srv.Close()
	}

	var written []func(metadata.Metadata)
	if cfg.OnWritten != nil {
		written = append(written, cfg.OnWritten)
	}
	mlog := log.WithName("manager")
	opts := manager.Options{
		Client:             cm,
		MetadataReader:     store,
		Log:                &mlog,
		NodeID:             cfg.NodeID,
		GeneratePrivateKey: generateKey,
		GenerateRequest:    RequestFor(cfg.Issuer),
		SignRequest:        signCSR,
		WriteKeypair:       keypairWriter(store, written...),
		ReadyToRequest:     gate,
		EventRecorder:      recorder,
		Metrics:            met,
	}
	if cfg.PodCondition != "" {
		opts.PodCondition = &manager.PodCondition{Type: cfg.PodCondition, Client: kube.CoreV1()}
	}
	if cfg.TuneManager != nil {
		cfg.TuneManager(&opts)
	}
	m, err := manager.NewManager(opts)
	if err != nil {
		return err
	}
	defer m.Stop()
	met.SetCertificateRequestLister(m.CertificateRequestLister())
	// A pod being deleted is told to the manager (PodTerminating): a publish of its volume ends
	// at once and nothing more is requested for it. With RequeuePods, every change requeues.
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			pod := obj.(*corev1.Pod)
			if pod.DeletionTimestamp != nil {
				m.PodTerminating(pod.UID)
			}
			if cfg.RequeuePods {
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
	defer func() {
		cancel() // the informer stops with ctx; Shutdown waits for it
		podFactory.Shutdown()
	}()
	podFactory.WaitForCacheSync(ctx.Done())

	dopts := driver.Options{
		DriverName: cfg.DriverName, DriverVersion: Version, NodeID: cfg.NodeID,
		Store: store, Manager: m, Mounter: mounter, ContinueOnNotReady: cfg.GateOnPodIP,
	}
	if cfg.RemoveStartupTaint {
		dopts.RemoveStartupTaint = &driver.StartupTaintOptions{Nodes: kube.CoreV1(), CSINodes: kube.StorageV1(), WatchWindow: cfg.StartupTaintWatchWindow, Metrics: met}
	}
	d, err := driver.New(ctx, "unix://"+cfg.CSISocket, log.WithName("csi"), dopts)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- d.Run() }()
	stop := func() error {
		m.Stop()
		d.Stop()
		return <-served
	}

	if cfg.PluginsRegistry != "" {
		endpoint := cfg.KubeletRegistrationPath
		if endpoint == "" {
			endpoint = cfg.CSISocket
		}
		reg, err := serveRegistration(ctx, log, cfg.PluginsRegistry, cfg.DriverName, endpoint)
		if err != nil {
			_ = stop()
			return err
		}
		defer reg.Stop()
	}
	log.Info("driver serving", "csi_socket", cfg.CSISocket, "node_id", cfg.NodeID)
	if cfg.OnServing != nil {
		cfg.OnServing(Serving{Manager: m, Filesystem: fsys, Pods: podLister, MetricsAddress: metricsAddr})
	}
	select {
	case <-ctx.Done():
		return stop()
	case err := <-served:
		return err
	}
}

// publishHook calls onPublish at every publish: a publish registers the volume's metadata first.
type publishHook struct {
	Store
	onPublish func(metadata.Metadata)
}

func (s *publishHook) RegisterMetadata(meta metadata.Metadata) (bool, error) {
	s.onPublish(meta)
	return s.Store.RegisterMetadata(meta)
}
