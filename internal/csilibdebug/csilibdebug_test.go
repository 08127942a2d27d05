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

package csilibdebug

import (
	"maps"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Values{
		"":                                      {},
		" , ":                                   {},
		"accesscheck=0":                         {AccessCheck: false},
		"accesscheck=0, outageprobe=1":          {AccessCheck: false, OutageProbe: true},
		" startupsweep=0 ,watchfallbackreads=0": {StartupSweep: false, WatchFallbackReads: false},
	} {
		got, err := Parse(in)
		if err != nil {
			t.Errorf("Parse(%q): %v", in, err)
			continue
		}
		if !maps.Equal(got, want) {
			t.Errorf("Parse(%q) = %v, want %v", in, got, want)
		}
	}
}

// A bad value is an error that names the variable and what is wrong, never ignored.
func TestParseRefusesWhatItDoesNotKnow(t *testing.T) {
	for in, want := range map[string]string{
		"acesscheck=0":                `unknown setting "acesscheck"; the settings are issuancelimit, originannotations, accesscheck, startupsweep, outageprobe, watchfallbackreads`,
		"accesscheck=false":           `setting "accesscheck" has the value "false": want 0 (upstream's behaviour) or 1 (the default)`,
		"accesscheck= 0":              `setting "accesscheck" has the value " 0"`,
		"accesscheck":                 `"accesscheck" is not name=value`,
		"accesscheck=0,accesscheck=1": `setting "accesscheck" is given twice`,
		"AccessCheck=0":               `unknown setting "AccessCheck"`,
	} {
		_, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) accepted it", in)
			continue
		}
		if !strings.HasPrefix(err.Error(), EnvironmentVariable+": ") || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %q, want it to say %q", in, err, want)
		}
	}
}

// The driver's code wins over the variable, and the variable over the default.
func TestOff(t *testing.T) {
	for _, tc := range []struct {
		env        string
		offInCode  bool
		wantOff    bool
		wantLogged string
	}{
		{"", false, false, "1 (default)"},
		{"accesscheck=1", false, false, "1 (CSILIBDEBUG)"},
		{"accesscheck=0", false, true, "0 (CSILIBDEBUG)"},
		{"", true, true, "0 (manager.Options.DisableAccessCheck)"},
		{"accesscheck=0", true, true, "0 (manager.Options.DisableAccessCheck; accesscheck=0 ignored)"},
		{"accesscheck=1", true, true, "0 (manager.Options.DisableAccessCheck; accesscheck=1 ignored)"},
		{"outageprobe=0", false, false, "1 (default)"},
	} {
		v, err := Parse(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		off, logged := v.Off(AccessCheck, tc.offInCode)
		if off != tc.wantOff || logged != tc.wantLogged {
			t.Errorf("CSILIBDEBUG=%q, off in code %v: (%v, %q), want (%v, %q)", tc.env, tc.offInCode, off, logged, tc.wantOff, tc.wantLogged)
		}
	}
}

// A value the driver set in code that is neither on nor off is logged as the driver's.
func TestSetInCode(t *testing.T) {
	v, err := Parse("issuancelimit=0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.SetInCode(IssuanceLimit, "64"), "64 (manager.Options.MaxConcurrentIssuances; issuancelimit=0 ignored)"; got != want {
		t.Errorf("SetInCode = %q, want %q", got, want)
	}
	if got, want := (Values{}).SetInCode(IssuanceLimit, "64"), "64 (manager.Options.MaxConcurrentIssuances)"; got != want {
		t.Errorf("SetInCode without the setting = %q, want %q", got, want)
	}
}

// An error quotes at most 32 bytes of what it names: a secret pasted into the variable by
// mistake is not logged whole.
func TestParseErrorsQuoteAShortPrefix(t *testing.T) {
	secret := "token=eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.payload.signature"
	_, err := Parse(secret)
	if err == nil || strings.Contains(err.Error(), "payload.signature") {
		t.Fatalf("Parse: %v, want an error without the whole item", err)
	}
	_, err = Parse("accesscheck=" + secret)
	if err == nil || strings.Contains(err.Error(), "payload.signature") {
		t.Fatalf("Parse: %v, want an error without the whole value", err)
	}
}

func TestFromEnvironment(t *testing.T) {
	t.Setenv(EnvironmentVariable, "originannotations=0")
	raw, v, err := FromEnvironment()
	if err != nil || raw != "originannotations=0" || !maps.Equal(v, Values{OriginAnnotations: false}) {
		t.Fatalf("FromEnvironment() = %q, %v, %v", raw, v, err)
	}
	t.Setenv(EnvironmentVariable, "originannotations=no")
	if _, _, err := FromEnvironment(); err == nil {
		t.Fatal("a bad value in the environment was accepted")
	}
}

// Every setting has an option and a release.
func TestSettingsAreDocumentedInCode(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings {
		if s.Name == "" || s.Option == "" || !strings.HasPrefix(s.Introduced, "v0.12.0-fork.") || seen[s.Name] {
			t.Errorf("setting %+v: a name (once), an option and a release are needed", s)
		}
		seen[s.Name] = true
	}
}
