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

package controlplane

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// CertManager is a running process of cert-manager's own controllers (hack/cm-controllers).
type CertManager struct {
	// PID is the process's ID; Stop stops it by this ID.
	PID  int
	done chan struct{}
}

// StartCertManager starts cert-manager's controllers from the binary at path against the
// apiserver of the kubeconfig file, with their output to out: the named controllers, or all of
// them (the approver, the CA issuer, Issuer and ClusterIssuer readiness).
func StartCertManager(path, kubeconfig string, out io.Writer, controllers ...string) (*CertManager, error) {
	args := []string{"-kubeconfig", kubeconfig}
	if len(controllers) > 0 {
		args = append(args, "-controllers", strings.Join(controllers, ","))
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting cert-manager's controllers: %w", err)
	}
	cm := &CertManager{PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(cm.done) }()
	return cm, nil
}

// Stop stops the controllers by their PID: SIGTERM, then SIGKILL after 10 s. It returns once
// the process has exited; a second call does nothing more.
func (c *CertManager) Stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = syscall.Kill(c.PID, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
		<-c.done
	}
}
