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

package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cert-manager/csi-lib/internal/accesscheck"
	"github.com/cert-manager/csi-lib/internal/admission"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/internal/apicall"
	"github.com/cert-manager/csi-lib/internal/apihealth"
	"github.com/cert-manager/csi-lib/internal/certrequests"
	"github.com/cert-manager/csi-lib/internal/csilibdebug"
	"github.com/cert-manager/csi-lib/internal/lifetime"
	"github.com/cert-manager/csi-lib/internal/pendingkeys"
	"github.com/cert-manager/csi-lib/internal/podcondition"
	"github.com/cert-manager/csi-lib/internal/workqueue"
	"github.com/cert-manager/csi-lib/metadata"
)

// Manager obtains and renews certificates for the volumes it manages. Create it with NewManager;
// all methods are safe for concurrent use.
type Manager struct {
	// opts are the options as completed.
	opts     Options
	nodeHash string
	log      logr.Logger
	life     *lifetime.Lifetime // the context Stop ends, and the goroutines Stop waits for
	stopOnce sync.Once
	// createAccount names the account of ClientForMetadata's clients in a refusal's text:
	// apicall.DriverAccount by default, apicall.PodAccount when the driver set ClientForMetadata.
	createAccount string

	// registry is which volumes are managed; status is what is shown of each.
	registry *registry
	status   *status
	// queue is the work queue the loops turn on; it keeps the pending Requeue (requeueEnds).
	queue *workqueue.Queue[*managedVolume, loopState]
	// series deletes the metric series of volumes gone for a retention.
	series *seriesRetention
	// requests are the node's CertificateRequests, keys the private keys of submitted requests,
	// admission the node-wide limits on attempts.
	requests  *certrequests.View
	keys      *pendingkeys.Keys
	admission *admission.Limits
	// health is what is known of the apiserver's health: it tells the loops when an apiserver
	// they could not reach is back (not with Options.DisableOutageProbe).
	health *apihealth.Health
}

// NewManager validates opts, starts the informer on the node's CertificateRequests, waits for
// its cache, and resumes management of every stored volume whose metadata says it is mounted.
// A volume whose metadata cannot be read is logged and skipped.
func NewManager(opts Options) (*Manager, error) {
	ownCreates := opts.ClientForMetadata == nil
	inCode := opts
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	operatorRaw, operator, err := csilibdebug.FromEnvironment()
	if err != nil {
		return nil, err
	}
	opts, settingsTaken := opts.withOperatorSettings(inCode, operator)
	nodeHash := util.HashIdentifier(opts.NodeID)
	log := opts.Log.WithName("manager")
	log.Info("Behaviours that differ from upstream v0.12.0: 1 on, 0 off as upstream, or the driver's value (docs/csilibdebug.md)",
		append([]any{csilibdebug.EnvironmentVariable, operatorRaw}, settingsTaken...)...)
	m := &Manager{
		opts:          opts,
		nodeHash:      nodeHash,
		log:           log,
		life:          lifetime.New(),
		createAccount: apicall.PodAccount,
		registry:      newRegistry(),
		keys:          pendingkeys.New(log, opts.MetadataReader),
	}
	if ownCreates {
		m.createAccount = apicall.DriverAccount
	}
	m.series = newSeriesRetention(opts.Clock, m.DeleteVolumeMetricSeries)
	limits := admission.Config{
		Clock:          opts.Clock,
		Slots:          opts.MaxConcurrentIssuances,
		WaitingChanged: func(n int) { opts.Metrics.SetAdmissionWaiting(nodeHash, n) },
		Waited:         func() { opts.Metrics.IncrementAdmissionWaits(nodeHash) },
	}
	if rl := opts.IssuanceRateLimit; rl != nil {
		limits.PerSecond, limits.Burst = rl.PerSecond, rl.Burst
	}
	m.admission = admission.New(limits)
	var probe func(context.Context) error
	if !opts.DisableOutageProbe {
		probe = apihealth.APIServerProbe(opts.Client)
	}
	m.health = apihealth.New(opts.Clock, probe, m.life, m.outageEnded)
	if m.requests, err = certrequests.New(opts.Client, opts.Clock, nodeHash, m.health, !opts.DisableWatchFallbackReads, m.keys.Seen, m.keys.Drop); err != nil {
		m.life.End()
		return nil, err
	}
	var conditions *podcondition.Writer
	if opts.PodCondition != nil {
		conditions = podcondition.New(podcondition.Config{
			Type:      opts.PodCondition.Type,
			Client:    opts.PodCondition.Client,
			Clock:     opts.Clock,
			Log:       log,
			PodEnding: m.PodTerminating,
		})
		go conditions.Run()
	}
	m.status = newStatus(opts, nodeHash, m.requests.NewestNotAfter, conditions)
	m.queue = workqueue.New(opts.Clock, m.life, m.process)
	accessChecked := make(chan struct{})
	if opts.DisableAccessCheck {
		close(accessChecked)
	} else {
		accesscheck.Start(m.life, opts.Client.Discovery().RESTClient(), requiredAccess(opts, ownCreates), log, accessChecked)
	}
	if h := opts.testHooks.accessCheckStarted; h != nil {
		h(accessChecked)
	}
	synced := true
	if err := m.requests.Start(m.life.Context()); errors.Is(err, ErrPermissionDenied) {
		// Never a reason not to start: publishes answer PermissionDenied until it is granted.
		log.Error(err, "The CertificateRequest informer cannot sync; every issuance fails until the permission is granted")
		synced = false
	} else if err != nil {
		m.Stop()
		return nil, err
	}

	m.resume(synced)
	return m, nil
}

