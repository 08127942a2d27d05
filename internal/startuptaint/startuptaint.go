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

// Package startuptaint removes a CSI driver's startup taint, <driver name>/agent-not-ready, from
// the driver's own node once kubelet has registered the driver: once the node's CSINode object
// lists it. kubelet writes the driver into CSINode last, after it has added the driver to its
// in-memory list of registered CSI drivers and asked it NodeGetInfo (pkg/volume/csi,
// RegisterPlugin), so from then on a pod's mount finds the driver.
//
// The taints are removed with a JSON patch that first tests the node's whole taint list against
// the one read: a writer that changed the taints in between makes the patch fail, and the remover
// reads the node again; another writer's taint is never overwritten. After the driver is
// registered the node is watched for a bounded window, so that a startup taint added after the
// driver started is removed too. Every failure to read or patch is logged with the node's name
// and retried on a backoff; nothing here ever stops the driver.
//
// # Why not client-go's tools/watch
//
// UntilWithSync (and an informer) lists, and the component's RBAC grants nodes and CSINodes get,
// watch and patch, never list: the driver reads one named object (the tests count the calls and
// fail on a list). RetryWatcher would re-watch from the last resourceVersion, but ends when that
// version has expired, after which a get is needed anyway; that get, then a watch from its
// version, is watchUntil.
package startuptaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedstoragev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/utils/clock"
)

// Suffix follows the driver's name in the startup taint's key.
const Suffix = "/agent-not-ready"

// maxPromptRereads bounds the patches retried at once, without a backoff step, after another
// writer changed the node's taints between the read and the patch.
const maxPromptRereads = 10

// Key returns the startup taint's key for a driver name, or an error if that key is not a valid
// taint key (a qualified name: an optional DNS subdomain prefix of at most 253 characters, a
// slash, and a name of at most 63).
func Key(driverName string) (string, error) {
	key := driverName + Suffix
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return "", fmt.Errorf("the driver name %q does not make a valid taint key %q: %s", driverName, key, strings.Join(errs, "; "))
	}
	return key, nil
}

// Config is what a Remover needs; every field is required.
type Config struct {
	// DriverName is the CSI driver's name: CSINode lists it, and the taint's key is made of it.
	DriverName string
	// NodeName is the Kubernetes node the driver runs on.
	NodeName string
	// Nodes gets, watches and patches the node; CSINodes gets and watches its CSINode.
	Nodes    typedcorev1.NodeInterface
	CSINodes typedstoragev1.CSINodeInterface
	// Window is how long the node is watched for a startup taint once the driver is registered.
	Window time.Duration
	// Backoff is the wait between attempts after a failed read, patch or watch.
	Backoff wait.Backoff
	// Clock drives the window and the backoff.
	Clock clock.Clock
	// Log receives every step; the node's name is added to it.
	Log logr.Logger
	// Removed is called with the number of taints each successful patch removed (nil: none).
	Removed func(n int)
}

// Remover removes the startup taint from one node: see Run.
type Remover struct {
	cfg Config
	key string
	log logr.Logger
}

// New validates cfg and returns its Remover. An invalid taint key, an empty node name, a
// missing client, a window or a first backoff step that is not positive is an error (the
// driver, its one caller, always sets the clock).
func New(cfg Config) (*Remover, error) {
	key, err := Key(cfg.DriverName)
	errs := []error{err} // errors.Join drops a nil
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("the node name is empty"))
	}
	if cfg.Nodes == nil || cfg.CSINodes == nil {
		errs = append(errs, errors.New("a client for nodes and one for CSINodes are required"))
	}
	if cfg.Window <= 0 {
		errs = append(errs, fmt.Errorf("the watch window %v is not positive", cfg.Window))
	}
	if cfg.Backoff.Duration <= 0 {
		errs = append(errs, fmt.Errorf("the backoff's first step %v is not positive", cfg.Backoff.Duration))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("startup taint: %w", err)
	}
	return &Remover{cfg: cfg, key: key, log: cfg.Log.WithValues("node", cfg.NodeName, "taint", key)}, nil
}

