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
	"math"
	"net"
	"sync"
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
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/metrics"
	"github.com/cert-manager/csi-lib/storage"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// Options configures Run. Every field has a default, upstream csi-lib's; Run returns the
// filled-in copy.
type Options struct {
	// Clock drives the manager. Default: &clock.RealClock{}.
	Clock clock.Clock
	// Store holds the volumes. Default: a new MemoryFS. Run neither sweeps nor changes it.
	Store storage.Interface
	// Log is the logger. Default: testr for t, at verbosity 999999.
	Log *logr.Logger
	// Client is the cert-manager client. Default: fake.NewSimpleClientset(). Run creates
	// nothing through it.
	Client cmclient.Interface
	// Mounter records mounts. Default: mount.NewFakeMounter(nil).
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
	// WriteKeypair default: does nothing (it persists no metadata, as upstream's).
	WriteKeypair manager.WriteKeypairFunc
	// ReadyToRequest is passed to the manager; nil (left nil in the returned Options) means the
	// manager's default, always ready.
	ReadyToRequest manager.ReadyToRequestFunc

	// RenewalBackoffConfig default: zero delays (upstream's {Steps: math.MaxInt32}), so a failed
	// attempt is retried at once.
	RenewalBackoffConfig *wait.Backoff
	// GateBackoffConfig default: nil, the manager's default (1 s, factor 2, jitter 0.5, cap 10 s),
	// so a closed gate in a test does not spin the loop.
	GateBackoffConfig *wait.Backoff
	// PodCondition is passed to the manager. Default: nil, no pod condition.
	PodCondition *manager.PodCondition
	// ClientForMetadata is passed to the manager (token mode: each pod's requests created with
	// the pod's own client). Default: nil, the manager's default (Client creates them).
	ClientForMetadata manager.ClientForMetadataFunc
}

// Run starts a manager and a driver on a loopback listener and returns the filled options, a
// node client connected to the driver, and a function that stops everything (also registered
// with t.Cleanup; calling it twice is safe).
func Run(t *testing.T, opts Options) (Options, csi.NodeClient, func()) {
	t.Helper()
	if opts.Log == nil {
		l := testr.NewWithOptions(t, testr.Options{Verbosity: 999999})
		opts.Log = &l
	}
	if opts.Clock == nil {
		opts.Clock = &clock.RealClock{}
	}
	if opts.Store == nil {
		opts.Store = storage.NewMemoryFS()
	}
	if opts.Client == nil {
		opts.Client = fake.NewSimpleClientset()
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
		opts.WriteKeypair = func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error { return nil }
	}
	if opts.RenewalBackoffConfig == nil {
		opts.RenewalBackoffConfig = &wait.Backoff{Steps: math.MaxInt32}
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
		PodCondition:         opts.PodCondition,
		ClientForMetadata:    opts.ClientForMetadata,
		Metrics:              opts.Metrics,
	})
	if err != nil {
		t.Fatalf("starting manager: %v", err)
	}
	if recorder, ok := opts.Client.(testkit.ActionRecorder); ok {
		// A fake clientset drops events between the informer's list and its watch: wait, read
		// only, until the watch is registered.
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
	var once sync.Once
	stop := func() {
		once.Do(func() {
			m.Stop()
			_ = conn.Close()
			d.Stop()
			<-served
			_ = lis.Close()
		})
	}
	t.Cleanup(stop)
	return opts, csi.NewNodeClient(conn), stop
}
