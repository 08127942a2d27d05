//go:build integration

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

package integration

import (
	"context"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/test/testkit/faults"
)

// upstreamCalls are the calls upstream v0.12.0's manager makes with the driver's client: its
// informer lists and watches the node's requests (by the node-hash label), and it creates and
// deletes requests. Every read by name goes through the informer.
var upstreamCalls = map[string]bool{
	"list certificaterequests by node":  true,
	"watch certificaterequests by node": true,
	"create certificaterequests":        true,
	"delete certificaterequests":        true,
}

// TestEveryDefaultCallHasARow: under default options, with watch cuts and an outage, and then
// with lost create responses too, every call the manager's client makes to the apiserver is one
// that upstream makes or one that a row of docs/upgrading.md's table names ("Calls: `...`"). The
// run without lost responses makes the calls of the rows these faults call for: the outage probe,
// the reads by name that stand in for the suspect watch (only they read by name there: settling
// reads by name too, but only after a lost response) and the start-up access check. With every
// CSILIBDEBUG setting at 0 and the same faults, the calls are upstream's alone (settling a create
// whose answer was lost has no switch: it fixes an upstream bug that costs a second request).
func TestEveryDefaultCallHasARow(t *testing.T) {
	named := callsNamedByRows(t, "../../docs/upgrading.md")
	scenario := faults.Scenario{
		Config:    restConfig,
		Volumes:   8,
		Lifetime:  4 * time.Second,
		Duration:  16 * time.Second,
		WatchCuts: true,
		Outage:    6 * time.Second,
		Seed:      11,
	}
	expectNamed := func(t *testing.T, calls map[string][]string) {
		t.Helper()
		for call, raw := range calls {
			if !upstreamCalls[call] && !named[call] {
				t.Errorf("the manager made the call %q (%s), which upstream never makes and no row of docs/upgrading.md names", call, strings.Join(raw, "; "))
			}
		}
	}
	t.Run("defaults", func(t *testing.T) {
		s := scenario
		s.Name = "calls-default"
		calls := runForCalls(t, s)
		expectNamed(t, calls)
		for _, want := range []string{"get /version", "list certificaterequests by name", "create selfsubjectaccessreviews"} {
			if !named[want] {
				t.Errorf("no row of docs/upgrading.md names %q", want)
			}
			if calls[want] == nil {
				t.Errorf("the run never made %q: it does not exercise that row", want)
			}
		}
	})
	t.Run("defaults, responses lost", func(t *testing.T) {
		s := scenario
		s.Name, s.Settings = "calls-lost", faults.Settings{LostAfter: 0.5, Resource: "certificaterequests"}
		expectNamed(t, runForCalls(t, s))
	})
	t.Run("every CSILIBDEBUG setting at 0", func(t *testing.T) {
		var off []string
		for _, s := range csilibdebug.Settings {
			off = append(off, s.Name+"=0")
		}
		t.Setenv(csilibdebug.EnvironmentVariable, strings.Join(off, ","))
		s := scenario
		s.Name = "calls-upstream"
		for call, raw := range runForCalls(t, s) {
			if !upstreamCalls[call] {
				t.Errorf("with every setting at 0 the manager made the call %q (%s), which upstream never makes", call, strings.Join(raw, "; "))
			}
		}
	})
}

// runForCalls runs the scenario and returns its calls by kubeCall, each with the raw calls
// (faults.CallOf) it covers.
func runForCalls(t *testing.T, s faults.Scenario) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Counts.Refused == 0 || f.Counts.WatchesCut == 0 {
		t.Fatalf("the outage or the watch cuts did not happen (%+v)", f.Counts)
	}
	calls := map[string][]string{}
	counts := map[string]int{}
	for raw, n := range f.Calls {
		call := kubeCall(raw)
		calls[call] = append(calls[call], raw)
		counts[call] += n
	}
	for _, raw := range calls {
		sort.Strings(raw)
	}
	t.Logf("%+v, %d volumes recovered after the outage; calls: %v", f.Counts, len(f.Recovery), counts)
	return calls
}

