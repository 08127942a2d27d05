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
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// exampleDriver is a node driver built from the library's public API only (driver.New,
// manager.NewManager, storage.NewFilesystem…), as a driver author would write it, with a
// readiness gate that waits for the pod's IP, fed by a real Pod informer.
type exampleDriver struct {
	name     string
	store    storage.Interface
	fs       *storage.Filesystem
	m        *manager.Manager
	d        *driver.Driver
	socket   string
	registry *prometheus.Registry
	pods     corev1listers.PodLister
	metrics  *metrics.Metrics
	events   record.EventBroadcaster
	stopCh   chan struct{}
	served   chan error
}

type driverConfig struct {
	name         string
	nodeID       string
	baseDir      string
	socketDir    string
	kube         kubernetes.Interface
	cm           cmclient.Interface
	mounter      mount.Interface
	plainDir     bool
	requeuePod   bool          // call RequeuePod when a pod changes (the fork's fast path)
	gateBackoff  *wait.Backoff // nil: the library default
	gatePoll     time.Duration // 0: the library default; negative: no gate poll
	issueBackoff *wait.Backoff // nil: the library default
	wrapStore    func(*storage.Filesystem) storage.Interface
	onWritten    func(meta metadata.Metadata, chain []byte)
	log          logr.Logger
}

func startDriver(cfg driverConfig) (*exampleDriver, error) {
	fs, err := storage.NewFilesystemWithOptions(cfg.log.WithName("storage"), cfg.baseDir, storage.FilesystemOptions{PlainDirectory: cfg.plainDir, Mounter: cfg.mounter})
	if err != nil {
		return nil, err
	}
	var store storage.Interface = fs
	if cfg.wrapStore != nil {
		store = cfg.wrapStore(fs)
	}
	ed := &exampleDriver{name: cfg.name, store: store, fs: fs, stopCh: make(chan struct{}), served: make(chan error, 1),
		socket: filepath.Join(cfg.socketDir, cfg.name+".sock"), registry: prometheus.NewRegistry()}

	// The pod informer behind the readiness gate.
	podFactory := informers.NewSharedInformerFactory(cfg.kube, 0)
	pods := podFactory.Core().V1().Pods()
	podLister := pods.Lister()
	ed.pods = podLister
	gate := plugin.PodIPGate(podLister)

	// Metrics read the node's CertificateRequests from their own informer.
	nodeHash := util.HashIdentifier(cfg.nodeID)
	crFactory := cminformers.NewSharedInformerFactoryWithOptions(cfg.cm, 0, cminformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = api.NodeIDHashLabelKey + "=" + nodeHash
	}))
	crLister := crFactory.Certmanager().V1().CertificateRequests().Lister()
	mlog := cfg.log.WithName("metrics")
	met := metrics.New(cfg.nodeID, &mlog, ed.registry, store, crLister)
	met.EnableExtendedMetrics()
	ed.metrics = met

	// Events on the pods, through client-go's recorder (the driver's RBAC must allow creating
	// and patching events in the pods' namespaces).
	ed.events = record.NewBroadcaster()
	ed.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.kube.CoreV1().Events("")})
	recorder := ed.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "csi.example.com"})

	log := cfg.log.WithName(cfg.name)
	m, err := manager.NewManager(manager.Options{
		Client:             cfg.cm,
		MetadataReader:     store,
		Log:                &log,
		NodeID:             cfg.nodeID,
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			d, err := time.ParseDuration(meta.VolumeContext["csi.example.com/duration"])
			if err != nil {
				return nil, fmt.Errorf("volume attribute csi.example.com/duration: %w", err)
			}
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeContext[metadata.PodNameVolumeContextKey]}},
				Namespace: meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
				IssuerRef: cmmeta.IssuerReference{Name: "demo-ca", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:  d,
				Usages:    []cmapi.KeyUsage{cmapi.UsageDigitalSignature, cmapi.UsageServerAuth},
			}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: testkit.KeypairWriter(store, func(meta metadata.Metadata, _ crypto.PrivateKey, chain []byte) {
			if cfg.onWritten != nil {
				cfg.onWritten(meta, chain)
			}
		}),
		ReadyToRequest:       gate,
		GateBackoffConfig:    cfg.gateBackoff,
		GatePollInterval:     cfg.gatePoll,
		RenewalBackoffConfig: cfg.issueBackoff,
		Metrics:              met,
		EventRecorder:        recorder,
	})
	if err != nil {
		return nil, err
	}
	ed.m = m
	if cfg.requeuePod {
		if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, obj any) { m.RequeuePod(obj.(*corev1.Pod).UID) },
		}); err != nil {
			return nil, err
		}
	} else {
		pods.Informer() // register it so the factory starts it
	}
	podFactory.Start(ed.stopCh)
	crFactory.Start(ed.stopCh)
	podFactory.WaitForCacheSync(ed.stopCh)
	crFactory.WaitForCacheSync(ed.stopCh)

	d, err := driver.New(context.Background(), "unix://"+ed.socket, cfg.log.WithName(cfg.name+"-csi"), driver.Options{
		DriverName: "csi.example.com", DriverVersion: "demo", NodeID: cfg.nodeID,
		Store: store, Manager: m, Mounter: cfg.mounter, ContinueOnNotReady: true,
	})
	if err != nil {
		m.Stop()
		return nil, err
	}
	ed.d = d
	go func() { ed.served <- d.Run() }()
	return ed, nil
}

// serveMetrics serves the driver's /metrics on addr until the returned function is called.
func (ed *exampleDriver) serveMetrics(addr string) (string, func(), error) {
	srv := &http.Server{Addr: addr, Handler: ed.metrics.DefaultHandler(), ReadHeaderTimeout: 5 * time.Second}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	return "http://" + lis.Addr().String() + "/metrics", func() { _ = srv.Close() }, nil
}

// kill stops the manager first, so calls in flight fail at once, then the server: the nearest
// an in-process demo gets to a killed driver (its store is frozen by the caller).
func (ed *exampleDriver) kill() {
	ed.m.Stop()
	ed.stop()
}

func (ed *exampleDriver) stop() {
	ed.d.Stop()
	<-ed.served
	ed.m.Stop()
	ed.events.Shutdown()
	close(ed.stopCh)
}
