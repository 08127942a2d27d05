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
	"flag"
	"io"
	"slices"
	"strings"
	"testing"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
)

// TestBindFlags: the flags set the Config; the first --rules replaces the default rules and
// each further one adds; issuers parse as Kind/name or group/Kind/name.
func TestBindFlags(t *testing.T) {
	parse := func(args ...string) (Config, error) {
		c := DefaultConfig()
		fs := flag.NewFlagSet("approver", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		BindFlags(fs, &c)
		return c, fs.Parse(args)
	}
	c, err := parse()
	if err != nil || !slices.Equal(c.Rules, []string{RulePodSpec}) || c.DriverIssuer.Name != "csi-ca" || !c.PodCache {
		t.Errorf("the defaults: %+v, %v", c, err)
	}
	c, err = parse("--rules=spiffe", "--rules", "pod-spec,common-name-is-pod-name", "--issuer=Issuer/a", "--issuer=example.com/Signer/b",
		"--driver-issuer=Issuer/team-ca", "--spiffe-trust-domain=cluster.local", "--pod-cache=false")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{RuleSPIFFE, RulePodSpec, RuleCommonNameIsPodName}; !slices.Equal(c.Rules, want) {
		t.Errorf("rules %v, want %v", c.Rules, want)
	}
	if want := []cmmeta.IssuerReference{{Group: "cert-manager.io", Kind: "Issuer", Name: "a"}, {Group: "example.com", Kind: "Signer", Name: "b"}}; !slices.Equal(c.Issuers, want) {
		t.Errorf("issuers %+v", c.Issuers)
	}
	if c.DriverIssuer != (cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: "team-ca"}) || c.PodCache {
		t.Errorf("driver issuer %+v, pod cache %v", c.DriverIssuer, c.PodCache)
	}
	if rules, err := c.PodRules(); err != nil || len(rules) != 3 {
		t.Errorf("PodRules: %d, %v", len(rules), err)
	}
	if c, err = parse("--rules="); err != nil || len(c.Rules) != 0 {
		t.Errorf("--rules= : %v, %v; want none", c.Rules, err)
	}
	if _, err := parse("--issuer=csi-ca"); err == nil {
		t.Error("an issuer without a kind parsed")
	}
}

// TestPodRulesSayWhatIsMissing: a rule without what it needs, or an unknown one, is an error
// naming it, before the approver starts.
func TestPodRulesSayWhatIsMissing(t *testing.T) {
	c := DefaultConfig()
	c.Rules = []string{RuleSPIFFE, "subject-is-pod", RulePodSpec}
	c.DriverName = ""
	_, err := c.PodRules()
	for _, want := range []string{"the spiffe rule needs a --spiffe-trust-domain", `no rule "subject-is-pod"`, "the pod-spec rule needs --driver-name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("PodRules: %v, want it to say %q", err, want)
		}
	}
}
