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
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"

	"github.com/cert-manager/csi-lib/approval"
	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/metadata"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// Each CSILIBDEBUG setting restores upstream's behaviour as its Go option does, so an operator
// can switch a difference off without a rebuild; what the driver set in code wins; a bad value
// fails NewManager. The ways to turn a setting off, for the tests below.
var turnedOff = map[string]func(t *testing.T, name string, disable *bool){
	"Options": func(_ *testing.T, _ string, disable *bool) { *disable = true },
	"CSILIBDEBUG": func(t *testing.T, name string, _ *bool) {
		t.Setenv(csilibdebug.EnvironmentVariable, name+"=0")
	},
}

// The origin annotations: off, a request carries exactly the bundle's annotations.
func TestOriginAnnotationsOffKeepsTheBundlesAlone(t *testing.T) {
	for way, turnOff := range turnedOff {
		t.Run(way, func(t *testing.T) {
			bundleAnnotations := map[string]string{"a": "b", approval.PodNameAnnotationKey: "someone-else"}
			e := newEnv(t, func(o *Options) { turnOff(t, csilibdebug.OriginAnnotations, &o.DisableOriginAnnotations) })
			generate := e.opts.GenerateRequest
			e.opts.GenerateRequest = func(meta metadata.Metadata) (*CertificateRequestBundle, error) {
				b, err := generate(meta)
				if err == nil {
					b.Annotations = bundleAnnotations
				}
				return b, err
			}
			e.register("v1", false)
			e.start()
			e.manageInBackground("v1")
			req := e.waitForPending()
			if !maps.Equal(req.Annotations, bundleAnnotations) {
				t.Errorf("annotations = %v, want the bundle's %v", req.Annotations, bundleAnnotations)
			}
		})
	}
}

// The access check: off, no review is sent; CSILIBDEBUG's 1 does not turn on what the driver's
// code turned off.
func TestAccessCheckOffAsksNothing(t *testing.T) {
	ways := maps.Clone(turnedOff)
	ways["code wins over accesscheck=1"] = func(t *testing.T, _ string, disable *bool) {
		t.Setenv(csilibdebug.EnvironmentVariable, csilibdebug.AccessCheck+"=1")
		*disable = true
	}
	for way, turnOff := range ways {
		t.Run(way, func(t *testing.T) {
			cfg, rs := newReviewServer(t, nil)
			e, rbac := chartEnv(t, testkit.ChartVerbs, func(o *Options) { turnOff(t, csilibdebug.AccessCheck, &o.DisableAccessCheck) })
			e.opts.Client = accessClient{RBACClient: rbac, discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
			m := e.start()
			waitClosed(t, m.accessChecked, "the (disabled) access check's end")
			if n := rs.reviews.Load(); n != 0 {
				t.Fatalf("%d reviews sent", n)
			}
		})
	}
	t.Run("on", func(t *testing.T) { // the control: the same setup sends reviews
		t.Setenv(csilibdebug.EnvironmentVariable, csilibdebug.AccessCheck+"=1")
		cfg, rs := newReviewServer(t, nil)
		e, rbac := chartEnv(t, testkit.ChartVerbs, nil)
		e.opts.Client = accessClient{RBACClient: rbac, discovery: discovery.NewDiscoveryClientForConfigOrDie(cfg)}
		waitClosed(t, e.start().accessChecked, "the access check's end")
		if rs.reviews.Load() == 0 {
			t.Fatal("no review sent with accesscheck=1")
		}
	})
}

// The issuance limit: issuancelimit=0 lets one more attempt than the default limit past the
// gate at once, as upstream; a limit the driver set in code stays.
func TestIssuanceLimitOff(t *testing.T) {
	t.Run("CSILIBDEBUG", func(t *testing.T) {
		t.Setenv(csilibdebug.EnvironmentVariable, csilibdebug.IssuanceLimit+"=0")
		vols := ids("unlimited", DefaultMaxConcurrentIssuances+1)
		e := newEnv(t, nil)
		e.start()
		for _, id := range vols {
			e.register(id, false)
			e.m.ManageVolume(id)
		}
		e.poll("every volume's request, none signed", func() bool { return e.pendingCount() == len(vols) })
	})
	t.Run("code wins over issuancelimit=0", func(t *testing.T) {
		t.Setenv(csilibdebug.EnvironmentVariable, csilibdebug.IssuanceLimit+"=0")
		vols := ids("cap", 6)
		e := newEnv(t, withExtendedMetrics(func(o *Options) { o.MaxConcurrentIssuances = 3 }))
		p := newInFlightProbe(e, vols...)
		e.start()
		for _, id := range vols {
			e.register(id, false)
			e.m.ManageVolume(id)
		}
		e.poll("three attempts to wait for admission", func() bool { return e.gauge(waitingGauge) == 3 })
		signOneByOne(e, p, len(vols), 3)
	})
}

// The outage probe: off, a loop whose attempt could not reach the apiserver waits its renewal
// backoff step in full, as upstream, and the apiserver is never asked for its version.
func TestOutageProbeOffWaitsTheStep(t *testing.T) {
	for way, turnOff := range turnedOff {
		t.Run(way, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { turnOff(t, csilibdebug.OutageProbe, &o.DisableOutageProbe) })
			var down atomic.Bool
			down.Store(true)
			refuseWhile(e, &down)
			e.register("v1", true)
			e.start()
			e.expectAttemptThenWait(30 * time.Second) // no probe interval beside it
			down.Store(false)
			e.stepNotYet(30 * time.Second)
			e.clock.Step(time.Millisecond)
			if d := e.nextTimer(); d != issueTimeout {
				t.Fatalf("expected the attempt after the full step, got a %v timer", d)
			}
			for _, a := range e.client.Actions() {
				if a.GetResource().Resource == "version" {
					t.Fatalf("the apiserver was probed: %v", a)
				}
			}
		})
	}
}

