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

package faults

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// server is a stand-in apiserver: it counts the requests that reached it, answers creates with
// the body sent, and streams a watch until its client goes.
type server struct {
	mu      sync.Mutex
	reached []string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reached = append(s.reached, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if r.URL.Query().Get("watch") == "true" {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"type":"ADDED"}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	_, _ = w.Write(body)
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reached)
}

func setup(t *testing.T) (*server, *Transport, string) {
	t.Helper()
	s := &server{}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, New(http.DefaultTransport, 1), ts.URL
}

func create(t *testing.T, tr *Transport, url, name string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/apis/cert-manager.io/v1/namespaces/ns/certificaterequests",
		strings.NewReader(`{"metadata":{"name":"`+name+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func TestLostAfterReachesTheServerAndLosesTheResponse(t *testing.T) {
	s, tr, url := setup(t)
	tr.Set(Settings{LostAfter: 1})
	if _, err := create(t, tr, url, "a"); !isReset(err) {
		t.Fatalf("error %v, want a connection reset", err)
	}
	if s.count() != 1 {
		t.Fatalf("%d requests reached the server, want 1", s.count())
	}
}

func TestLostBeforeNeverReachesTheServer(t *testing.T) {
	s, tr, url := setup(t)
	tr.Set(Settings{LostBefore: 1})
	if _, err := create(t, tr, url, "a"); !isReset(err) {
		t.Fatalf("error %v, want a connection reset", err)
	}
	if s.count() != 0 {
		t.Fatalf("%d requests reached the server, want 0", s.count())
	}
}

func TestFirstCreateLostOncePerName(t *testing.T) {
	s, tr, url := setup(t)
	tr.Set(Settings{FirstCreateLost: true})
	for i, want := range []bool{true, false, false} {
		if _, err := create(t, tr, url, "a"); isReset(err) != want {
			t.Fatalf("create %d of the name: error %v, want lost %v", i, err, want)
		}
	}
	if _, err := create(t, tr, url, "b"); !isReset(err) {
		t.Fatal("another name's first create was not lost")
	}
	if s.count() != 4 || tr.Counts().LostAfter != 2 {
		t.Fatalf("%d reached, %d lost; want 4 and 2", s.count(), tr.Counts().LostAfter)
	}
}

func TestTooManyRequestsCarriesRetryAfter(t *testing.T) {
	s, tr, url := setup(t)
	tr.Set(Settings{TooManyRequests: 1, RetryAfter: 3 * time.Second})
	resp, err := create(t, tr, url, "a")
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("response %v, error %v; want 429 with Retry-After 3", resp, err)
	}
	if s.count() != 0 {
		t.Fatal("a 429 reached the server")
	}
}

func TestResourceLimitsTheCreateFaults(t *testing.T) {
	s, tr, url := setup(t)
	tr.Set(Settings{LostBefore: 1, Resource: "secrets"})
	if _, err := create(t, tr, url, "a"); err != nil {
		t.Fatalf("a create of another resource failed: %v", err)
	}
	if s.count() != 1 {
		t.Fatal("the create of another resource did not reach the server")
	}
}

func TestRefusedUntilTurnedOff(t *testing.T) {
	s, tr, url := setup(t)
	tr.Refuse(true)
	if _, err := create(t, tr, url, "a"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("error %v, want a refused connection", err)
	}
	tr.Refuse(false)
	if _, err := create(t, tr, url, "a"); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	if s.count() != 1 || tr.Counts().Refused != 1 {
		t.Fatalf("%d reached, %d refused; want 1 and 1", s.count(), tr.Counts().Refused)
	}
}

func openWatch(t *testing.T, tr *Transport, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/apis/cert-manager.io/v1/certificaterequests?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

// A cut watch stream fails its next read with a connection reset; while watches are down a new
// watch fails the same way.
func TestWatchesDownCutsAndRefusesWatches(t *testing.T) {
	_, tr, url := setup(t)
	resp, err := openWatch(t, tr, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	first := make([]byte, len(`{"type":"ADDED"}`+"\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	tr.WatchesDown(true)
	if _, err := resp.Body.Read(make([]byte, 1)); !isReset(err) {
		t.Fatalf("read after the cut: %v, want a connection reset", err)
	}
	if _, err := openWatch(t, tr, url); !isReset(err) {
		t.Fatalf("a new watch while down: %v, want a connection reset", err)
	}
	tr.WatchesDown(false)
	resp2, err := openWatch(t, tr, url)
	if err != nil {
		t.Fatalf("a new watch after: %v", err)
	}
	_ = resp2.Body.Close()
	if tr.Counts().WatchesCut != 1 {
		t.Fatalf("%d watches cut, want 1", tr.Counts().WatchesCut)
	}
}
