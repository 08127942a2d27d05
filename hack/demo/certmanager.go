package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// outageNamespace is story 4's namespace: it has no cert-manager Issuer, so only the demo's
// own signer answers its requests.
const outageNamespace = "demo-outage"

// startCertManager writes the apiserver's kubeconfig into dir, starts cert-manager's controllers
// (the binary at path) by PID, creates in each namespace a CA secret on the demo's CA and the
// CA Issuer demo-ca on it, and waits until cert-manager has every Issuer Ready. The returned
// function stops the controllers by that PID.
func (d *demo) startCertManager(path string, kubeconfig []byte, dir string, namespaces ...string) (stop func(), err error) {
	ctx := context.Background()
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "cm-controllers.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "-kubeconfig", kubeconfigPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting cert-manager's controllers: %w", err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(done) }()
	stop = func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
	}
	d.say("started cert-manager's controllers (pid %d)", pid)

	key, err := d.ca.PrivateKeyPEM()
	if err != nil {
		stop()
		return nil, err
	}
	for _, ns := range namespaces {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "demo-ca-key-pair", Namespace: ns},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: d.ca.CertPEM, corev1.TLSPrivateKeyKey: key},
		}
		if _, err := d.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			stop()
			return nil, err
		}
		issuer := &cmapi.Issuer{
			ObjectMeta: metav1.ObjectMeta{Name: "demo-ca", Namespace: ns},
			Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secret.Name}}},
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
	for _, c := range issuer.Status.Conditions {
		if c.Type == cmapi.IssuerConditionReady {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}
