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
	"sort"
	"strings"
	"sync"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmapply "github.com/cert-manager/cert-manager/pkg/client/applyconfigurations/certmanager/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmv1 "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/typed/certmanager/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// The accounts and verbs of the consumers' Helm charts (cert-manager csi-driver and
// csi-driver-spiffe): the driver's service account may watch, create, delete and list
// CertificateRequests, never get them; in token mode a pod's account may only create them.
const (
	DriverAccount = "system:serviceaccount:cert-manager:cert-manager-csi-driver"
	PodAccount    = "system:serviceaccount:app:app"
)

// ChartVerbs are the verbs the consumers' charts grant the driver on certificaterequests.
var ChartVerbs = []string{"watch", "create", "delete", "list"}

// RBACClient is a cert-manager client whose CertificateRequest calls are authorised as the
// apiserver's RBAC authorizer authorises one account: a verb the account lacks is refused with
// 403 Forbidden and the authorizer's text, before the call reaches the client below, and every
// refusal is counted. Calls on other resources pass.
type RBACClient struct {
	cmclient.Interface
	account string
	verbs   map[string]bool

	mu      sync.Mutex
	refused map[string]int // by verb
}

// WithRBAC returns client as account, allowed only verbs on CertificateRequests.
func WithRBAC(client cmclient.Interface, account string, verbs ...string) *RBACClient {
	c := &RBACClient{Interface: client, account: account, verbs: map[string]bool{}, refused: map[string]int{}}
	for _, v := range verbs {
		c.verbs[v] = true
	}
	return c
}

// Refused returns how many calls were refused, by verb.
func (c *RBACClient) Refused() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.refused))
	for v, n := range c.refused {
		out[v] = n
	}
	return out
}

// RefusedTotal is the number of refused calls.
func (c *RBACClient) RefusedTotal() int {
	n := 0
	for _, k := range c.Refused() {
		n += k
	}
	return n
}

// Grant allows further verbs from now on.
func (c *RBACClient) Grant(verbs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range verbs {
		c.verbs[v] = true
	}
}

// Revoke refuses verbs from now on.
func (c *RBACClient) Revoke(verbs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range verbs {
		delete(c.verbs, v)
	}
}

// String describes the account and its refusals, for test logs.
func (c *RBACClient) String() string {
	r := c.Refused()
	verbs := make([]string, 0, len(r))
	for v := range r {
		verbs = append(verbs, fmt.Sprintf("%s=%d", v, r[v]))
	}
	sort.Strings(verbs)
	return fmt.Sprintf("%s refused: [%s]", c.account, strings.Join(verbs, " "))
}

// authorize refuses verb on a request (name may be empty) in namespace unless it is allowed.
func (c *RBACClient) authorize(verb, namespace, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verbs[verb] {
		return nil
	}
	c.refused[verb]++
	scope := fmt.Sprintf("in the namespace %q", namespace)
	if namespace == "" {
		scope = "at the cluster scope"
	}
	return apierrors.NewForbidden(cmapi.Resource("certificaterequests"), name,
		fmt.Errorf("User %q cannot %s resource \"certificaterequests\" in API group \"cert-manager.io\" %s", c.account, verb, scope))
}

// CertmanagerV1 returns the group's client with CertificateRequests authorised.
func (c *RBACClient) CertmanagerV1() cmv1.CertmanagerV1Interface {
	return rbacV1{CertmanagerV1Interface: c.Interface.CertmanagerV1(), c: c}
}

type rbacV1 struct {
	cmv1.CertmanagerV1Interface
	c *RBACClient
}

func (g rbacV1) CertificateRequests(namespace string) cmv1.CertificateRequestInterface {
	return rbacRequests{next: g.CertmanagerV1Interface.CertificateRequests(namespace), c: g.c, ns: namespace}
}

// rbacRequests authorises each verb of the CertificateRequest client, then calls next.
type rbacRequests struct {
	cmv1.CertificateRequestExpansion
	next cmv1.CertificateRequestInterface
	c    *RBACClient
	ns   string
}

func (r rbacRequests) Create(ctx context.Context, req *cmapi.CertificateRequest, o metav1.CreateOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("create", r.ns, req.Name); err != nil {
		return nil, err
	}
	return r.next.Create(ctx, req, o)
}

func (r rbacRequests) Update(ctx context.Context, req *cmapi.CertificateRequest, o metav1.UpdateOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("update", r.ns, req.Name); err != nil {
		return nil, err
	}
	return r.next.Update(ctx, req, o)
}

func (r rbacRequests) UpdateStatus(ctx context.Context, req *cmapi.CertificateRequest, o metav1.UpdateOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("update", r.ns, req.Name); err != nil {
		return nil, err
	}
	return r.next.UpdateStatus(ctx, req, o)
}

func (r rbacRequests) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	if err := r.c.authorize("delete", r.ns, name); err != nil {
		return err
	}
	return r.next.Delete(ctx, name, o)
}

func (r rbacRequests) DeleteCollection(ctx context.Context, o metav1.DeleteOptions, lo metav1.ListOptions) error {
	if err := r.c.authorize("deletecollection", r.ns, ""); err != nil {
		return err
	}
	return r.next.DeleteCollection(ctx, o, lo)
}

func (r rbacRequests) Get(ctx context.Context, name string, o metav1.GetOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("get", r.ns, name); err != nil {
		return nil, err
	}
	return r.next.Get(ctx, name, o)
}

func (r rbacRequests) List(ctx context.Context, o metav1.ListOptions) (*cmapi.CertificateRequestList, error) {
	if err := r.c.authorize("list", r.ns, ""); err != nil {
		return nil, err
	}
	return r.next.List(ctx, o)
}

func (r rbacRequests) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if err := r.c.authorize("watch", r.ns, ""); err != nil {
		return nil, err
	}
	return r.next.Watch(ctx, o)
}

func (r rbacRequests) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, sub ...string) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("patch", r.ns, name); err != nil {
		return nil, err
	}
	return r.next.Patch(ctx, name, pt, data, o, sub...)
}

func (r rbacRequests) Apply(ctx context.Context, req *cmapply.CertificateRequestApplyConfiguration, o metav1.ApplyOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("patch", r.ns, ""); err != nil {
		return nil, err
	}
	return r.next.Apply(ctx, req, o)
}

func (r rbacRequests) ApplyStatus(ctx context.Context, req *cmapply.CertificateRequestApplyConfiguration, o metav1.ApplyOptions) (*cmapi.CertificateRequest, error) {
	if err := r.c.authorize("patch", r.ns, ""); err != nil {
		return nil, err
	}
	return r.next.ApplyStatus(ctx, req, o)
}

// IsWatchListSemanticsUnSupported passes on the marker of a fake clientset below (which cannot
// stream a list through a watch), so that an informer on this client lists as it would on the
// fake itself.
func (c *RBACClient) IsWatchListSemanticsUnSupported() bool {
	m, ok := c.Interface.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && m.IsWatchListSemanticsUnSupported()
}
