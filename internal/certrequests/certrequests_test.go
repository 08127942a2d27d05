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

package certrequests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"
	testclock "k8s.io/utils/clock/testing"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/apihealth"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/cert-manager/csi-lib/test/testkit"
)

var (
	connectionRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	connectionReset   = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
)

// A create that finds the apiserver unreachable tells the one owner of its health, which makes
// the watch suspect, and starts no probe: only a renewal attempt that fails starts one. A create
// the apiserver answers, even with a refusal, does neither.
func TestUnreachableCreateMakesTheWatchSuspect(t *testing.T) {
	for name, tc := range map[string]struct {
		err     error
		suspect bool
	}{
		"refused connection": {connectionRefused, true},
		"a 500":              {apierrors.NewInternalError(errors.New("etcd")), false},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("create", "certificaterequests", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			life := lifetime.New()
			defer life.End()
			// The probe, if one started, would answer when the test ends.
			health := apihealth.New(testclock.NewFakeClock(time.Now()), func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}, life, nil)
			v, err := New(client, testclock.NewFakeClock(time.Now()), "node-hash", health, true, func(string) {}, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
			if _, err := v.Create(context.Background(), client, apicall.DriverAccount, req); !errors.Is(err, tc.err) {
				t.Fatalf("the create's error %v, want %v", err, tc.err)
			}
			if suspect, _ := health.WatchSuspect(); suspect != tc.suspect || health.Probing() {
				t.Fatalf("watch suspect %v, probing %v; want %v, false", suspect, health.Probing(), tc.suspect)
			}
		})
	}
}

// TestCreateOutcomeUnknown: only a create that may have reached the apiserver is unknown: no
// answer (a broken connection, a deadline) or a 5xx. A refused connection, an answer below 500
// and a call the client's own rate limiter held back (client-go's text) never created anything.
func TestCreateOutcomeUnknown(t *testing.T) {
	gr := schema.GroupResource{Group: "cert-manager.io", Resource: "certificaterequests"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection reset", connectionReset, true},
		{"deadline", context.DeadlineExceeded, true},
		{"internal error", apierrors.NewInternalError(errors.New("x")), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "create", 1), true},
		{"connection refused", refused, false},
		{"forbidden", apierrors.NewForbidden(gr, "x", nil), false},
		{"too many requests", apierrors.NewTooManyRequests("x", 1), false},
		{"client rate limiter", fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline")), false},
	} {
		if got := CreateOutcomeUnknown(tc.err); got != tc.want {
			t.Errorf("%s: CreateOutcomeUnknown = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// While the informer's watch is suspect a wait reads its request from the apiserver every
// DirectReadInterval; a View made without fallback reads relies on the informer alone. The watch
// is marked suspect before the wait starts and stays so (the informer is not started), and the
// wait's context ends it: its first look, which runs before it can see that end, decides whether
// it sets the direct read's timer.
func TestFallbackReadsOnlyWhenAsked(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		t.Run(fmt.Sprintf("fallback reads %v", fallback), func(t *testing.T) {
			client := fake.NewClientset()
			clk := testkit.NewRecordingClock(time.Now())
			health := apihealth.New(clk, nil, nil, nil)
			v, err := New(client, clk, "node-hash", health, fallback, func(string) {}, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			// The informer is not started, so no watch it opens can clear the mark; the wait
			// reads its (empty) cache.
			health.CallFailed(connectionRefused)
			waitCtx, endWait := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, _, err := v.Wait(waitCtx, &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}})
				done <- err
			}()
			endWait()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the wait ended with %v, want its context's end", err)
			}
			directRead := false
			for len(clk.Timers) > 0 {
				directRead = directRead || <-clk.Timers == DirectReadInterval
			}
			if directRead != fallback {
				t.Fatalf("the wait set a direct read's timer: %v, want %v", directRead, fallback)
			}
		})
	}
}