// The fallback reads: off, a wait whose watch is suspect reads nothing past the informer, as
// upstream. The watch is cut before the publish, whose wait's first look, which runs before it
// can see its context end, decides whether it sets the direct read's timer; on is the control.
func TestWatchFallbackReadsOff(t *testing.T) {
	ways := maps.Clone(turnedOff)
	ways["on"] = func(*testing.T, string, *bool) {}
	for way, turnOff := range ways {
		t.Run(way, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { turnOff(t, csilibdebug.WatchFallbackReads, &o.DisableWatchFallbackReads) })
			cut := cuttableInformerWatch(e)
			e.register("v1", false)
			m := e.start()
			e.waitInformerLive()
			cut()
			e.poll("the watch to be suspect", watchSuspect(m))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := m.ManageVolumeImmediate(ctx, "v1")
				done <- err
			}()
			e.poll("the publish to wait for its request", func() bool { return m.issuance.requests.Waiting() == 1 })
			cancel()
			<-done
			directRead := false
			for len(e.clock.Timers) > 0 {
				directRead = directRead || <-e.clock.Timers == certrequests.DirectReadInterval
			}
			if want := way == "on"; directRead != want {
				t.Fatalf("the wait set a direct read's timer: %v, want %v", directRead, want)
			}
		})
	}
}

// NewManager logs, once, the value each setting took and where it came from.
func TestStartUpLogsEverySetting(t *testing.T) {
	t.Setenv(csilibdebug.EnvironmentVariable, "outageprobe=0,accesscheck=1,issuancelimit=0")
	lines := &testkit.LogLines{}
	log := lines.Logger()
	e := newEnv(t, func(o *Options) {
		o.Log = &log
		o.DisableOriginAnnotations = true
		o.MaxConcurrentIssuances = 64
	})
	e.start()
	got := lines.Matching("Behaviours that differ from upstream v0.12.0")
	if len(got) != 1 {
		t.Fatalf("%d start-up lines, want 1: %v", len(got), got)
	}
	for _, want := range []string{
		`"CSILIBDEBUG"="outageprobe=0,accesscheck=1,issuancelimit=0"`,
		`"issuancelimit"="64 (manager.Options.MaxConcurrentIssuances; issuancelimit=0 ignored)"`,
		`"originannotations"="0 (manager.Options.DisableOriginAnnotations)"`,
		`"accesscheck"="1 (CSILIBDEBUG)"`,
		`"outageprobe"="0 (CSILIBDEBUG)"`,
		`"watchfallbackreads"="1 (default)"`,
	} {
		if !strings.Contains(got[0], want) {
			t.Errorf("the start-up line\n%s\ndoes not say %s", got[0], want)
		}
	}
}

// A bad value fails NewManager with an error naming it, after upstream's own checks.
func TestBadCSILIBDEBUGFailsNewManager(t *testing.T) {
	t.Setenv(csilibdebug.EnvironmentVariable, "outageprobe=off")
	e := newEnv(t, nil)
	_, err := NewManager(e.opts)
	if err == nil || !strings.Contains(err.Error(), `CSILIBDEBUG: setting "outageprobe" has the value "off"`) {
		t.Fatalf("NewManager: %v, want the bad setting named", err)
	}
	log := logr.Discard()
	if _, err := NewManager(Options{Log: &log}); err == nil || err.Error() != "client must be set" {
		t.Fatalf("NewManager without a client: %v, want upstream's first check", err)
	}
}
