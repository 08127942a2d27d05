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

// Package controller is the example approver's loop: it watches the CertificateRequests that
// csi-lib created (those with its node-id-hash label) for the issuers it serves, and approves or
// denies each undecided one by the library's approval check and the rules it is configured with
// (Config, BindFlags: the pod-spec rule, the SPIFFE rule), through the status subresource, as
// cert-manager's own approvers do.
package controller

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/cert-manager/csi-lib/approval"
)

// Reason is the reason of the Approved and Denied conditions this approver sets.
const Reason = "csi.cert-manager.io"

// nodeIDHashLabelKey is the label csi-lib puts on every request it creates.
const nodeIDHashLabelKey = "csi.cert-manager.io/node-id-hash"

// Options configures a Controller.
type Options struct {
	// CertManager watches the requests and writes their conditions.
	CertManager cmclient.Interface
	// Kube reads the pods the requests name: from the apiserver, or from a cache with PodCache.
	Kube kubernetes.Interface
	// PodCache reads pods from an informer's cache of every pod (list and watch), and from the
	// apiserver only when the cache has no pod of the request's name and UID: a request for a
	// pod just created is not denied because the cache has not caught up. A pod that has
	// finished or is terminating may be seen Running for as long as the watch lags behind (the
	// same race as a pod that finishes between a read and the approval, made longer).
	PodCache bool
	// Issuers are the issuers whose requests this approver decides; empty: every request csi-lib
	// created. Group defaults to cert-manager.io, Kind to Issuer, as cert-manager reads them.
	Issuers []cmmeta.IssuerReference
	// Rules are the driver's own checks of a request against its pod (approval.PodRule), such
	// as CommonNameIsPodName.
	Rules []approval.PodRule
	// Workers decide requests in parallel. Default: 4.
	Workers int
	Log     logr.Logger
}

// Controller approves or denies csi-lib's requests by approval.Check.
type Controller struct {
	opts   Options
	queue  workqueue.TypedRateLimitingInterface[string]
	lister cmlisters.CertificateRequestLister
	synced []cache.InformerSynced
	run    []func(stop <-chan struct{})
	pods   corev1listers.PodLister // nil without PodCache
}

// New sets up the controller's informer; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.CertManager == nil || opts.Kube == nil {
		return nil, fmt.Errorf("the approver needs a cert-manager client and a Kubernetes client")
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	for i := range opts.Issuers {
		opts.Issuers[i] = normalIssuer(opts.Issuers[i])
	}
	factory := cminformers.NewSharedInformerFactoryWithOptions(opts.CertManager, 0,
		cminformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeIDHashLabelKey }))
	informer := factory.Certmanager().V1().CertificateRequests()
	c := &Controller{
		opts:   opts,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		lister: informer.Lister(),
		synced: []cache.InformerSynced{informer.Informer().HasSynced},
		run:    []func(<-chan struct{}){informer.Informer().Run},
	}
	if opts.PodCache {
		pods := informers.NewSharedInformerFactory(opts.Kube, 0).Core().V1().Pods()
		c.pods = pods.Lister()
		c.synced = append(c.synced, pods.Informer().HasSynced)
		c.run = append(c.run, pods.Informer().Run)
	}
	enqueue := func(obj any) {
		if req, ok := obj.(*cmapi.CertificateRequest); ok && c.serves(req) && undecided(req) {
			c.queue.Add(req.Namespace + "/" + req.Name)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run decides requests until ctx ends, and returns once its goroutines have stopped.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	for _, run := range c.run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx.Done())
		}()
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	c.opts.Log.Info("Deciding csi-lib's CertificateRequests", "issuers", len(c.opts.Issuers), "rules", len(c.opts.Rules), "workers", c.opts.Workers, "pod_cache", c.opts.PodCache)
	for range c.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// next decides one queued request; false once the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.decide(ctx, key); err != nil {
		c.opts.Log.Error(err, "Deciding a CertificateRequest; retrying", "request", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// decide checks the request named key and writes the verdict as its Approved or Denied
// condition. An error leaves the request undecided for a retry.
func (c *Controller) decide(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	req, err := c.lister.CertificateRequests(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !undecided(req) {
		return err
	}
	claim, _ := approval.ClaimOf(req)
	getPod := func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		if c.pods != nil {
			if pod, err := c.pods.Pods(namespace).Get(name); err == nil && pod.UID == claim.PodUID {
				return pod, nil
			}
		}
		return c.opts.Kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	verdict, err := approval.Check(ctx, req, getPod, c.opts.Rules...)
	if err != nil {
		return err
	}
	req = req.DeepCopy()
	cond := cmapi.CertificateRequestCondition{
		Type:               cmapi.CertificateRequestConditionApproved,
		Status:             cmmeta.ConditionTrue,
		Reason:             Reason,
		LastTransitionTime: &metav1.Time{Time: time.Now()},
	}
	if verdict.Approve {
		cond.Message = "approved: the request names " + claim.String() + ", which exists and is bound to that node"
		if len(c.opts.Rules) > 0 {
			cond.Message += ", and passes the approver's rules"
		}
	} else {
		cond.Type = cmapi.CertificateRequestConditionDenied
		cond.Message = "denied: " + verdict.Reason
	}
	req.Status.Conditions = append(req.Status.Conditions, cond)
	_, err = c.opts.CertManager.CertmanagerV1().CertificateRequests(ns).UpdateStatus(ctx, req, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the %s condition: %w", cond.Type, err)
	}
	c.opts.Log.Info("Decided a CertificateRequest", "request", name, "namespace", ns, "condition", cond.Type, "message", cond.Message)
	return nil
}

// CommonNameIsPodName is the rule of a driver whose certificates name their pod in the subject's
// common name, as examples/csi-driver's do.
func CommonNameIsPodName(req *cmapi.CertificateRequest, pod *corev1.Pod) string {
	block, _ := pem.Decode(req.Spec.Request)
	if block == nil {
		return "the request holds no PEM certificate request"
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "the certificate request does not parse: " + err.Error()
	}
	if csr.Subject.CommonName != pod.Name {
		return fmt.Sprintf("the certificate request's common name is %q, not the pod's name %q", csr.Subject.CommonName, pod.Name)
	}
	return ""
}

// serves reports whether req names one of the issuers this approver decides for.
func (c *Controller) serves(req *cmapi.CertificateRequest) bool {
	return len(c.opts.Issuers) == 0 || slices.Contains(c.opts.Issuers, normalIssuer(req.Spec.IssuerRef))
}

// normalIssuer fills in the group and kind cert-manager assumes when a reference leaves them out.
func normalIssuer(ref cmmeta.IssuerReference) cmmeta.IssuerReference {
	if ref.Group == "" {
		ref.Group = "cert-manager.io"
	}
	if ref.Kind == "" {
		ref.Kind = "Issuer"
	}
	return ref
}

// undecided reports whether req has neither an Approved nor a Denied condition.
func undecided(req *cmapi.CertificateRequest) bool {
	for _, c := range req.Status.Conditions {
		if c.Type == cmapi.CertificateRequestConditionApproved || c.Type == cmapi.CertificateRequestConditionDenied {
			return false
		}
	}
	return true
}