// kubeCall names a call of faults.CallOf as docs/upgrading.md does: the Kubernetes verb and the
// resource, and for a list or watch of certificaterequests what it selects by (node, volume,
// name); a path that is not a resource's is named by the verb and the path, as "get /version".
func kubeCall(raw string) string {
	method, rest, _ := strings.Cut(raw, " ")
	path, query, _ := strings.Cut(rest, "?")
	params := map[string]string{}
	for _, p := range strings.Split(query, "&") {
		name, value, _ := strings.Cut(p, "=")
		params[name] = value
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var resource, name string
	switch {
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	default:
		return strings.ToLower(method) + " " + path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return strings.ToLower(method) + " " + path
	}
	resource = parts[0]
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	var verb string
	switch method {
	case "GET":
		switch {
		case name != "":
			verb = "get"
		case params["watch"] != "" || hasParam(query, "watch"):
			verb = "watch"
		default:
			verb = "list"
		}
	case "POST":
		verb = "create"
	case "PUT":
		verb = "update"
	case "PATCH":
		verb = "patch"
	case "DELETE":
		verb = "delete"
		if name == "" {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	call := verb + " " + resource
	if verb == "list" || verb == "watch" {
		switch selects := params["labelSelector"] + "," + params["fieldSelector"]; {
		case strings.Contains(selects, "metadata.name"):
			call += " by name"
		case strings.Contains(selects, api.VolumeIDHashLabelKey):
			call += " by volume"
		case strings.Contains(selects, api.NodeIDHashLabelKey):
			call += " by node"
		}
	}
	return call
}

func hasParam(query, name string) bool {
	for _, p := range strings.Split(query, "&") {
		if p == name || strings.HasPrefix(p, name+"=") {
			return true
		}
	}
	return false
}

// callsNamedByRows returns the calls the rows of docs/upgrading.md's table of default-on
// differences name after "Calls:".
func callsNamedByRows(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "### 2a. In a cluster")
	end := strings.Index(text, "### 2b.")
	if start < 0 || end < start {
		t.Fatalf("%s: no section 2a", path)
	}
	calls := map[string]bool{}
	span := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(text[start:end], "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		_, named, ok := strings.Cut(first, "Calls: ")
		if !ok {
			continue
		}
		for _, m := range span.FindAllStringSubmatch(named, -1) {
			calls[m[1]] = true
		}
	}
	if len(calls) == 0 {
		t.Fatalf("%s: no row names its calls", path)
	}
	return calls
}

// TestKubeCall pins the names the table uses.
func TestKubeCall(t *testing.T) {
	for raw, want := range map[string]string{
		"GET /version": "get /version",
		"POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews":                                                               "create selfsubjectaccessreviews",
		"GET /apis/cert-manager.io/v1/certificaterequests?labelSelector=" + api.NodeIDHashLabelKey + "&limit":                       "list certificaterequests by node",
		"GET /apis/cert-manager.io/v1/certificaterequests?labelSelector=" + api.NodeIDHashLabelKey + "&watch":                       "watch certificaterequests by node",
		"GET /apis/cert-manager.io/v1/namespaces/ns/certificaterequests?fieldSelector=metadata.name":                                "list certificaterequests by name",
		"GET /apis/cert-manager.io/v1/certificaterequests?labelSelector=" + api.NodeIDHashLabelKey + "," + api.VolumeIDHashLabelKey: "list certificaterequests by volume",
		"POST /apis/cert-manager.io/v1/namespaces/ns/certificaterequests":                                                           "create certificaterequests",
		"DELETE /apis/cert-manager.io/v1/namespaces/ns/certificaterequests/req-1":                                                   "delete certificaterequests",
		"GET /apis/cert-manager.io/v1/namespaces/ns/certificaterequests/req-1":                                                      "get certificaterequests",
		"PATCH /api/v1/namespaces/ns/pods/p/status":                                                                                 "patch pods/status",
	} {
		if got := kubeCall(raw); got != want {
			t.Errorf("kubeCall(%q) = %q, want %q", raw, got, want)
		}
	}
}
