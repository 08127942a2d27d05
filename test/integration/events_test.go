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
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/test/testkit"
)

// podEvents lists the events whose involved object is the pod, as kubectl describe does.
func podEvents(t *testing.T, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	list, err := kube.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func hasEvent(events []corev1.Event, eventType, reason, text string) bool {
	for _, ev := range events {
		if ev.Type == eventType && ev.Reason == reason && strings.Contains(ev.Message, text) {
			return true
		}
	}
	return false
}

// runDenier denies every CertificateRequest in ns, through the API, until the test ends.
func runDenier(t *testing.T, ns string) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := cm.CertmanagerV1().CertificateRequests(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if req, ok := ev.Object.(*cmapi.CertificateRequest); ok && ev.Type == watch.Added {
				_, _ = testkit.SetConditions(ctx, cm, req, testkit.Denied("no policy allows this identity"))
			}
		}
	}()
}

// TestEventsOnThePod: with an EventRecorder from client-go's tools/record, the Pod shows a
// CertificateIssued event for a successful issuance and a CertificateRequestFailed event for a
// denied request, listed through the real apiserver by involved object.
func TestEventsOnThePod(t *testing.T) {
	ns := newNamespace(t)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "csi-lib-integration"})
	n := startNode(t, nodeConfig{baseDir: t.TempDir(), managerOpts: func(o *manager.Options) { o.EventRecorder = recorder }})

	issuedPod := newPod(t, ns, "issued")
	stopSigner := runSigner(t, ns, newCA(t))
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, issuedPod, "csi-events-ok")); err != nil {
		t.Fatal(err)
	}
	poll(t, "a CertificateIssued event on the pod", func() bool {
		return hasEvent(podEvents(t, issuedPod), corev1.EventTypeNormal, manager.EventReasonCertificateIssued, "after publish")
	})
	stopSigner()

	deniedPod := newPod(t, ns, "denied")
	runDenier(t, ns)
	if _, err := n.client.NodePublishVolume(ctxTimeout(t, pollTimeout), publishRequest(t, deniedPod, "csi-events-denied")); err == nil {
		t.Fatal("publish succeeded with a denied request")
	}
	poll(t, "a CertificateRequestFailed event on the pod", func() bool {
		return hasEvent(podEvents(t, deniedPod), corev1.EventTypeWarning, manager.EventReasonCertificateRequestFailed, "denied by the approval plugin: no policy allows this identity")
	})
	for _, ev := range podEvents(t, deniedPod) {
		if ev.InvolvedObject.UID != deniedPod.UID || ev.Source.Component != "csi-lib-integration" {
			t.Errorf("event %s about %+v from %+v", ev.Reason, ev.InvolvedObject, ev.Source)
		}
	}
}
