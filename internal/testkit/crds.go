package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CertificateRequestCRD returns the path of cert-manager's CertificateRequest CRD in the
// cert-manager module this module requires (deploy/crds in the module cache), for envtest.
func CertificateRequestCRD() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "cert-manager.io_certificaterequests.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("cert-manager CRD: %w", err)
	}
	return path, nil
}
