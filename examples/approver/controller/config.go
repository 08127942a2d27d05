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

package controller

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/approval/podspec"
	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
)

// The rules the example approver runs (Config.Rules, --rules), each an approval.PodRule.
const (
	// RulePodSpec is podspec.Rule with the example driver's own generator (plugin.RequestFor):
	// a request asks for what one of its pod's volumes of the driver asks for, and nothing else.
	RulePodSpec = "pod-spec"
	// RuleSPIFFE is approval.SPIFFERule: the request's one name is its pod's SPIFFE ID.
	RuleSPIFFE = "spiffe"
	// RuleCommonNameIsPodName is CommonNameIsPodName.
	RuleCommonNameIsPodName = "common-name-is-pod-name"
)

// Config is what the example approver's operator sets (BindFlags); main turns it into Options.
type Config struct {
	// Kubeconfig is the path of the approver's kubeconfig; empty: the in-cluster configuration.
	Kubeconfig string
	// Issuers are Options.Issuers.
	Issuers []cmmeta.IssuerReference
	// Rules are the names of the rules to run, in order (RulePodSpec, RuleSPIFFE,
	// RuleCommonNameIsPodName); none: the approval check alone.
	Rules []string
	// DriverName is the CSI driver whose volumes RulePodSpec reads (the CSIDriver's name).
	DriverName string
	// DriverIssuer is the example driver's issuer for a volume that names none (its
	// --issuer-kind, --issuer-name and --issuer-group): RulePodSpec calls the driver's generator
	// as the driver does.
	DriverIssuer cmmeta.IssuerReference
	// KubeletRootDir is kubelet's --root-dir on the nodes (podspec.Options.KubeletRootDir).
	KubeletRootDir string
	// SPIFFETrustDomain is RuleSPIFFE's trust domain.
	SPIFFETrustDomain string
	// PodCache is Options.PodCache.
	PodCache bool
	// Workers, QPS and Burst are Options.Workers and the client's limits.
	Workers int
	QPS     float64
	Burst   int
}

// DefaultConfig is the example approver's defaults: the pod-spec rule for the example driver
// with its default issuer (examples/deploy's ClusterIssuer), a pod cache.
func DefaultConfig() Config {
	return Config{
		Rules:          []string{RulePodSpec},
		DriverName:     "csi.example.com",
		DriverIssuer:   cmmeta.IssuerReference{Kind: "ClusterIssuer", Name: "csi-ca", Group: "cert-manager.io"},
		KubeletRootDir: podspec.DefaultKubeletRootDir,
		PodCache:       true,
		Workers:        4,
		QPS:            50,
		Burst:          100,
	}
}

// BindFlags defines on fs the approver's flags, each bound to its field of c and defaulting to
// its value in c now.
func BindFlags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig of the approver's account (empty: in-cluster)")
	fs.Var((*issuerList)(&c.Issuers), "issuer", "decide only requests for this issuer, as Kind/name or group/Kind/name (repeatable; none: every request csi-lib created)")
	fs.Var(&ruleList{names: &c.Rules}, "rules", "the rules a request must pass besides the pod's checks, comma-separated: "+
		RulePodSpec+" (what one of the pod's volumes of --driver-name asks for, through the example driver's own generator), "+
		RuleSPIFFE+" (the request's one name is the pod's SPIFFE ID in --spiffe-trust-domain), "+
		RuleCommonNameIsPodName+"; empty: none")
	fs.StringVar(&c.DriverName, "driver-name", c.DriverName, "the CSI driver whose volumes the "+RulePodSpec+" rule reads")
	fs.Var((*issuerValue)(&c.DriverIssuer), "driver-issuer", "the example driver's issuer for a volume that names none (its --issuer-kind and --issuer-name), as Kind/name or group/Kind/name")
	fs.StringVar(&c.KubeletRootDir, "kubelet-root-dir", c.KubeletRootDir, "kubelet's --root-dir on the nodes (the volumes' target paths the driver's generator is given)")
	fs.StringVar(&c.SPIFFETrustDomain, "spiffe-trust-domain", c.SPIFFETrustDomain, "the trust domain of the "+RuleSPIFFE+" rule's SPIFFE IDs")
	fs.BoolVar(&c.PodCache, "pod-cache", c.PodCache, "read pods from a cache of all pods (list and watch), and from the apiserver only when the cache has no pod of the request's name and UID")
	fs.IntVar(&c.Workers, "workers", c.Workers, "requests decided in parallel")
	fs.Float64Var(&c.QPS, "kube-api-qps", c.QPS, "requests per second to the apiserver (each decision is a status update, and a pod read where the cache has not the pod)")
	fs.IntVar(&c.Burst, "kube-api-burst", c.Burst, "burst of requests to the apiserver")
}

