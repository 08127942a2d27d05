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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"

	"github.com/cert-manager/csi-lib/driver"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// Example wires a complete node driver from the three public constructors.
func Example() {
	log := logr.Discard()
	var client cmclient.Interface // e.g. cmclient.NewForConfigOrDie(restConfig)

	store, err := storage.NewFilesystem(log, "/csi-data-dir")
	if err != nil {
		panic(err)
	}
	m, err := manager.NewManager(manager.Options{
		Client:         client,
		MetadataReader: store,
		Log:            &log,
		NodeID:         "node-1",
		GeneratePrivateKey: func(metadata.Metadata) (crypto.PrivateKey, error) {
			return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		},
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeContext["csi.storage.k8s.io/pod.name"]}},
				Namespace: meta.VolumeContext["csi.storage.k8s.io/pod.namespace"],
			}, nil
		},
		SignRequest: func(_ metadata.Metadata, key crypto.PrivateKey, req *x509.CertificateRequest) ([]byte, error) {
			der, err := x509.CreateCertificateRequest(rand.Reader, req, key)
			return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), err
		},
		WriteKeypair: func(meta metadata.Metadata, key crypto.PrivateKey, chain, ca []byte) error {
			der, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				return err
			}
			keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
			if err := store.WriteFiles(meta, map[string][]byte{"tls.key": keyPEM, "tls.crt": chain, "ca.crt": ca}); err != nil {
				return err
			}
			return store.WriteMetadata(meta.VolumeID, meta)
		},
	})
	if err != nil {
		panic(err)
	}
	d, err := driver.New(context.Background(), "unix:///csi/csi.sock", log, driver.Options{
		DriverName: "csi.example.com", DriverVersion: "v1.0.0", NodeID: "node-1",
		Store: store, Manager: m,
	})
	if err != nil {
		panic(err)
	}
	_ = d.Run()
}
