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
// CertificateRequests: from then on the informer receives every event. A fake clientset drops
// events that happen between an informer's list and its watch, and it records a watch and
// registers its watcher under one lock, so this closes the gap without creating anything.
func WaitInformerWatching(ctx context.Context, client ActionRecorder) error {
	watching := func() bool {
		for _, a := range client.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "certificaterequests" {
				return true
			}
		}
		return false
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
