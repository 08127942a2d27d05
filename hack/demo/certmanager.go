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
	"fmt"
	"os"
	"path/filepath"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/test/testkit"
	"github.com/cert-manager/csi-lib/test/testkit/controlplane"
)

// outageNamespace is story 4's namespace: it has no cert-manager Issuer, so only the demo's
// own signer answers its requests.
const outageNamespace = "demo-outage"

// startCertManager starts cert-manager's controllers (the binary at path, on the apiserver's
// kubeconfig d.kubeconfig) by PID with their output in dir/cm-controllers.log, creates in each
// namespace a CA secret on the demo's CA and the CA Issuer demo-ca on it, and waits until
// cert-manager has every Issuer Ready. The returned function stops the controllers by that PID.
func (d *demo) startCertManager(path string, dir string, namespaces ...string) (stop func(), err error) {
	ctx := context.Background()
	logFile, err := os.Create(filepath.Join(dir, "cm-controllers.log"))
	if err != nil {
		return nil, err
	}
	p, err := controlplane.StartCertManager(path, d.kubeconfig, logFile)
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	stop = func() {
		p.Stop()
		_ = logFile.Close()
	}
	d.say("started cert-manager's controllers (pid %d)", p.PID)

	for _, ns := range namespaces {
		secret, err := testkit.CAIssuerSecret(ns, "demo-ca-key-pair", d.ca)
		if err != nil {
			stop()
			return nil, err
		}
		if _, err := d.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			stop()
			return nil, err
		}
		issuer := &cmapi.Issuer{
			ObjectMeta: metav1.ObjectMeta{Name: "demo-ca", Namespace: ns},
			Spec:       testkit.CAIssuerSpec(secret.Name),
		}
		if _, err := d.cm.CertmanagerV1().Issuers(ns).Create(ctx, issuer, metav1.CreateOptions{}); err != nil {
			stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, ns := range namespaces {
		for !issuerReady(ctx, d, ns) {
			if time.Now().After(deadline) {
				stop()
				return nil, fmt.Errorf("cert-manager did not make the Issuer demo-ca in %s Ready within a minute (its log: %s)", ns, logFile.Name())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	d.say("cert-manager has the CA Issuer demo-ca Ready in %v", namespaces)
	return stop, nil
}

func issuerReady(ctx context.Context, d *demo, ns string) bool {
	issuer, err := d.cm.CertmanagerV1().Issuers(ns).Get(ctx, "demo-ca", metav1.GetOptions{})
	if err != nil {
		return false
	}
	return testkit.IssuerReady(issuer.Status.Conditions)
}