// PodRules builds the rules c names, in order, or says what is wrong with them.
func (c Config) PodRules() ([]approval.PodRule, error) {
	var rules []approval.PodRule
	var errs []error
	for _, name := range c.Rules {
		switch name {
		case RulePodSpec:
			if c.DriverName == "" || c.DriverIssuer.Name == "" {
				errs = append(errs, fmt.Errorf("the %s rule needs --driver-name and --driver-issuer", RulePodSpec))
				continue
			}
			rules = append(rules, podspec.Rule(podspec.Options{DriverName: c.DriverName, KubeletRootDir: c.KubeletRootDir}, plugin.RequestFor(c.DriverIssuer)))
		case RuleSPIFFE:
			if c.SPIFFETrustDomain == "" || strings.Contains(c.SPIFFETrustDomain, "/") {
				errs = append(errs, fmt.Errorf("the %s rule needs a --spiffe-trust-domain (%q is not one)", RuleSPIFFE, c.SPIFFETrustDomain))
				continue
			}
			rules = append(rules, approval.SPIFFERule(c.SPIFFETrustDomain))
		case RuleCommonNameIsPodName:
			rules = append(rules, CommonNameIsPodName)
		default:
			errs = append(errs, fmt.Errorf("no rule %q (known: %s, %s, %s)", name, RulePodSpec, RuleSPIFFE, RuleCommonNameIsPodName))
		}
	}
	return rules, errors.Join(errs...)
}

// issuerList collects --issuer values.
type issuerList []cmmeta.IssuerReference

func (l *issuerList) String() string {
	var s []string
	for _, ref := range *l {
		s = append(s, issuerText(ref))
	}
	return strings.Join(s, ",")
}

func (l *issuerList) Set(v string) error {
	ref, err := parseIssuer(v)
	if err == nil {
		*l = append(*l, ref)
	}
	return err
}

// issuerValue is one issuer reference.
type issuerValue cmmeta.IssuerReference

func (i *issuerValue) String() string { return issuerText(cmmeta.IssuerReference(*i)) }

func (i *issuerValue) Set(v string) error {
	ref, err := parseIssuer(v)
	if err == nil {
		*i = issuerValue(ref)
	}
	return err
}

// parseIssuer reads Kind/name or group/Kind/name; the group defaults to cert-manager.io.
func parseIssuer(v string) (cmmeta.IssuerReference, error) {
	parts := strings.Split(v, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return cmmeta.IssuerReference{Group: "cert-manager.io", Kind: parts[0], Name: parts[1]}, nil
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return cmmeta.IssuerReference{Group: parts[0], Kind: parts[1], Name: parts[2]}, nil
	}
	return cmmeta.IssuerReference{}, fmt.Errorf("%q: want Kind/name or group/Kind/name, for example ClusterIssuer/csi-ca", v)
}

func issuerText(ref cmmeta.IssuerReference) string {
	ref = normalIssuer(ref)
	if ref.Group == "cert-manager.io" {
		return ref.Kind + "/" + ref.Name
	}
	return ref.Group + "/" + ref.Kind + "/" + ref.Name
}

// ruleList is --rules: comma-separated names; the first --rules replaces the default, and each
// further one adds.
type ruleList struct {
	names *[]string
	set   bool
}

func (l *ruleList) String() string {
	if l.names == nil {
		return ""
	}
	return strings.Join(*l.names, ",")
}

func (l *ruleList) Set(v string) error {
	if !l.set {
		*l.names, l.set = nil, true
	}
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*l.names = append(*l.names, name)
		}
	}
	return nil
}