// Run waits until the node's CSINode lists the driver, then removes every taint of the node
// whose key is the startup taint's, whatever its value and effect, and watches the node for
// Window so that one added later is removed too. The window ends only once the node has been
// seen without the taint: a taint that is there is retried until it is gone. Run returns when
// the window ends or ctx does; it never fails: what fails is logged and retried on the backoff.
func (r *Remover) Run(ctx context.Context) {
	start := r.cfg.Clock.Now()
	r.log.Info("Waiting for kubelet to register the driver (its CSINode to list it) before removing the node's startup taint")
	if !r.waitForRegistration(ctx) {
		return
	}
	registered := r.cfg.Clock.Now()
	r.log.Info("kubelet has registered the driver: the node's CSINode lists it; removing the node's startup taint", "waited", registered.Sub(start))
	removed := r.clear(ctx, registered)
	if ctx.Err() == nil {
		r.log.Info("Stopped watching the node for the startup taint: the window has ended", "window", r.cfg.Window, "removed", removed)
	}
}

// waitForRegistration reads the node's CSINode and watches it until it lists the driver (true),
// or ctx ends (false).
func (r *Remover) waitForRegistration(ctx context.Context) bool {
	b := r.cfg.Backoff
	for ctx.Err() == nil {
		rv := ""
		cn, err := r.cfg.CSINodes.Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
		switch {
		case err == nil:
			if r.lists(cn) {
				return true
			}
			rv = cn.ResourceVersion
		case apierrors.IsNotFound(err):
			// kubelet creates the CSINode at its start; the watch sees it created.
		default:
			if !r.retry(ctx, &b, err, "read the node's CSINode") {
				return false
			}
			continue
		}
		w, err := r.cfg.CSINodes.Watch(ctx, r.byName(rv))
		if err != nil {
			if !r.retry(ctx, &b, err, "watch the node's CSINode") {
				return false
			}
			continue
		}
		registered, _, events := watchUntil(ctx, w, nil, func(ev watch.Event) bool {
			cn, ok := ev.Object.(*storagev1.CSINode)
			return ev.Type != watch.Deleted && ok && cn.Name == r.cfg.NodeName && r.lists(cn)
		})
		if registered {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if events {
			b = r.cfg.Backoff
		} else if !r.pause(ctx, &b, "the watch of the node's CSINode ended") {
			return false
		}
	}
	return false
}

// watchUntil reads w until found returns true for an event (done), expired delivers (ended; a
// nil channel never does), the watch ends or ctx does; events says whether an object was added
// or modified meanwhile.
func watchUntil(ctx context.Context, w watch.Interface, expired <-chan time.Time, found func(watch.Event) bool) (done, ended, events bool) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, false, events
		case <-expired:
			return false, true, events
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, false, events
			}
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				events = true
			}
			if found(ev) {
				return true, false, events
			}
		}
	}
}

// lists reports whether the CSINode lists the driver.
func (r *Remover) lists(cn *storagev1.CSINode) bool {
	return slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == r.cfg.DriverName })
}

