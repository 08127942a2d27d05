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
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"testing"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"

	"github.com/cert-manager/csi-lib/internal/certs"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
	testdriver "github.com/cert-manager/csi-lib/test/driver"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// TestDriversRenewalPointIsTheRenewalPoint: a driver whose WriteKeypair persists
// NextIssuanceTime = NotAfter − renew-before, as cert-manager csi-driver does for
// csi.cert-manager.io/renew-before, is renewed exactly then, whether that is earlier than the
// library's default (two thirds of the life) or later, for the renewal after the publish and the
// one after that. Before any step the loop waits exactly until the persisted point; a
// millisecond before it nothing is created; at it the next request is.
func TestDriversRenewalPointIsTheRenewalPoint(t *testing.T) {
	const life = time.Hour
	for _, renewBefore := range []time.Duration{50 * time.Minute, 21 * time.Minute, 5 * time.Minute} {
		t.Run(fmt.Sprint("renew-before ", renewBefore), func(t *testing.T) {
			// Whole seconds: a certificate's NotBefore has no finer resolution.
			clk := testkit.NewRecordingClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
			store := storage.NewMemoryFS()
			persisted := make(chan time.Time, 10)
			opts, cl, _ := testdriver.Run(t, testdriver.Options{
				Clock:              clk,
				Store:              store,
				GeneratePrivateKey: testkit.GenerateKey,
				SignRequest:        testkit.SignCSR,
				GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
					return &manager.CertificateRequestBundle{
						Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeID}},
						Namespace: namespace,
						IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
						Duration:  life,
					}, nil
				},
				// As csi-driver's writer: the files, then the metadata with its own renewal point.
				WriteKeypair: func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
					keyPEM, err := testkit.KeyPEM(key)
					if err != nil {
						return err
					}
					if err := store.WriteFiles(meta, map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}); err != nil {
						return err
					}
					leaf, err := certs.ParseLeaf(chain)
					if err != nil {
						return err
					}
					next := leaf.NotAfter.Add(-renewBefore)
					meta.NextIssuanceTime = &next
					if err := store.WriteMetadata(meta.VolumeID, meta); err != nil {
						return err
					}
					persisted <- next
					return nil
				},
			})
			startSigner(t, opts, newCA(t))
			creates := func() int { return testkit.CountActions(opts.Client.(*fake.Clientset), "create") }

			if _, err := cl.NodePublishVolume(ctxWithTimeout(t, pollTimeout), publishRequest(t, "vol-1")); err != nil {
				t.Fatal(err)
			}
			for renewal := 1; renewal <= 2; renewal++ {
				next := <-persisted
				if def := clk.Now().Add(life * 2 / 3); next.Equal(def) {
					t.Fatalf("the persisted point %v is the library's default: the test shows nothing", next)
				}
				// The publish's attempt starts no timer, a renewal its 60 s deadline first.
				if renewal > 1 {
					if d := clk.NextTimer(t, pollTimeout); d != 60*time.Second {
						t.Fatalf("renewal %d: a %v timer where its attempt's 60 s deadline was expected", renewal, d)
					}
				}
				want := next.Sub(clk.Now())
				if d := clk.NextTimer(t, pollTimeout); d != want {
					t.Fatalf("renewal %d: the loop waits %v; the driver's renewal point is %v away", renewal, d, want)
				}
				poll(t, "the loop to wait on the clock", clk.HasWaiters)
				clk.Step(want - time.Millisecond)
				if n := creates(); n != renewal || len(clk.Timers) != 0 {
					t.Fatalf("renewal %d: %d requests and %d new timers a millisecond before the renewal point", renewal, n, len(clk.Timers))
				}
				clk.Step(time.Millisecond)
				poll(t, "the renewal's request", func() bool { return creates() == renewal+1 })
			}
		})
	}
}
