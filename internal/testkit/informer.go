package testkit

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
)

const sentinelNamespace = "csi-lib-informer-sentinel"

// WaitInformerLive makes sure a manager's informer receives watch events: it creates a sentinel
// request labelled for nodeID, waits (bounded by ctx, polling the lister) until the informer
// shows it, deletes it and waits until it is gone. Fake clientsets drop events created between
// an informer's list and its watch; after this returns, no event is lost.
func WaitInformerLive(ctx context.Context, client cmclient.Interface, lister cmlisters.CertificateRequestLister, nodeID string) error {
	reqs := client.CertmanagerV1().CertificateRequests(sentinelNamespace)
	sentinel := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{
		Name: "sentinel", Namespace: sentinelNamespace,
		Labels: map[string]string{api.NodeIDHashLabelKey: util.HashIdentifier(nodeID)},
	}}
	if _, err := reqs.Create(ctx, sentinel, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating informer sentinel: %w", err)
	}
	present := func() bool {
		_, err := lister.CertificateRequests(sentinelNamespace).Get("sentinel")
		return err == nil
	}
	if err := pollUntil(ctx, present); err != nil {
		return fmt.Errorf("informer never showed the sentinel: %w", err)
	}
	if err := reqs.Delete(ctx, "sentinel", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting informer sentinel: %w", err)
	}
	return pollUntil(ctx, func() bool { return !present() })
}

// pollUntil polls cond every millisecond until it holds or ctx ends.
func pollUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