// NewManagerOrDie is NewManager that panics on error.
func NewManagerOrDie(opts Options) *Manager {
	m, err := NewManager(opts)
	if err != nil {
		panic(err)
	}
	return m
}

// CertificateRequestLister lists the node's CertificateRequests from the manager's informer
// cache. It exists only once NewManager has returned, so it cannot be the lister passed to
// metrics.New, whose result NewManager takes (see metrics.New for what to pass).
func (m *Manager) CertificateRequestLister() cmlisters.CertificateRequestLister {
	return m.requests.Lister()
}

// ManageVolume starts managing a volume in the background: its loop issues a certificate when
// due. It reports true only if this call registered the volume; false if it was already managed
// or the manager is stopped. It reads nothing and never blocks.
func (m *Manager) ManageVolume(volumeID string) (managed bool) {
	v, _ := m.register(volumeID, nil, false)
	if v == nil {
		return false
	}
	m.startLoop(v, nil)
	return true
}

// ManageVolumeImmediate registers a volume and, if it has no certificate (NextIssuanceTime nil
// or zero), makes one issuance attempt under ctx before starting the background loop:
//   - already managed: (false, nil) at once, no attempt;
//   - stopped: (false, error);
//   - metadata unreadable: (true, "reading metadata: ..."), left registered without a loop;
//   - the attempt fails: (true, err), left registered without a loop (the caller unmanages);
//     a closed readiness gate gives an error matching ErrNotReadyToRequest;
//   - otherwise the loop starts: (true, nil).
func (m *Manager) ManageVolumeImmediate(ctx context.Context, volumeID string) (managed bool, err error) {
	v, err := m.register(volumeID, nil, false)
	if v == nil {
		return false, err
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		return true, fmt.Errorf("reading metadata: %w", err)
	}
	m.registry.setPod(v, podOf(meta))
	m.status.noteCertificate(v, hasCertificate(meta), time.Time{}, false)
	return true, m.issueFirst(ctx, v, meta, false)
}

