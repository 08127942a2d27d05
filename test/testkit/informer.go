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

package testkit

import (
	"context"
	"fmt"
	"time"

	k8stesting "k8s.io/client-go/testing"
)

// ActionRecorder is what fake clientsets offer to inspect the calls made through them.
type ActionRecorder interface {
	Actions() []k8stesting.Action
}

// WaitInformerWatching waits (bounded by ctx) until client has recorded a watch of
// CertificateRequests selected by a label, as a manager's informer's is: from then on the
// informer receives every event. A fake clientset drops
// events that happen between an informer's list and its watch, and it records a watch and
// registers its watcher under one lock, so this closes the gap without creating anything.
func WaitInformerWatching(ctx context.Context, client ActionRecorder) error {
	return WaitInformersWatching(ctx, client, 1)
}

// WaitInformersWatching is WaitInformerWatching for the n-th manager started on one client: it
// waits until n watches of CertificateRequests selected by a label (a manager's informer
// selects its node's requests; a test's own watch selects nothing) were recorded.
func WaitInformersWatching(ctx context.Context, client ActionRecorder, n int) error {
	watching := func() bool {
		seen := 0
		for _, a := range client.Actions() {
			w, ok := a.(k8stesting.WatchAction)
			if ok && a.GetResource().Resource == "certificaterequests" && !w.GetWatchRestrictions().Labels.Empty() {
				seen++
			}
		}
		return seen >= n
	}
	for !watching() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the informer never watched CertificateRequests: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
