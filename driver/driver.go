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

package driver

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/mount-utils"

	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/startuptaint"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// GeneratePrivateKeyFunc is kept for compatibility with older drivers.
type GeneratePrivateKeyFunc func(meta metadata.Metadata) (crypto.PrivateKey, error)

// GenerateRequestFunc is kept for compatibility with older drivers.
type GenerateRequestFunc func(meta metadata.Metadata) (*x509.CertificateRequest, error)

// SignRequestFunc is kept for compatibility with older drivers.
type SignRequestFunc func(meta metadata.Metadata, request *x509.CertificateRequest) (csr []byte, err error)

// Options configures a Driver.
type Options struct {
	// DriverName and DriverVersion are reported by the identity service.
	DriverName    string
	DriverVersion string
	// NodeID is reported by NodeGetInfo.
	NodeID string
	// Store holds the volumes.
	Store storage.Interface
	// Manager issues and renews certificates.
	Manager *manager.Manager
	// Mounter bind-mounts volumes. Default (nil): the operating system's mounter.
	Mounter mount.Interface
	// ContinueOnNotReady lets NodePublishVolume succeed for a volume that is not yet ready to
	// request a certificate; the background loop obtains it later. Default false: such a publish
	// fails with codes.Unknown and is retried by kubelet.
	ContinueOnNotReady bool
	// RemoveStartupTaint, if set, removes the node's startup taint <DriverName>/agent-not-ready
	// once kubelet has registered the driver, and watches the node for it for a while (see
	// StartupTaintOptions). Default nil: the node is neither read nor changed, as upstream.
	RemoveStartupTaint *StartupTaintOptions
}

// Driver is a CSI node plugin serving on one listener.
type Driver struct {
	server *GRPCServer
	// err is what NewWithListener found wrong with its options: Run returns it.
	err error

	// taint removes the node's startup taint; nil without RemoveStartupTaint.
	taint *startuptaint.Remover

	mu      sync.Mutex
	stopped bool
	// taintRun is the removal Run started (nil before): Stop ends it and waits for it. It is a
	// pointer so that Driver stays comparable, as upstream's is.
	taintRun *taintRun
}

// taintRun is a startup taint removal running in the background.
type taintRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// New listens on endpoint ("unix:///path/to/csi.sock" or "tcp://host:port", the scheme in any
// case) and returns a driver ready to Run. A unix socket is at "/" followed by the rest of the
// endpoint, so "unix://csi/csi.sock" is /csi/csi.sock too; whatever file is there is removed
// first. Invalid RemoveStartupTaint options (a DriverName that makes no valid taint key) are an
// error, found before anything listens.
func New(ctx context.Context, endpoint string, log logr.Logger, opts Options) (*Driver, error) {
	// The options are checked before listening; NewWithListener makes the same remover again,
	// so it finds no error.
	if _, err := newStartupTaintRemover(log, opts); err != nil {
		return nil, err
	}
	lis, err := listen(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	return NewWithListener(lis, log, opts), nil
}

// NewWithListener returns a driver that serves on lis. If its RemoveStartupTaint options are
// invalid, Run returns the error at once and closes lis.
func NewWithListener(lis net.Listener, log logr.Logger, opts Options) *Driver {
	if opts.Mounter == nil {
		opts.Mounter = mount.New("")
	}
	ns := &nodeServer{Options: opts, log: log.WithName("node")}
	d := &Driver{
		server: NewGRPCServerWithListener(lis, log, NewIdentityServer(opts.DriverName, opts.DriverVersion), &controllerServer{}, ns),
	}
	d.taint, d.err = newStartupTaintRemover(log, opts)
	if d.taint != nil && opts.RemoveStartupTaint.Metrics != nil {
		met := opts.RemoveStartupTaint.Metrics
		met.EnableStartupTaintRemovals()
		met.AddStartupTaintRemovals(util.HashIdentifier(opts.NodeID), 0)
	}
	return d
}

// Run serves until Stop; it returns nil after Stop. With RemoveStartupTaint it also starts the
// removal of the node's startup taint in the background; serving never waits for it.
func (d *Driver) Run() error {
	if d.err != nil {
		_ = d.server.lis.Close()
		return d.err
	}
	d.mu.Lock()
	if d.taint != nil && d.taintRun == nil && !d.stopped {
		ctx, cancel := context.WithCancel(context.Background())
		run := &taintRun{cancel: cancel, done: make(chan struct{})}
		d.taintRun = run
		go func() {
			defer close(run.done)
			d.taint.Run(ctx)
		}()
	}
	d.mu.Unlock()
	return d.server.Run()
}

// Stop stops serving, letting calls in flight finish, and ends the startup taint's removal.
func (d *Driver) Stop() {
	d.mu.Lock()
	d.stopped = true
	run := d.taintRun
	d.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
	d.server.Stop()
}

// listen opens the listener for a CSI endpoint: the scheme "unix://" or
// "tcp://" (in any case) followed by a non-empty rest. For unix, the socket is at "/" + rest, so
// "unix:///csi/csi.sock" and "unix://csi/csi.sock" both listen at /csi/csi.sock whatever the
// working directory; whatever file is there is removed first.
func listen(ctx context.Context, endpoint string) (net.Listener, error) {
	var lc net.ListenConfig
	lower := strings.ToLower(endpoint)
	switch {
	case strings.HasPrefix(lower, "unix://") && len(endpoint) > len("unix://"):
		path := "/" + endpoint[len("unix://"):]
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("failed to remove %s: %w", path, err)
		}
		return lc.Listen(ctx, "unix", path)
	case strings.HasPrefix(lower, "tcp://") && len(endpoint) > len("tcp://"):
		return lc.Listen(ctx, "tcp", endpoint[len("tcp://"):])
	default:
		return nil, fmt.Errorf("invalid endpoint: %s", endpoint)
	}
}