// ManageVolumeForPublish is what a NodePublishVolume needs of the manager, given the volume's
// stored metadata, read once by the caller after registering it:
//   - a managed volume whose certificate is not due (IsVolumeReady): nil, nothing done;
//   - otherwise the readiness gate is asked, once. Closed: with continueOnNotReady the volume
//     is handed to the background loop (ManageVolume) and the result is nil; without, a
//     *NotReadyToRequestError and nothing done;
//   - open: as ManageVolumeImmediate, on the given metadata and without asking the gate again,
//     except that a failed attempt ends the volume's registration. A volume already managed
//     makes no attempt (nil); a stopped manager gives an error.
//
// The publish path reads the metadata once and asks the gate once in all.
func (m *Manager) ManageVolumeForPublish(ctx context.Context, meta metadata.Metadata, continueOnNotReady bool) error {
	if v := m.registry.get(meta.VolumeID); v != nil && isReady(meta, m.opts.Clock.Now()) {
		return nil
	}
	ready, reason := m.opts.ReadyToRequest(meta)
	if !ready {
		if !continueOnNotReady {
			return &NotReadyToRequestError{Reason: reason}
		}
		m.log.Info("Volume not ready to request a certificate; the background loop will issue it", "volume_id", meta.VolumeID,
			"pod", meta.VolumeContext[metadata.PodNameVolumeContextKey], "namespace", meta.VolumeContext[metadata.PodNamespaceVolumeContextKey], "reason", reason)
	}
	v, err := m.register(meta.VolumeID, &meta, false)
	switch {
	case v == nil && ready:
		return err
	case v == nil:
		return nil
	case !ready:
		m.startLoop(v, &meta)
		return nil
	}
	if err := m.issueFirst(ctx, v, meta, true); err != nil {
		// The registration ends with its failed first attempt, so that kubelet's retry
		// registers the volume again and attempts again (resuming the request still pending,
		// whose key stays held). Left registered without a loop, as ManageVolumeImmediate
		// leaves it, a volume kept mounted by the node server would answer the retry with
		// "already managed" and never be renewed.
		m.end(v, true)
		return err
	}
	return nil
}

// UnmanageVolume stops managing a volume. It cancels the volume's loop and any attempt in
// flight, and returns once none of them can write any more: it waits for a WriteKeypair of this
// volume that is already running, and for nothing else (a driver function that ignores its
// context cannot hang it). Pending keys and metric series stay: kubelet may publish the volume
// again (see RetireVolumeMetricSeries for a volume gone). Unmanaging an unknown volume
// does nothing.
func (m *Manager) UnmanageVolume(volumeID string) {
	if v := m.registry.get(volumeID); v != nil {
		m.end(v, true)
	}
}

// DeleteVolumeMetricSeries deletes a volume's per-volume metric series at once.
func (m *Manager) DeleteVolumeMetricSeries(volumeID string) {
	m.opts.Metrics.DeleteVolumeSeries(m.nodeHash, volumeID)
}

// RetireVolumeMetricSeries deletes a volume's per-volume metric series once
// MetricSeriesRetention has passed on Options.Clock, unless the volume is managed again before
// then. The node server calls it after a successful NodeUnpublishVolume and after a failed first
// publish (kubelet usually retries that volume within the retention, which keeps its series):
// until the retention ends, /metrics prints the volume's final counts, as upstream does.
func (m *Manager) RetireVolumeMetricSeries(volumeID string) {
	if m.opts.Metrics != nil {
		m.series.retire(volumeID)
	}
}

// IsVolumeReady reports whether a managed volume has a certificate that is not yet due for
// renewal: its NextIssuanceTime is set and the clock is not after it.
func (m *Manager) IsVolumeReady(volumeID string) bool {
	if m.registry.get(volumeID) == nil {
		return false
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	return err == nil && isReady(meta, m.opts.Clock.Now())
}

// IsVolumeReadyToRequest asks the driver's ReadyToRequest about a stored volume. If the
// metadata cannot be read it logs the error and reports (false, "").
func (m *Manager) IsVolumeReadyToRequest(volumeID string) (bool, string) {
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		m.log.Error(err, "Reading metadata", "volume_id", volumeID)
		return false, ""
	}
	return m.opts.ReadyToRequest(meta)
}

// Requeue makes a managed volume re-evaluate now if it is waiting because its gate was closed or
// its certificate is not yet due. It never shortens the wait after an issuance error. One that
// comes while the volume's loop takes a turn is answered by the turn's attempt, or ends the wait
// the turn decides (see the package documentation). A driver calls it when a gate condition may
// have changed.
func (m *Manager) Requeue(volumeID string) {
	if v := m.registry.get(volumeID); v != nil {
		m.queue.Wake(v, requeueEnds)
	}
}

// RequeuePod calls Requeue for every managed volume of the pod with the given UID, typically
// from a pod informer's update handler.
func (m *Manager) RequeuePod(podUID types.UID) {
	for _, id := range m.registry.podVolumes(podUID) {
		m.Requeue(id)
	}
}

