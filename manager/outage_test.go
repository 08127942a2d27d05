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
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/apihealth"
	"github.com/cert-manager/csi-lib/test/testkit"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

var connectionRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// refuseWhile makes creates and the version probe fail with a refused connection while down is
// set, as an apiserver that is not running would.
func refuseWhile(e *env, down *atomic.Bool) {
	refuse := func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, connectionRefused
		}
		return false, nil, nil
	}
	e.client.PrependReactor("create", "certificaterequests", refuse)
	e.client.PrependReactor("get", "version", refuse)
}

// A loop whose attempt could not reach the apiserver attempts again as soon as a probe finds it
// back, not at the end of its backoff step; one whose failure the first probe contradicts waits
// its step in full.
func TestLoopAttemptsAsSoonAsTheApiserverIsBack(t *testing.T) {
	t.Run("outage", func(t *testing.T) {
		e := newEnv(t, nil)
		var down atomic.Bool
		down.Store(true)
		refuseWhile(e, &down)
		e.register("v1", true)
		e.start()
		if d := e.nextTimer(); d != issueTimeout {
			t.Fatalf("expected an attempt, got a %v timer", d)
		}
		// The loop waits its 30 s step; the probe failed and waits its interval.
		got := map[time.Duration]bool{e.nextTimer(): true, e.nextTimer(): true}
		if !got[30*time.Second] || !got[apihealth.ProbeInterval] {
			t.Fatalf("timers %v, want the backoff step and the probe interval", got)
		}
		e.poll("the loop and the prober to wait", func() bool { return e.clock.Waiters() == 2 })

		down.Store(false)
		e.clock.Step(apihealth.ProbeInterval)
		if d := e.nextTimer(); d != issueTimeout {
			t.Fatalf("the apiserver is back but the loop did not attempt (next timer %v)", d)
		}
		e.issuePending()
		e.poll("the certificate", func() bool { return e.writtenCount() == 1 })
		if e.clock.Since(start) != apihealth.ProbeInterval {
			t.Fatalf("renewed %v after the failure, want %v", e.clock.Since(start), apihealth.ProbeInterval)
		}
	})
	t.Run("a failure the probe contradicts", func(t *testing.T) {
		e := newEnv(t, nil)
		testkit.StampLikeAPIServer(e.client, e.clock.Now)
		var down atomic.Bool
		refuseWhile(e, &down)
		refused := false
		e.client.PrependReactor("create", "certificaterequests", func(k8stesting.Action) (bool, runtime.Object, error) {
			if !refused {
				refused = true
				return true, nil, connectionRefused
			}
			return false, nil, nil
		})
		e.register("v1", true)
		e.start()
		e.expectAttemptThenWait(30 * time.Second)
		e.poll("the probe, which the apiserver answers", func() bool { return versionReads(e) == 1 })
		e.stepNotYet(30 * time.Second)
		e.clock.Step(time.Millisecond)
		if d := e.nextTimer(); d != issueTimeout {
			t.Fatalf("expected the attempt after the full step, got a %v timer", d)
		}
		// The attempt that creates the request is the one at the end of the step, not one that
		// the probe's answer started a moment before it.
		if pending := e.waitForPending(); !pending.CreationTimestamp.Time.Equal(start.Add(30 * time.Second)) {
			t.Fatalf("the request was created at %v, want at the end of the step, %v", pending.CreationTimestamp.Time, start.Add(30*time.Second))
		}
	})
}

// versionReads counts the probes of the apiserver's version the clientset received.
func versionReads(e *env) int {
	n := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "version" {
			n++
		}
	}
	return n
}

func TestUnreachable(t *testing.T) {
	for err, want := range map[error]bool{
		connectionRefused:                    true,
		connectionReset:                      true,
		errors.New("generating private key"): false,
		errAttemptTimeout:                    false,
	} {
		if got := apicall.Unreachable(err); got != want {
			t.Errorf("apicall.Unreachable(%v) = %v, want %v", err, got, want)
		}
	}
}
