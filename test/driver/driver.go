// Package driver runs a complete node driver (manager and CSI node server on a loopback
// listener) for drivers' own tests, with fakes for everything that needs a cluster or
// privileges: a fake cert-manager clientset, MemoryFS and a fake mounter.
//
// A test calls Run, publishes through the returned csi.NodeClient, plays the signer with
// package test/util, and calls the returned stop function (or lets t.Cleanup do it).
package driver

import (
	"context"
	"crypto"
	"crypto/x509"
	"net"
	"testing"
	"time"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/mount-utils"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/internal/testkit"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
)

// Options configures Run. Every field has a default; Run returns the filled-in copy.
type Options struct {
	// Clock drives the manager. Default: the real clock.
	Clock clock.Clock
	// Store holds the volumes. Default: a new MemoryFS. A MemoryFS is swept (see
	// storage.MemoryFS.Sweep) before the manager starts, as a restarted driver's store would be.
	Store storage.Interface
	// Log is the logger. Default: testr for t.
	Log *logr.Logger
	// Client is the cert-manager client. Default: a fake clientset.
	Client cmclient.Interface
	// Mounter records mounts. Default: a fake mounter.
	Mounter mount.Interface
	// Metrics is passed to the manager. Default: none.
	Metrics *metrics.Metrics
	// NodeID is the node's ID. Default: "test-node".
	NodeID string
	// MaxRequestsPerVolume is passed to the manager (0 means its default, 1).
	MaxRequestsPerVolume int
	// ContinueOnNotReady is passed to the driver.
	ContinueOnNotReady bool

	// GeneratePrivateKey default: returns a nil key.
	GeneratePrivateKey manager.GeneratePrivateKeyFunc
	// GenerateRequest default: an empty bundle.
	GenerateRequest manager.GenerateRequestFunc
	// SignRequest default: an empty CSR.
	SignRequest manager.SignRequestFunc
	// WriteKeypair default: persists the metadata (and so the next issuance time) and nothing
	// else.
	WriteKeypair manager.WriteKeypairFunc
	// ReadyToRequest default: always ready.
	ReadyToRequest manager.ReadyToRequestFunc

	// RenewalBackoffConfig and GateBackoffConfig default to zero-length backoffs, so retries
	// happen at once. A test that keeps a gate closed for a while should set a small non-zero
	// GateBackoffConfig to avoid spinning.
	RenewalBackoffConfig *wait.Backoff
	GateBackoffConfig    *wait.Backoff
}

// Run starts a manager and a driver on a loopback listener and returns the filled options, a
// node client connected to the driver, and a function that stops everything (also registered
// with t.Cleanup; calling it twice is safe).
func Run(t *testing.T, opts Options) (Options, csi.NodeClient, func()) {
	t.Helper()
	if opts.Log == nil {
		l := testr.New(t)
		opts.Log = &l
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Store == nil {
		opts.Store = storage.NewMemoryFS()
	}
	if opts.Client == nil {
		opts.Client = fake.NewClientset()
	}
	if opts.Mounter == nil {
		opts.Mounter = mount.NewFakeMounter(nil)
	}
	if opts.NodeID == "" {
		opts.NodeID = "test-node"
	}
	if opts.GeneratePrivateKey == nil {
		opts.GeneratePrivateKey = func(metadata.Metadata) (crypto.PrivateKey, error) { return nil, nil }
	}
	if opts.GenerateRequest == nil {
		opts.GenerateRequest = func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{}, nil
		}
	}
	if opts.SignRequest == nil {
		opts.SignRequest = func(metadata.Metadata, crypto.PrivateKey, *x509.CertificateRequest) ([]byte, error) {
			return []byte{}, nil
		}
	}
	if opts.WriteKeypair == nil {
		store := opts.Store
		opts.WriteKeypair = func(meta metadata.Metadata, _ crypto.PrivateKey, _, _ []byte) error {
			return store.WriteMetadata(meta.VolumeID, meta)
		}
	}
	if opts.ReadyToRequest == nil {
		opts.ReadyToRequest = manager.AlwaysReadyToRequest
	}
	if opts.RenewalBackoffConfig == nil {
		opts.RenewalBackoffConfig = &wait.Backoff{}
	}
	if opts.GateBackoffConfig == nil {
		opts.GateBackoffConfig = &wait.Backoff{}
	}
	if mem, ok := opts.Store.(*storage.MemoryFS); ok {
		if mem.Mounter == nil {
			mem.Mounter = opts.Mounter
		}
		mem.Sweep(*opts.Log)
	}

	m, err := manager.NewManager(manager.Options{
		Client:               opts.Client,
		MetadataReader:       opts.Store,
		Clock:                opts.Clock,
		Log:                  opts.Log,
		MaxRequestsPerVolume: opts.MaxRequestsPerVolume,
		NodeID:               opts.NodeID,
		GeneratePrivateKey:   opts.GeneratePrivateKey,
		GenerateRequest:      opts.GenerateRequest,
		SignRequest:          opts.SignRequest,
		WriteKeypair:         opts.WriteKeypair,
		ReadyToRequest:       opts.ReadyToRequest,
		RenewalBackoffConfig: opts.RenewalBackoffConfig,
		GateBackoffConfig:    opts.GateBackoffConfig,
		Metrics:              opts.Metrics,
	})
	if err != nil {
		t.Fatalf("starting manager: %v", err)
	}
	if recorder, ok := opts.Client.(testkit.ActionRecorder); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := testkit.WaitInformerWatching(ctx, recorder)
		cancel()
		if err != nil {
			m.Stop()
			t.Fatalf("waiting for the manager's informer: %v", err)
		}
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		m.Stop()
		t.Fatalf("listening: %v", err)
	}
	d := driver.NewWithListener(lis, *opts.Log, driver.Options{
		DriverName:         "driver-name",
		DriverVersion:      "v0.0.1",
		NodeID:             opts.NodeID,
		Store:              opts.Store,
		Manager:            m,
		Mounter:            opts.Mounter,
		ContinueOnNotReady: opts.ContinueOnNotReady,
	})
	served := make(chan error, 1)
	go func() { served <- d.Run() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.Stop()
		m.Stop()
		t.Fatalf("connecting to driver: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = conn.Close()
		d.Stop()
		<-served
		m.Stop()
	}
	t.Cleanup(stop)
	return opts, csi.NewNodeClient(conn), stop
}
