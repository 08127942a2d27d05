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

// Package faults injects the faults of a network between a Kubernetes client and its apiserver:
// a response lost after the apiserver acted on the request, a request lost before it, 429 Too
// Many Requests with Retry-After, watch streams cut (and kept down, so that client-go relists
// after its backoff), and refused connections. It wraps the client's http.RoundTripper
// (rest.Config.WrapTransport), so the client-go code above it runs unchanged. Tests and
// benchmarks use it; the library never does.
package faults

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Settings say which faults to inject; the zero value injects none. Probabilities are drawn from
// the Transport's seeded source, so a run is repeatable up to the order of concurrent requests.
type Settings struct {
	// LostAfter is the probability that a create's response is lost after the apiserver created
	// the object: the client sees a connection reset.
	LostAfter float64
	// LostBefore is the probability that a create is lost before it reaches the apiserver, with
	// the same error.
	LostBefore float64
	// FirstCreateLost loses the response of the first create of every object name (after the
	// apiserver created it); a retry with the same name goes through.
	FirstCreateLost bool
	// TooManyRequests is the probability that a create is answered 429 with Retry-After
	// (RetryAfter, default one second) without reaching the apiserver.
	TooManyRequests float64
	RetryAfter      time.Duration
	// Resource limits the create faults to one resource (the URL's last path segment before
	// the name, e.g. "certificaterequests"); empty means every resource.
	Resource string
}

// Counts is what a Transport did.
type Counts struct {
	Creates, LostAfter, LostBefore, TooMany, Refused, WatchesCut int
}

// Transport is an http.RoundTripper that injects faults into the requests it forwards to Base.
type Transport struct {
	Base http.RoundTripper

	mu          sync.Mutex
	rng         *rand.Rand
	settings    Settings
	refusing    bool
	watchesDown bool
	created     map[string]bool // names whose first create went through (FirstCreateLost)
	watches     map[*cuttableBody]struct{}
	counts      Counts
	calls       map[string]int // by CallOf
}

// New returns a Transport over base that injects nothing until Set is called.
func New(base http.RoundTripper, seed int64) *Transport {
	return &Transport{
		Base:    base,
		rng:     rand.New(rand.NewSource(seed)),
		created: make(map[string]bool),
		watches: make(map[*cuttableBody]struct{}),
		calls:   make(map[string]int),
	}
}

// Wrap is New for rest.Config.WrapTransport: it returns the new Transport through t.
func Wrap(seed int64, t **Transport) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		*t = New(base, seed)
		return *t
	}
}

// Set replaces the create faults.
func (t *Transport) Set(s Settings) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.settings = s
}

// Refuse makes every request fail as a refused connection (and cuts the open watches) until it
// is called with false.
func (t *Transport) Refuse(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refusing = on
	if on {
		t.cutWatchesLocked()
	}
}

// WatchesDown cuts every open watch stream and, until it is called with false, fails every new
// watch request with a connection reset: client-go then relists and watches again after its
// backoff. Other requests go through.
func (t *Transport) WatchesDown(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watchesDown = on
	if on {
		t.cutWatchesLocked()
	}
}

// CutWatches cuts every open watch stream once; client-go watches again at once.
func (t *Transport) CutWatches() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cutWatchesLocked()
}

func (t *Transport) cutWatchesLocked() {
	for b := range t.watches {
		b.cut()
		t.counts.WatchesCut++
	}
	clear(t.watches)
}

// Counts returns what the Transport did so far.
func (t *Transport) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts
}

// Calls counts the requests the Transport was asked to send, refused and lost ones included,
// by CallOf.
func (t *Transport) Calls() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.calls)
}

// CallOf names a request by its method, its path and the names of its query's parameters, in
// order; a selector is named with the keys it selects on, so that a list by name, by node or by
// volume can be told apart: "GET /apis/g/v1/things?labelSelector=a,b&watch".
func CallOf(req *http.Request) string {
	q := req.URL.Query()
	var params []string
	for name := range q {
		param := name
		if name == "labelSelector" || name == "fieldSelector" {
			var keys []string
			for _, term := range strings.Split(q.Get(name), ",") {
				key, _, _ := strings.Cut(term, "=")
				keys = append(keys, strings.TrimSuffix(key, "!"))
			}
			sort.Strings(keys)
			param += "=" + strings.Join(keys, ",")
		}
		params = append(params, param)
	}
	sort.Strings(params)
	call := req.Method + " " + req.URL.Path
	if len(params) > 0 {
		call += "?" + strings.Join(params, "&")
	}
	return call
}

