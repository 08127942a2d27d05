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

package manager_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// ExampleNewManager is a driver's manager: its key, request, CSR and key-pair functions, a
// readiness gate that waits for the pod's IP, and the store the node server writes to. The
// driver's WriteKeypair persists the renewal point it wants (here NotAfter minus a third of the
// lifetime, the library's default, which it is handed in meta.NextIssuanceTime).
func ExampleNewManager() {
	// podHasIP stands for the driver's pod informer's cache.
	podHasIP := func(podUID string) bool { return podUID != "" }
	log := logr.Discard()
	store := storage.NewMemoryFS() // storage.NewFilesystem(log, "csi-data-dir") in a driver
	m, err := manager.NewManager(manager.Options{
		Client:         fake.NewClientset(), // cmclient.NewForConfig(restConfig) in a driver
		MetadataReader: store,
		Log:            &log,
		NodeID:         "node-1",
		GeneratePrivateKey: func(metadata.Metadata) (crypto.PrivateKey, error) {
			return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		},
		GenerateRequest: func(meta metadata.Metadata) (*manager.CertificateRequestBundle, error) {
			return &manager.CertificateRequestBundle{
				Request:   &x509.CertificateRequest{Subject: pkix.Name{CommonName: meta.VolumeContext[metadata.PodNameVolumeContextKey]}},
				Namespace: meta.VolumeContext[metadata.PodNamespaceVolumeContextKey],
				IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
				Duration:  24 * time.Hour,
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
			return store.WriteMetadata(meta.VolumeID, meta) // persists meta.NextIssuanceTime
		},
		// The gate: no request before the pod has an IP (a driver that puts the IP in the
		// certificate). Gate-pending is not a failure: it backs off on GateBackoffConfig, and
		// RequeuePod ends the wait (see the Manager.RequeuePod example).
		ReadyToRequest: func(meta metadata.Metadata) (bool, string) {
			if !podHasIP(meta.VolumeContext[metadata.PodUIDVolumeContextKey]) {
				return false, "the pod has no IP yet"
			}
			return true, ""
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Stop()
	fmt.Println("managing:", m.IsVolumeReady("no-such-volume"))
	// Output: managing: false
}

// ExampleManager_RequeuePod calls RequeuePod from a pod informer: a volume whose readiness gate
// waits for the pod's IP is attempted again within milliseconds of the pod getting one, instead
// of at the next step of the gate's backoff. PodTerminating, from the same informer, ends the
// publish of a pod being deleted at once.
func ExampleManager_RequeuePod() {
	var m *manager.Manager // the driver's manager (see NewManager)
	kube := kubefake.NewClientset()
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=node-1" }))
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			pod := obj.(*corev1.Pod)
			if pod.DeletionTimestamp != nil {
				m.PodTerminating(pod.UID)
				return
			}
			if pod.Status.PodIP != "" {
				m.RequeuePod(pod.UID)
			}
		},
		DeleteFunc: func(obj any) {
			// A delete the informer missed while its watch was down comes as a tombstone.
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				m.PodTerminating(pod.UID)
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	fmt.Println("pod informer running")
	// Output: pod informer running
}
