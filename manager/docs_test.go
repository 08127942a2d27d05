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

package manager

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/storage"
)

// requiredOnly is Options with the required fields set and nothing else.
func requiredOnly() Options {
	log := logr.Discard()
	return Options{
		Client:             fake.NewClientset(),
		MetadataReader:     storage.NewMemoryFS(),
		Log:                &log,
		NodeID:             "node",
		GeneratePrivateKey: func(metadata.Metadata) (crypto.PrivateKey, error) { return nil, nil },
		GenerateRequest:    func(metadata.Metadata) (*CertificateRequestBundle, error) { return nil, nil },
		SignRequest: func(metadata.Metadata, crypto.PrivateKey, *x509.CertificateRequest) ([]byte, error) {
			return nil, nil
		},
		WriteKeypair: func(metadata.Metadata, crypto.PrivateKey, []byte, []byte) error { return nil },
	}
}

// markdownTable returns the rows (cells trimmed) of the first table after the line containing
// marker in the Markdown file, header and separator left out.
func markdownTable(t *testing.T, file, marker string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("%s: no %q", file, marker)
	}
	var rows [][]string
	inTable := false
	for _, line := range strings.Split(text[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 3 {
		t.Fatalf("%s: no table after %q", file, marker)
	}
	return rows[2:]
}

// backoffText is a backoff as the docs write it: "30 s, ×2, jitter 0.5, cap 5 min".
func backoffText(b *wait.Backoff) string {
	return fmt.Sprintf("%s, ×%g, jitter %g, cap %s", durationText(b.Duration), b.Factor, b.Jitter, durationText(b.Cap))
}

// durationText writes d as the docs do: "1 s", "10 s", "5 min".
func durationText(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

func sameFunc(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }

// TestOptionsTableMatchesTheCode: docs/options.md's table of manager.Options has one row per
// field, and each row's default is what complete() gives a zero field.
func TestOptionsTableMatchesTheCode(t *testing.T) {
	done, err := requiredOnly().complete()
	if err != nil {
		t.Fatal(err)
	}
	requiredFails := func(clear func(*Options)) func(string) error {
		return func(cell string) error {
			if cell != "required" {
				return fmt.Errorf("documented default %q, but the code requires the field", cell)
			}
			o := requiredOnly()
			clear(&o)
			if _, err := o.complete(); err == nil {
				return fmt.Errorf("documented as required, but complete() accepts it unset")
			}
			return nil
		}
	}
	startsWith := func(want string) func(string) error {
		return func(cell string) error {
			if !strings.HasPrefix(cell, want) {
				return fmt.Errorf("documented default %q, the code's is %q", cell, want)
			}
			return nil
		}
	}
	nilDefault := func(isNil bool, word string) func(string) error {
		return func(cell string) error {
			if !isNil {
				return fmt.Errorf("the code fills in a default, the docs say %q", cell)
			}
			return startsWith(word)(cell)
		}
	}
	_, realClock := done.Clock.(clock.RealClock)
	checks := map[string]func(string) error{
		"Client":         requiredFails(func(o *Options) { o.Client = nil }),
		"MetadataReader": requiredFails(func(o *Options) { o.MetadataReader = nil }),
		"Log":            requiredFails(func(o *Options) { o.Log = nil }),
		"NodeID":         requiredFails(func(o *Options) { o.NodeID = "" }),
		"GeneratePrivateKey": requiredFails(func(o *Options) {
			o.GeneratePrivateKey, o.GenerateRequest, o.SignRequest, o.WriteKeypair = nil, nil, nil, nil
		}),
		"ClientForMetadata": func(cell string) error {
			c, err := done.ClientForMetadata(metadata.Metadata{})
			if err != nil || c != done.Client {
				return fmt.Errorf("the default ClientForMetadata does not return Client")
			}
			return startsWith("returns `Client`")(cell)
		},
		"Clock": func(cell string) error {
			if !realClock {
				return fmt.Errorf("the default clock is %T", done.Clock)
			}
			return startsWith("real clock")(cell)
		},
		"MaxRequestsPerVolume": startsWith(strconv.Itoa(done.MaxRequestsPerVolume)),
		"ReadyToRequest": func(cell string) error {
			if !sameFunc(done.ReadyToRequest, AlwaysReadyToRequest) {
				return fmt.Errorf("the default gate is not AlwaysReadyToRequest")
			}
			return startsWith("`AlwaysReadyToRequest`")(cell)
		},
		"RenewalBackoffConfig":      startsWith(backoffText(done.RenewalBackoffConfig)),
		"GateBackoffConfig":         startsWith(backoffText(done.GateBackoffConfig)),
		"GatePollInterval":          startsWith(strconv.Itoa(int(done.GatePollInterval)) + " (off"),
		"Metrics":                   nilDefault(done.Metrics == nil, "none"),
		"RenewalJitter":             startsWith(strconv.FormatFloat(done.RenewalJitter, 'g', -1, 64) + " (off)"),
		"MaxConcurrentIssuances":    startsWith(fmt.Sprintf("%d (`DefaultMaxConcurrentIssuances`)", done.MaxConcurrentIssuances)),
		"IssuanceRateLimit":         nilDefault(done.IssuanceRateLimit == nil, "nil"),
		"PodCondition":              nilDefault(done.PodCondition == nil, "nil"),
		"EventRecorder":             nilDefault(done.EventRecorder == nil, "none"),
		"DisableOriginAnnotations":  startsWith(strconv.FormatBool(done.DisableOriginAnnotations)),
		"DisableAccessCheck":        startsWith(strconv.FormatBool(done.DisableAccessCheck)),
		"DisableOutageProbe":        startsWith(strconv.FormatBool(done.DisableOutageProbe)),
		"DisableWatchFallbackReads": startsWith(strconv.FormatBool(done.DisableWatchFallbackReads)),
	}
	if done.MaxConcurrentIssuances != DefaultMaxConcurrentIssuances {
		t.Errorf("complete() gives MaxConcurrentIssuances %d, not DefaultMaxConcurrentIssuances", done.MaxConcurrentIssuances)
	}

	documented := map[string]bool{}
	field := regexp.MustCompile("`([A-Za-z]+)`")
	for _, row := range markdownTable(t, "../docs/options.md", "`manager.Options` (defaults") {
		names := field.FindAllStringSubmatch(row[0], -1)
		if len(names) == 0 || len(row) < 2 {
			t.Errorf("docs/options.md: a row without a field: %q", row)
			continue
		}
		for _, n := range names {
			documented[n[1]] = true
		}
		check, ok := checks[names[0][1]]
		if !ok {
			t.Errorf("docs/options.md documents %s, which this test does not check: add it", names[0][1])
			continue
		}
		if err := check(row[1]); err != nil {
			t.Errorf("docs/options.md, %s: %v", names[0][1], err)
		}
	}
	opts := reflect.TypeOf(Options{})
	for i := 0; i < opts.NumField(); i++ {
		if f := opts.Field(i); f.IsExported() && !documented[f.Name] {
			t.Errorf("docs/options.md has no row for Options.%s", f.Name)
		}
	}
}

// TestUpgradingTableMatchesTheCode: every option docs/upgrading.md's table of default-on
// differences names to restore upstream exists, and the defaults it quotes are the code's.
func TestUpgradingTableMatchesTheCode(t *testing.T) {
	done, err := requiredOnly().complete()
	if err != nil {
		t.Fatal(err)
	}
	rows := markdownTable(t, "../docs/upgrading.md", "### 2a. In a cluster")
	fields := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeOf(Options{}), reflect.TypeOf(storage.FilesystemOptions{})} {
		for i := 0; i < typ.NumField(); i++ {
			fields[typ.Field(i).Name] = true
		}
	}
	setting := regexp.MustCompile("([A-Z][A-Za-z]+): [^`}]+")
	operatorSetting := regexp.MustCompile("^`([a-z]+)=0`$")
	switches := map[string]bool{}
	for _, row := range rows {
		if len(row) != 5 {
			t.Fatalf("docs/upgrading.md: a row with %d cells, want 5: %q", len(row), row)
		}
		options := setting.FindAllStringSubmatch(row[3], -1)
		sw := operatorSetting.FindStringSubmatch(row[4])
		switch {
		case len(options) == 0 && row[4] == "none":
			continue
		case len(options) != 1 || sw == nil:
			t.Errorf("docs/upgrading.md: a row names %d options and the switch %q; want one option and its `name=0`, or none and none: %q", len(options), row[4], row[0])
			continue
		}
		field := options[0][1]
		if !fields[field] {
			t.Errorf("docs/upgrading.md names %q to restore upstream, which is no option field", field)
		}
		var s *csilibdebug.Setting
		for i := range csilibdebug.Settings {
			if csilibdebug.Settings[i].Name == sw[1] {
				s = &csilibdebug.Settings[i]
			}
		}
		if s == nil {
			t.Errorf("docs/upgrading.md names the switch %s, which CSILIBDEBUG does not have", row[4])
			continue
		}
		if !strings.HasSuffix(s.Option, "."+field) {
			t.Errorf("docs/upgrading.md pairs %s with the option %s; the code pairs it with %s", row[4], field, s.Option)
		}
		switches[s.Name] = true
	}
	for _, s := range csilibdebug.Settings {
		if !switches[s.Name] {
			t.Errorf("docs/upgrading.md's table has no row for the CSILIBDEBUG setting %s (%s)", s.Name, s.Option)
		}
	}

	cell := func(prefix string) string {
		for _, row := range rows {
			if strings.HasPrefix(row[0], prefix) {
				return row[0]
			}
		}
		t.Fatalf("docs/upgrading.md: no row starting %q", prefix)
		return ""
	}
	if want := fmt.Sprintf("At most %d attempts", done.MaxConcurrentIssuances); !strings.Contains(cell("At most"), want) {
		t.Errorf("docs/upgrading.md's admission row does not say %q", want)
	}
	reviews := 0
	for _, r := range requiredAccess(done, true) {
		reviews += len(r.Verbs)
	}
	if want := fmt.Sprintf("(%d with the defaults)", reviews); !strings.Contains(cell("At start, one SelfSubjectAccessReview"), want) {
		t.Errorf("docs/upgrading.md's access check row does not say %q", want)
	}
	if want := durationText(MetricSeriesRetention) + " (`manager.MetricSeriesRetention`)"; !strings.Contains(cell("A volume's per-volume metric series"), want) {
		t.Errorf("docs/upgrading.md's series row does not say %q", want)
	}
	if done.GatePollInterval > 0 || done.EventRecorder != nil || done.PodCondition != nil || done.IssuanceRateLimit != nil || done.RenewalJitter != 0 {
		t.Errorf("an option docs/upgrading.md lists as off by default is on: %+v", done)
	}
}

// TestCSILIBDEBUGTableMatchesTheCode: docs/csilibdebug.md's table lists every setting, in order,
// with the Go option and the release the code gives it.
func TestCSILIBDEBUGTableMatchesTheCode(t *testing.T) {
	rows := markdownTable(t, "../docs/csilibdebug.md", "## The settings")
	span := regexp.MustCompile("`([^`]+)`")
	if len(rows) != len(csilibdebug.Settings) {
		t.Fatalf("docs/csilibdebug.md lists %d settings, the code has %d", len(rows), len(csilibdebug.Settings))
	}
	for i, s := range csilibdebug.Settings {
		row := rows[i]
		if len(row) != 4 {
			t.Fatalf("docs/csilibdebug.md: a row with %d cells, want 4: %q", len(row), row)
		}
		name, option := span.FindStringSubmatch(row[0]), span.FindStringSubmatch(row[2])
		if name == nil || name[1] != s.Name || option == nil || option[1] != s.Option || row[3] != s.Introduced {
			t.Errorf("docs/csilibdebug.md's row %d is %q; the code has %s, %s, %s", i+1, row, s.Name, s.Option, s.Introduced)
		}
	}
}
