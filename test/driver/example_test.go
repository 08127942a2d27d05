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

package driver_test

import (
	"context"
	"crypto"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	testutil "github.com/cert-manager/csi-lib/test/util"
)

// ExampleRun is a driver's own unit test: Run starts the library's manager and node server
// with the driver's functions on fakes (a fake cert-manager clientset, MemoryFS, a fake mounter),
// the test publishes a volume as kubelet does, plays the signer with test/util, and checks what
// the driver wrote. Every Options field left out gets upstream csi-lib's default.
func ExampleRun() {
	testPublishWritesTheKeyPair := func(t *testing.T) {
		opts, node, stop := testdriver.Run(t, testdriver.Options{
			GenerateRequest: func(metadata.Metadata) (*manager.CertificateRequestBundle, error) {
				return &manager.CertificateRequestBundle{Namespace: "my-namespace"}, nil
			},
			// The driver under test's own WriteKeypair; here it only records the chain.
			WriteKeypair: func(meta metadata.Metadata, _ crypto.PrivateKey, chain, _ []byte) error {
				if len(chain) == 0 {
					t.Error("empty chain")
				}
				return nil
			},
		})
		defer stop()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go testutil.IssueOneRequest(ctx, t, opts.Client, "my-namespace", []byte("certificate PEM"), []byte("CA PEM"))
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId:   "vol-1",
			TargetPath: t.TempDir(),
			Readonly:   true,
			VolumeContext: map[string]string{
				"csi.storage.k8s.io/ephemeral":     "true",
				"csi.storage.k8s.io/pod.name":      "my-pod",
				"csi.storage.k8s.io/pod.namespace": "my-namespace",
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = testPublishWritesTheKeyPair // a driver names it TestPublishWritesTheKeyPair
}