// connectionReset is the error a client sees when a connection breaks mid-request.
func connectionReset(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, syscall.ECONNRESET)}
}

func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	watch := req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true"
	create := req.Method == http.MethodPost

	t.mu.Lock()
	t.calls[CallOf(req)]++
	switch {
	case t.refusing:
		t.counts.Refused++
		t.mu.Unlock()
		drain(req)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case watch && t.watchesDown:
		t.mu.Unlock()
		drain(req)
		return nil, connectionReset("read")
	}
	var lostBefore, lostAfter, tooMany bool
	var name string
	if create && t.appliesLocked(req) {
		t.counts.Creates++
		s := t.settings
		body, _ := readBody(req)
		name = objectName(body)
		switch {
		case s.TooManyRequests > 0 && t.rng.Float64() < s.TooManyRequests:
			tooMany = true
			t.counts.TooMany++
		case s.LostBefore > 0 && t.rng.Float64() < s.LostBefore:
			lostBefore = true
			t.counts.LostBefore++
		case s.FirstCreateLost && name != "" && !t.created[name]:
			t.created[name] = true
			lostAfter = true
			t.counts.LostAfter++
		case s.LostAfter > 0 && t.rng.Float64() < s.LostAfter:
			lostAfter = true
			t.counts.LostAfter++
		}
	}
	retryAfter := t.settings.RetryAfter
	t.mu.Unlock()

	switch {
	case tooMany:
		if retryAfter <= 0 {
			retryAfter = time.Second
		}
		return tooManyRequests(req, retryAfter), nil
	case lostBefore:
		return nil, connectionReset("read")
	}
	resp, err := t.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if lostAfter {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, connectionReset("read")
	}
	if watch {
		b := &cuttableBody{body: resp.Body}
		b.done = func() {
			t.mu.Lock()
			delete(t.watches, b)
			t.mu.Unlock()
		}
		t.mu.Lock()
		if t.watchesDown || t.refusing {
			b.cut()
		} else {
			t.watches[b] = struct{}{}
		}
		t.mu.Unlock()
		resp.Body = b
	}
	return resp, nil
}

// appliesLocked reports whether the create faults apply to req's resource.
func (t *Transport) appliesLocked(req *http.Request) bool {
	if t.settings.Resource == "" {
		return true
	}
	path := strings.TrimSuffix(req.URL.Path, "/")
	return strings.HasSuffix(path, "/"+t.settings.Resource)
}

// readBody reads a request's body and puts a copy back, so the request can still be sent.
func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	data, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	return data, err
}

func drain(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// objectName finds metadata.name in a JSON object without decoding the whole object; empty if
// there is none (a generateName create, or another encoding).
func objectName(body []byte) string {
	i := bytes.Index(body, []byte(`"metadata":`))
	if i < 0 {
		return ""
	}
	rest := body[i:]
	j := bytes.Index(rest, []byte(`"name":"`))
	if j < 0 {
		return ""
	}
	rest = rest[j+len(`"name":"`):]
	k := bytes.IndexByte(rest, '"')
	if k < 0 {
		return ""
	}
	return string(rest[:k])
}

func tooManyRequests(req *http.Request, retryAfter time.Duration) *http.Response {
	drain(req)
	secs := int(retryAfter.Round(time.Second) / time.Second)
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too many requests","reason":"TooManyRequests","details":{"retryAfterSeconds":%d},"code":429}`, secs)
	return &http.Response{
		Status:     "429 Too Many Requests",
		StatusCode: http.StatusTooManyRequests,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Retry-After": {fmt.Sprint(secs)}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// cuttableBody is a watch stream's body that the Transport can cut: a read after the cut fails
// with a connection reset, as a broken connection's would.
type cuttableBody struct {
	body io.ReadCloser
	done func()

	mu     sync.Mutex
	isCut  bool
	closed bool
}

func (b *cuttableBody) cut() {
	b.mu.Lock()
	b.isCut = true
	b.mu.Unlock()
	_ = b.body.Close()
}

func (b *cuttableBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.mu.Lock()
	cut := b.isCut
	b.mu.Unlock()
	if cut {
		return 0, connectionReset("read")
	}
	return n, err
}

func (b *cuttableBody) Close() error {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if !already && b.done != nil {
		b.done()
	}
	return b.body.Close()
}
