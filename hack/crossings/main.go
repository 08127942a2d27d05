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

// Command crossings counts the library's files whose code runs on a volume's first publish,
// from the moment the node server receives NodePublishVolume to the moment the manager calls the
// driver's WriteKeypair. It must be built with coverage in atomic mode over the library's
// packages (make crossings does): it clears the coverage counters just before the publish,
// writes them out when WriteKeypair is called, and lists every library file with a statement
// that ran in between, with how many of its statements ran. Its own package is instrumented too
// (the runtime offers no coverage data otherwise) and left out of the list.
//
// The publish is a real one through the CSI node server on a loopback listener: MemoryFS, a
// fake mounter, a fake cert-manager clientset that signs each request as it is created, and an
// always-open readiness gate.
package main

import (
	"bufio"
	"context"
	"crypto"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/mount-utils"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/internal/testkit"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

const module = "github.com/cert-manager/csi-lib/"

func main() {
	verbose := flag.Bool("v", false, "also list the statements that ran, by line")
	flag.Parse()
	if err := run(*verbose); err != nil {
		fmt.Fprintln(os.Stderr, "crossings:", err)
		os.Exit(1)
	}
}

func run(verbose bool) error {
	// Writing the meta-data first makes the runtime learn the counter mode.
	if err := coverage.WriteMeta(io.Discard); err != nil {
		return fmt.Errorf("build with -cover -covermode=atomic (make crossings): %w", err)
	}
	if err := coverage.ClearCounters(); err != nil {
		return fmt.Errorf("build with -cover -covermode=atomic (make crossings): %w", err)
	}
	dir, err := os.MkdirTemp("", "crossings")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	ca, err := testkit.NewCA("crossings CA")
	if err != nil {
		return err
	}
	client := testkit.NewScalableFakeClient()
	client.PrependReactor("create", "certificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		req := a.(k8stesting.CreateAction).GetObject().(*cmapi.CertificateRequest)
		chain, err := ca.Sign(req.Spec.Request, time.Now(), time.Hour)
		if err != nil {
			return true, nil, err
		}
		req.Status.Certificate, req.Status.CA = chain, ca.CertPEM
		req.Status.Conditions = []cmapi.CertificateRequestCondition{{Type: cmapi.CertificateRequestConditionReady, Status: "True", Reason: cmapi.CertificateRequestReasonIssued}}
		return false, nil, nil
	})

	store := storage.NewMemoryFS()
	var once sync.Once
	written := make(chan error, 1)
	m, err := manager.NewManager(manager.Options{
		Client:             client,
		MetadataReader:     store,
		Clock:              clock.RealClock{},
		Log:                ptr(logr.Discard()),
		NodeID:             "node",
		GeneratePrivateKey: testkit.GenerateKey,
		GenerateRequest: func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{Request: &x509.CertificateRequest{}, Namespace: "ns", IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"}}, nil
		},
		SignRequest: testkit.SignCSR,
		WriteKeypair: func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error {
			once.Do(func() {
				err := coverage.WriteCountersDir(dir)
				if err == nil {
					err = coverage.WriteMetaDir(dir)
				}
				written <- err
			})
			return nil
		},
	})
	if err != nil {
		return err
	}
	defer m.Stop()
	if err := testkit.WaitInformerWatching(context.Background(), client); err != nil {
		return err
	}
	d, conn, err := serve(store, m)
	if err != nil {
		return err
	}
	defer d.Stop()
	defer conn.Close()
	node := csi.NewNodeClient(conn)
	// One call before the measured one: gRPC's and the server's first-call set-up is not the
	// library's path.
	if _, err := node.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{}); err != nil {
		return err
	}

	if err := coverage.ClearCounters(); err != nil {
		return err
	}
	_, err = node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId:   "csi-0123456789abcdef",
		TargetPath: filepath.Join(dir, "target"),
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		Readonly: true,
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/ephemeral":     "true",
			"csi.storage.k8s.io/pod.name":      "pod",
			"csi.storage.k8s.io/pod.namespace": "ns",
			"csi.storage.k8s.io/pod.uid":       "uid",
		},
	})
	if err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	if err := <-written; err != nil {
		return err
	}
	return report(dir, verbose)
}

func serve(store storage.Interface, m *manager.Manager) (*driver.Driver, *grpc.ClientConn, error) {
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	d := driver.NewWithListener(lis, logr.Discard(), driver.Options{
		DriverName: "crossings", DriverVersion: "v0", NodeID: "node",
		Store: store, Manager: m, Mounter: mount.NewFakeMounter(nil),
	})
	go func() { _ = d.Run() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.Stop()
		return nil, nil, err
	}
	return d, conn, nil
}

// report prints the library's files with statements that ran, with the count of statements
// that ran in each, from the coverage data in dir.
func report(dir string, verbose bool) error {
	out := filepath.Join(dir, "cover.txt")
	cmd := exec.Command("go", "tool", "covdata", "textfmt", "-i="+dir, "-o="+out)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go tool covdata: %w", err)
	}
	f, err := os.Open(out)
	if err != nil {
		return err
	}
	defer f.Close()
	ran := map[string]int{}
	lines := map[string][]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// mode line, then "file:l.c,l.c statements count"
		fields := strings.Fields(s.Text())
		if len(fields) != 3 || !strings.HasPrefix(fields[0], module) || strings.HasPrefix(fields[0], module+"hack/") {
			continue
		}
		count, _ := strconv.Atoi(fields[2])
		stmts, _ := strconv.Atoi(fields[1])
		if count == 0 {
			continue
		}
		file, pos, _ := strings.Cut(strings.TrimPrefix(fields[0], module), ":")
		ran[file] += stmts
		lines[file] = append(lines[file], pos)
	}
	if err := s.Err(); err != nil {
		return err
	}
	files := make([]string, 0, len(ran))
	for f := range ran {
		files = append(files, f)
	}
	sort.Strings(files)
	fmt.Printf("library files whose code ran between NodePublishVolume and WriteKeypair: %d\n", len(files))
	for _, f := range files {
		fmt.Printf("  %-32s %4d statements\n", f, ran[f])
		if verbose {
			fmt.Printf("      %s\n", strings.Join(lines[f], " "))
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
