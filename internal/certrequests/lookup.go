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
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/certs"
)

// ForVolume returns the volume's requests from the informer cache, oldest first by
// CreationTimestamp, then by the order this process created them, then by name. It uses the
// volume-hash index (no scan over the node's requests).
func (r *View) ForVolume(volumeID string) ([]*cmapi.CertificateRequest, error) {
	objs, err := r.informer.GetIndexer().ByIndex(volumeHashIndex, util.HashIdentifier(volumeID))
	if err != nil {
		return nil, fmt.Errorf("listing CertificateRequests of volume: %w", err)
	}
	reqs := make([]*cmapi.CertificateRequest, 0, len(objs))
	for _, o := range objs {
		if req, ok := o.(*cmapi.CertificateRequest); ok && req.DeletionTimestamp == nil {
			reqs = append(reqs, req)
		}
	}
	r.sortByCreation(reqs)
	return reqs, nil
}

// sortByCreation orders requests oldest first by CreationTimestamp, then by the order this
// process created them (one it did not create, made by an earlier process or by someone else,
// first), then by name: one total order, so that the oldest and the newest are the same
// whatever order the requests came in.
func (r *View) sortByCreation(reqs []*cmapi.CertificateRequest) {
	if len(reqs) < 2 {
		return
	}
	r.mu.Lock()
	seq := make(map[*cmapi.CertificateRequest]uint64, len(reqs))
	for _, req := range reqs {
		seq[req] = r.created[Key(req.Namespace, req.Name)]
	}
	r.mu.Unlock()
	slices.SortFunc(reqs, func(a, b *cmapi.CertificateRequest) int {
		return cmp.Or(
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(seq[a], seq[b]),
			strings.Compare(a.Name, b.Name),
		)
	})
}

// Exists reports whether the informer's cache holds the request.
func (r *View) Exists(reqKey string) bool {
	_, exists, err := r.informer.GetIndexer().GetByKey(reqKey)
	return exists && err == nil
}

// NewestNotAfter is the expiry of the newest certificate issued for the volume, from the
// informer's cache; zero if there is none.
func (r *View) NewestNotAfter(volumeID string) time.Time {
	reqs, err := r.ForVolume(volumeID)
	if err != nil {
		return time.Time{}
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if leaf, err := certs.ParseLeaf(reqs[i].Status.Certificate); err == nil {
			return leaf.NotAfter
		}
	}
	return time.Time{}
}

// ForVolumeFromAPIServer returns the volume's requests as the apiserver holds them (a list of
// this node's requests of this one volume, by their labels), ordered as ForVolume orders them:
// for when the informer's cache is known to be stale.
func (r *View) ForVolumeFromAPIServer(ctx context.Context, volumeID string) ([]*cmapi.CertificateRequest, error) {
	selector := labels.SelectorFromSet(labels.Set{
		api.NodeIDHashLabelKey:   r.nodeHash,
		api.VolumeIDHashLabelKey: util.HashIdentifier(volumeID),
	}).String()
	list, err := r.client.CertmanagerV1().CertificateRequests("").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		r.health.CallFailed(err)
		return nil, fmt.Errorf("listing CertificateRequests of volume from the apiserver: %w",
			apicall.Refusal(err, "list", apicall.CertificateRequests, "", apicall.DriverAccount))
	}
	reqs := make([]*cmapi.CertificateRequest, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			reqs = append(reqs, &list.Items[i])
		}
	}
	r.sortByCreation(reqs)
	return reqs, nil
}