// A settling whose create under the same name gets no answer either (a refused connection, which
// for a first create would mean the request never left) leaves the first create's outcome
// unknown: the request keeps its place in this process's creation order, which orders it among
// the volume's requests whose CreationTimestamps tie. Request "c" is created first and "b"
// after it: the two tie (the fake clientset sets no CreationTimestamp), so ordered by creation
// they are c, b; a forgotten place would order them by name, b first.
func TestUnansweredSettlingKeepsTheCreationOrder(t *testing.T) {
	life := lifetime.New()
	defer life.End()
	clk := testclock.NewFakeClock(time.Now())
	// No probe starts here: only a failed renewal attempt starts one.
	health := apihealth.New(clk, func(context.Context) error { return nil }, life, nil)
	client := fake.NewClientset()
	v, err := New(client, clk, "node-hash", health, true, func(string) {}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	request := func(name string) *cmapi.CertificateRequest {
		return &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
			api.NodeIDHashLabelKey:   "node-hash",
			api.VolumeIDHashLabelKey: util.HashIdentifier("vol"),
		}}}
	}
	ctx := context.Background()
	if _, err := v.Create(ctx, client, apicall.DriverAccount, request("c")); err != nil {
		t.Fatal(err)
	}
	// The first create of "b", whose answer was lost.
	lost := fake.NewClientset()
	lost.PrependReactor("create", "certificaterequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, connectionReset
	})
	if _, err := v.Create(ctx, lost, apicall.DriverAccount, request("b")); !CreateOutcomeUnknown(err) {
		t.Fatalf("the lost create = %v, want an unknown outcome", err)
	}
	refusing := fake.NewClientset()
	refusing.PrependReactor("create", "certificaterequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, connectionRefused
	})
	if _, err := v.Settle(ctx, refusing, "someone", request("b"), false); !errors.Is(err, ErrStillUnknown) {
		t.Fatalf("settling = %v, want ErrStillUnknown", err)
	}
	// The first create of "b" had landed after all.
	if err := client.Tracker().Add(request("b")); err != nil {
		t.Fatal(err)
	}
	reqs, err := v.ForVolumeFromAPIServer(ctx, "vol")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].Name != "c" || reqs[1].Name != "b" {
		names := []string{}
		for _, req := range reqs {
			names = append(names, req.Name)
		}
		t.Fatalf("the volume's requests are %v, want [c b]: the place of b in the creation order was forgotten", names)
	}
}

// TestCreateOutcomeUnknownOfClientGosOwnErrors: the errors client-go's REST client itself gives
// for a create that never left (a refused connection, to a loopback port nothing listens on;
// its rate limiter's wait that would outlast the call's deadline) are known, so that a client-go
// whose texts change fails here rather than in a create counted as maybe made.
func TestCreateOutcomeUnknownOfClientGosOwnErrors(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	listener.Close() // nothing listens there now: a connection is refused
	client, err := cmclient.NewForConfig(&rest.Config{
		Host:        "http://" + addr,
		RateLimiter: flowcontrol.NewTokenBucketRateLimiter(0.001, 1), // one token, the next in 1,000 s
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func() error {
		req := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"}}
		_, err := client.CertmanagerV1().CertificateRequests("ns").Create(ctx, req, metav1.CreateOptions{})
		return err
	}
	for _, what := range []string{"a refused connection", "the rate limiter's wait"} {
		err := create()
		if err == nil {
			t.Fatalf("%s: the create succeeded", what)
		}
		if CreateOutcomeUnknown(err) {
			t.Errorf("%s (%v): CreateOutcomeUnknown = true, want false", what, err)
		}
	}
}

// TestSortByCreationIsOneOrder: requests created in the same second, two by this process and
// one not, come out in one order (the one not created here first, then this process's in its
// order) whatever order they came in.
func TestSortByCreationIsOneOrder(t *testing.T) {
	second := metav1.NewTime(time.Unix(1_000_000, 0))
	request := func(name string) *cmapi.CertificateRequest {
		return &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: second}}
	}
	v := &View{created: map[string]uint64{Key("ns", "z"): 1, Key("ns", "a"): 2}}
	inputs := [][]string{{"z", "a", "m"}, {"z", "m", "a"}, {"a", "z", "m"}, {"a", "m", "z"}, {"m", "z", "a"}, {"m", "a", "z"}}
	for _, names := range inputs {
		var reqs []*cmapi.CertificateRequest
		for _, n := range names {
			reqs = append(reqs, request(n))
		}
		v.sortByCreation(reqs)
		var got []string
		for _, r := range reqs {
			got = append(got, r.Name)
		}
		if fmt.Sprint(got) != "[m z a]" {
			t.Errorf("from %v: %v, want [m z a]", names, got)
		}
	}
}