// PodTerminating tells the manager that the pod with the given UID is terminating or gone,
// typically from a pod informer's update handler (a deletion timestamp) or delete handler. An
// attempt in flight for any of its volumes, a publish's included, ends at once with an error
// matching ErrPodTerminating, and no further attempt is made for them: nothing more is created
// for the pod. The volumes stay managed until they are unmanaged (kubelet unpublishes them).
// The manager remembers the pod for an hour, so a publish that arrives later is refused too.
func (m *Manager) PodTerminating(podUID types.UID) {
	if podUID == "" {
		return
	}
	if n := m.registry.podTerminates(podUID, m.opts.Clock.Now()); n > 0 {
		m.log.Info("Pod is terminating: ending its volumes' issuance", "pod_uid", podUID, "volumes", n)
	}
}

// Stop stops every renewal loop and the informer. It waits for the manager's own goroutines,
// and for a store call one of them is making (Options.MetadataReader, the pending-key store),
// but never for the driver's functions (ReadyToRequest, GeneratePrivateKey, GenerateRequest,
// SignRequest, ClientForMetadata, WriteKeypair): a loop inside one exits as soon as the
// function returns, doing nothing more for its volume (it gives back only its own bookkeeping:
// its place in the work queue, its admission slot). Volumes are not modified. After Stop, ManageVolume reports false and
// ManageVolumeImmediate an error. Stop may be called more than once.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		vols := m.registry.stop()
		m.status.stop()
		m.life.Cancel()
		for _, v := range vols {
			m.end(v, false) // no fence: Stop must not wait for a WriteKeypair
		}
		m.queue.Stop()
		m.keys.Stop()
		m.series.stop()
		m.life.End()
		m.status.stopConditionWriter()
		m.admission.Close()
		m.requests.Shutdown()
	})
}

// end ends a volume's registration, the one way out of every registration (UnmanageVolume, Stop,
// its metadata gone, a publish's failed first attempt): the registry forgets and closes it (no
// loop starts for it, and its attempt in flight ends), the status stops showing it, and the work
// queue forgets it (a turn running finishes first, and its loop ends). fence also waits for a
// WriteKeypair already running (UnmanageVolume's promise). It does nothing if v is no longer
// registered.
func (m *Manager) end(v *managedVolume, fence bool) {
	if !m.registry.remove(v) {
		return
	}
	m.status.remove(v)
	m.queue.Remove(v)
	if fence {
		v.fence()
	}
}

// register adds a volume to the managed set, shown in its state, without starting its loop,
// and keeps its metric series (a retirement pending for the ID is cancelled); meta, if not nil,
// is the volume's metadata (its pod, and whether it records a certificate), and resumed says it
// comes from stored state at start-up. It returns nil if the volume is already managed, with
// errStopped if the manager is stopped.
func (m *Manager) register(id string, meta *metadata.Metadata, resumed bool) (*managedVolume, error) {
	v := newVolume(m.log, id, m.opts.Clock.Now(), resumed)
	var pod *volumePod
	if meta != nil {
		pod = podOf(*meta)
	}
	if added, err := m.registry.add(v, pod); !added {
		return nil, err
	}
	m.status.add(v, meta != nil && hasCertificate(*meta))
	m.series.keep(id)
	return v, nil
}

// startLoop starts the volume's renewal loop once: it puts the volume on the work queue, ready
// for its first turn. If known is non-nil it is the volume's metadata, just read, which saves
// the loop its first read.
func (m *Manager) startLoop(v *managedVolume, known *metadata.Metadata) {
	if v.startsLoop() {
		m.queue.Add(v, loopState{renewal: *m.opts.RenewalBackoffConfig, gate: *m.opts.GateBackoffConfig, known: known, first: true})
		if h := m.opts.testHooks.loopStarted; h != nil {
			h(v.id)
		}
	}
}

// outageEnded ends the waits of the loops whose attempt failed in the outage that ended.
func (m *Manager) outageEnded(id apihealth.ID) {
	m.queue.WakeAll(func(s loopState) bool { return s.wait == waitAfterOutage && s.outage == id })
}