// clear removes the startup taint and watches the node for it until Window after registered,
// and at least until the node has been seen without it, or until ctx ends. It returns the
// number of taints removed.
func (r *Remover) clear(ctx context.Context, registered time.Time) int {
	deadline := registered.Add(r.cfg.Window)
	b := r.cfg.Backoff
	removed, prompt := 0, 0
	seenClean := false
	var node *corev1.Node // the node as last read; nil: read it
	for ctx.Err() == nil {
		if seenClean && !r.cfg.Clock.Now().Before(deadline) {
			return removed
		}
		if node == nil {
			n, err := r.cfg.Nodes.Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
			if err != nil {
				if !r.retry(ctx, &b, err, "read the node") {
					return removed
				}
				continue
			}
			node = n
		}
		if taints := r.startupTaints(node); len(taints) > 0 {
			patched, err := r.patch(ctx, node)
			if err == nil {
				removed += len(taints)
				if r.cfg.Removed != nil {
					r.cfg.Removed(len(taints))
				}
				r.log.Info("Removed the node's startup taint", "taints", describe(taints), "since_registration", r.cfg.Clock.Since(registered))
				node, b, prompt = patched, r.cfg.Backoff, 0
				continue
			}
			if ctx.Err() != nil {
				return removed
			}
			// Read again: if the taints changed since the read, another writer changed them
			// and the patch's test failed; try again with what is there now.
			fresh, gerr := r.cfg.Nodes.Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
			if gerr == nil && !apiequality.Semantic.DeepEqual(fresh.Spec.Taints, node.Spec.Taints) && prompt < maxPromptRereads {
				prompt++
				r.log.V(1).Info("The node's taints changed between the read and the patch (another writer); patching what is there now", "patch_error", err.Error())
				node = fresh
				continue
			}
			node = nil
			if gerr == nil {
				node = fresh
			}
			prompt = 0
			if !r.retry(ctx, &b, err, "remove the startup taint from the node") {
				return removed
			}
			continue
		}
		if !seenClean {
			seenClean = true
			r.log.V(1).Info("The node has no startup taint; watching it for one until the window ends", "window_left", deadline.Sub(r.cfg.Clock.Now()))
		}
		if !r.cfg.Clock.Now().Before(deadline) {
			return removed
		}
		w, err := r.cfg.Nodes.Watch(ctx, r.byName(node.ResourceVersion))
		if err != nil {
			node = nil
			if !r.retry(ctx, &b, err, "watch the node") {
				return removed
			}
			continue
		}
		t := r.cfg.Clock.NewTimer(deadline.Sub(r.cfg.Clock.Now()))
		var tainted *corev1.Node
		_, ended, events := watchUntil(ctx, w, t.C(), func(ev watch.Event) bool {
			n, ok := ev.Object.(*corev1.Node)
			switch {
			case !ok || n.Name != r.cfg.NodeName:
				return false
			case ev.Type == watch.Deleted:
				r.log.Info("The node was deleted")
				return true
			case len(r.startupTaints(n)) > 0:
				r.log.Info("The startup taint is on the node again; removing it", "taints", describe(r.startupTaints(n)))
				tainted = n
				return true
			}
			return false
		})
		t.Stop()
		switch {
		case ctx.Err() != nil || ended:
			return removed
		case tainted != nil:
			node = tainted
		case events:
			node, b = nil, r.cfg.Backoff
		default:
			node = nil
			if !r.pause(ctx, &b, "the watch of the node ended") {
				return removed
			}
		}
	}
	return removed
}

// startupTaints returns the node's taints whose key is the startup taint's.
func (r *Remover) startupTaints(n *corev1.Node) []corev1.Taint {
	return slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key != r.key })
}

// patch removes the startup taints from the node with a JSON patch that first tests that the
// taint list is still the one read: if another writer changed it the whole patch fails.
func (r *Remover) patch(ctx context.Context, node *corev1.Node) (*corev1.Node, error) {
	kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == r.key })
	// The operations of a JSON patch (RFC 6902); json.Marshal writes each one's keys in the
	// order op, path, value.
	ops := []map[string]any{{"op": "test", "path": "/spec/taints", "value": node.Spec.Taints}}
	if len(kept) == 0 {
		ops = append(ops, map[string]any{"op": "remove", "path": "/spec/taints"})
	} else {
		ops = append(ops, map[string]any{"op": "replace", "path": "/spec/taints", "value": kept})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return r.cfg.Nodes.Patch(ctx, r.cfg.NodeName, types.JSONPatchType, data, metav1.PatchOptions{})
}

// byName selects the node's object alone, from resourceVersion rv ("": its current state first).
func (r *Remover) byName(rv string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", r.cfg.NodeName).String(), ResourceVersion: rv}
}

// retry reports a failure, then waits the backoff's next step; false if ctx ended first.
func (r *Remover) retry(ctx context.Context, b *wait.Backoff, err error, what string) bool {
	if ctx.Err() != nil {
		return false
	}
	d := b.Step()
	r.log.Error(err, "Could not "+what+"; retrying (the driver serves meanwhile)", "retry_in", d)
	return r.sleep(ctx, d)
}

// pause waits the backoff's next step after a watch ended without an event; false if ctx
// ended first.
func (r *Remover) pause(ctx context.Context, b *wait.Backoff, why string) bool {
	d := b.Step()
	r.log.V(1).Info(why+" without an event; watching again", "retry_in", d)
	return r.sleep(ctx, d)
}

func (r *Remover) sleep(ctx context.Context, d time.Duration) bool {
	t := r.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// describe names taints as key=value:effect, as kubectl prints them (Taint.ToString).
func describe(taints []corev1.Taint) []string {
	out := make([]string, 0, len(taints))
	for _, t := range taints {
		out = append(out, t.ToString())
	}
	return out
}
