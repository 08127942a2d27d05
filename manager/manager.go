package manager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cminformers "github.com/cert-manager/cert-manager/pkg/client/informers/externalversions"
	cmlisters "github.com/cert-manager/cert-manager/pkg/client/listers/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/cert-manager/csi-lib/internal/api"
	"github.com/cert-manager/csi-lib/internal/api/util"
	"github.com/cert-manager/csi-lib/metadata"
)

const (
	// issueTimeout bounds one background issuance attempt, on the injected clock.
	issueTimeout = 60 * time.Second

	// minWaitAfterSuccess is the least a loop waits after a success, even when the new
	// certificate is already due (signer or clock skew), so that it never becomes a hot loop.
	minWaitAfterSuccess = time.Second

	// volumeHashIndex indexes the informer's requests by the volume-hash label.
	volumeHashIndex = "volumeIDHash"
)

// Manager obtains and renews certificates for the volumes it manages. Create it with NewManager;
// all methods are safe for concurrent use.
type Manager struct {
	opts         Options
	log          logr.Logger
	clock        clock.Clock
	nodeNameHash string

	factory  cminformers.SharedInformerFactory
	informer cache.SharedIndexInformer
	lister   cmlisters.CertificateRequestLister

	ctx      context.Context // ends on Stop
	cancel   context.CancelFunc
	stopOnce sync.Once
	active   *activity

	mu         sync.Mutex
	stopped    bool
	volumes    map[string]*volume
	podVolumes map[types.UID]map[string]struct{}
	// pendingKeys holds the private keys of submitted requests whose key pair is not yet
	// written, by request key (see requestKey). They outlive UnmanageVolume, so that kubelet's
	// retry of a publish resumes the same request; a key is dropped once its key pair is
	// written, or when its request is deleted (the request's owner reference lets the garbage
	// collector delete it with the pod).
	pendingKeys map[string]pendingKey
	// created orders the requests this process created, by request key: the apiserver's
	// CreationTimestamp has one-second resolution.
	created    map[string]uint64
	createdSeq uint64
	// keyFileMu serialises reads and writes of persisted pending keys (see pendingkeys.go):
	// informer events remove them while attempts write them. It guards sweptKeys too.
	keyFileMu sync.Mutex
	// sweptKeys are the pending keys the store's start-up sweep kept, by volume ID: the request
	// each belongs to. stopSweptKeyExpiry stops the end of their grace period.
	sweptKeys          map[string]string
	stopSweptKeyExpiry func() bool
	// watchers are notified when the informer sees a change to a request, by request key.
	watchers map[string]map[chan struct{}]struct{}
	// stateCounts counts the managed volumes by state (see volumeStatus).
	stateCounts map[string]int

	// admission bounds the attempts past the readiness gate (see admit).
	admission *admission
}

type pendingKey struct {
	volumeID string
	key      any
}

// volume is the manager's state for one managed volume.
type volume struct {
	id        string
	managedAt time.Time

	ctx    context.Context // ends on UnmanageVolume or Stop
	cancel context.CancelFunc

	// requeue holds at most one pending Requeue.
	requeue chan struct{}
	// attempt is a one-slot semaphore: attempts for one volume never overlap.
	attempt chan struct{}
	// lastWrite is the last key pair written for this registration; nil before the first.
	lastWrite atomic.Pointer[keypairWrite]

	// fence is held while WriteKeypair runs; fenced is set under it by UnmanageVolume, after
	// which nothing writes for this registration any more.
	fence  sync.Mutex
	fenced bool

	// Guarded by Manager.mu.
	podUID      types.UID
	pod         *corev1.ObjectReference // for events; nil without pod name, namespace and UID
	log         logr.Logger
	loopStarted bool
	status      volumeStatus
	watch       certificateWatch
}

// keypairWrite records a successful issuance of a volume.
type keypairWrite struct {
	// at is when the key pair was written, on the injected clock: the loop attempts the
	// volume again no sooner than minWaitAfterSuccess after it.
	at time.Time
	// due is the certificate's default next issuance time, used when WriteKeypair did not
	// persist a future NextIssuanceTime.
	due time.Time
}

// NewManager validates opts, starts the informer on the node's CertificateRequests, waits for
// its cache, and resumes management of every stored volume whose metadata says it is mounted.
// A volume whose metadata cannot be read is logged and skipped.
func NewManager(opts Options) (*Manager, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	nodeHash := util.HashIdentifier(opts.NodeID)
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		opts:         opts,
		log:          opts.Log.WithName("manager"),
		clock:        opts.Clock,
		nodeNameHash: nodeHash,
		ctx:          ctx,
		cancel:       cancel,
		active:       newActivity(),
		volumes:      make(map[string]*volume),
		podVolumes:   make(map[types.UID]map[string]struct{}),
		pendingKeys:  make(map[string]pendingKey),
		created:      make(map[string]uint64),
		sweptKeys:    make(map[string]string),
		watchers:     make(map[string]map[chan struct{}]struct{}),
		stateCounts:  make(map[string]int),
	}
	m.admission = newAdmission(opts, m.afterFunc,
		func(n int) { opts.Metrics.SetAdmissionWaiting(nodeHash, n) },
		func() { opts.Metrics.IncrementAdmissionWaits(nodeHash) })

	selector := labels.SelectorFromSet(labels.Set{api.NodeIDHashLabelKey: nodeHash}).String()
	m.factory = cminformers.NewSharedInformerFactoryWithOptions(opts.Client, 0,
		cminformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	requests := m.factory.Certmanager().V1().CertificateRequests()
	m.informer = requests.Informer()
	if err := m.informer.AddIndexers(cache.Indexers{volumeHashIndex: indexByVolumeHash}); err != nil {
		cancel()
		return nil, fmt.Errorf("adding index to CertificateRequest informer: %w", err)
	}
	if _, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.requestChanged,
		UpdateFunc: func(_, obj any) { m.requestChanged(obj) },
		DeleteFunc: m.requestDeleted,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("adding CertificateRequest event handler: %w", err)
	}
	m.lister = requests.Lister()
	m.factory.Start(ctx.Done())
	if err := m.waitForSync(ctx); err != nil {
		m.Stop()
		return nil, fmt.Errorf("CertificateRequest informer did not sync: %w", err)
	}

	m.loadSweptKeys()
	m.resumeMountedVolumes()
	m.mu.Lock()
	m.publishStatesLocked() // every state, zeros included, from the start
	m.mu.Unlock()
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

func (m *Manager) resumeMountedVolumes() {
	ids, err := m.opts.MetadataReader.ListVolumes()
	if err != nil {
		m.log.Error(err, "Cannot list stored volumes; none resumed")
		return
	}
	resumed := 0
	for _, id := range ids {
		meta, err := m.opts.MetadataReader.ReadMetadata(id)
		if err != nil {
			m.log.Error(err, "Cannot read volume metadata; not resuming it", "volume_id", id)
			continue
		}
		if !meta.Mounted {
			m.log.V(2).Info("Not resuming volume whose publish never succeeded", "volume_id", id)
			continue
		}
		if v := m.register(id); v != nil {
			m.noteMetadata(v, meta)
			m.startLoop(v, &meta)
			resumed++
		}
	}
	m.log.Info("Resumed management of mounted volumes", "count", resumed, "stored", len(ids))
}

// CertificateRequestLister lists the node's CertificateRequests from the manager's informer
// cache, for example for metrics.New.
func (m *Manager) CertificateRequestLister() cmlisters.CertificateRequestLister { return m.lister }

// register adds a volume to the managed set without starting its loop. It returns nil if the
// volume is already managed or the manager is stopped.
func (m *Manager) register(id string) *volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	if _, ok := m.volumes[id]; ok {
		return nil
	}
	ctx, cancel := context.WithCancel(m.ctx)
	v := &volume{
		id:        id,
		log:       m.log.WithValues("volume_id", id),
		managedAt: m.clock.Now(),
		ctx:       ctx,
		cancel:    cancel,
		requeue:   make(chan struct{}, 1),
		attempt:   make(chan struct{}, 1),
	}
	m.volumes[id] = v
	m.stateCounts[v.status.state()]++
	m.publishStatesLocked()
	return v
}

// noteMetadata records what the manager learns from a volume's metadata: its pod (for
// RequeuePod, events and the log) and whether it has a certificate (for its state).
func (m *Manager) noteMetadata(v *volume, meta metadata.Metadata) {
	uid := types.UID(meta.VolumeContext[metadata.PodUIDVolumeContextKey])
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.volumes[v.id] != v {
		return
	}
	if hasCertificate(meta) && !v.status.hasCertificate {
		m.updateStatusLocked(v, func(s *volumeStatus) { s.hasCertificate = true })
	}
	if v.pod == nil {
		v.pod = podReference(meta)
	}
	if uid == v.podUID {
		return
	}
	m.dropPodIndex(v)
	v.podUID = uid
	v.log = m.log.WithValues("volume_id", v.id, "pod", meta.VolumeContext[metadata.PodNameVolumeContextKey])
	if uid != "" {
		if m.podVolumes[uid] == nil {
			m.podVolumes[uid] = make(map[string]struct{})
		}
		m.podVolumes[uid][v.id] = struct{}{}
	}
}

// dropPodIndex removes v from the pod index; m.mu is held.
func (m *Manager) dropPodIndex(v *volume) {
	if set := m.podVolumes[v.podUID]; set != nil {
		delete(set, v.id)
		if len(set) == 0 {
			delete(m.podVolumes, v.podUID)
		}
	}
}

func (m *Manager) logFor(v *volume) logr.Logger {
	m.mu.Lock()
	defer m.mu.Unlock()
	return v.log
}

// startLoop starts the volume's renewal loop once. If known is non-nil it is the volume's
// metadata, just read, which saves the loop its first read.
func (m *Manager) startLoop(v *volume, known *metadata.Metadata) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.volumes[v.id] != v || v.loopStarted {
		return
	}
	tr := m.active.track()
	if tr == nil {
		return
	}
	v.loopStarted = true
	go m.run(v, tr, known)
}

// ManageVolume starts managing a volume in the background: its loop issues a certificate when
// due. It reports true only if this call registered the volume; false if it was already managed
// or the manager is stopped. It reads nothing and never blocks.
func (m *Manager) ManageVolume(volumeID string) (managed bool) {
	v := m.register(volumeID)
	if v == nil {
		return false
	}
	m.startLoop(v, nil)
	return true
}

// ManageVolumeImmediate registers a volume and, if it has no certificate (NextIssuanceTime nil
// or zero), makes one issuance attempt under ctx before starting the background loop, as
// upstream does:
//   - already managed: (false, nil) at once, no attempt;
//   - stopped: (false, error);
//   - metadata unreadable: (true, "reading metadata: ..."), left registered without a loop;
//   - the attempt fails: (true, err), left registered without a loop (the caller unmanages);
//     a closed readiness gate gives an error matching ErrNotReadyToRequest;
//   - otherwise the loop starts: (true, nil).
func (m *Manager) ManageVolumeImmediate(ctx context.Context, volumeID string) (managed bool, err error) {
	v := m.register(volumeID)
	if v == nil {
		if m.isStopped() {
			return false, errStopped
		}
		return false, nil
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		return true, fmt.Errorf("reading metadata: %w", err)
	}
	m.noteMetadata(v, meta)
	if !hasCertificate(meta) {
		if err := m.attemptNow(ctx, v); err != nil {
			return true, err
		}
		m.startLoop(v, nil)
		return true, nil
	}
	m.startLoop(v, &meta)
	return true, nil
}

// hasCertificate reports whether metadata records an issued certificate: a NextIssuanceTime
// that is set and not zero (ContinueOnNotReady registers a zero time).
func hasCertificate(meta metadata.Metadata) bool {
	return meta.NextIssuanceTime != nil && !meta.NextIssuanceTime.IsZero()
}

// UnmanageVolume stops managing a volume. It cancels the volume's loop and any attempt in
// flight, and returns once none of them can write any more: it waits for a WriteKeypair of this
// volume that is already running, and for nothing else (a driver function that ignores its
// context cannot hang it). Pending keys and metric series stay: kubelet may publish the volume
// again (see DeleteVolumeMetricSeries for a volume gone for good). Unmanaging an unknown volume
// does nothing.
func (m *Manager) UnmanageVolume(volumeID string) {
	m.mu.Lock()
	v, ok := m.volumes[volumeID]
	if ok {
		m.unregisterLocked(v)
	}
	m.mu.Unlock()
	if ok {
		m.cancelAndFence(v)
	}
}

// unregisterLocked removes v from the managed set, its state count and its certificate
// timers; m.mu is held.
func (m *Manager) unregisterLocked(v *volume) {
	if m.volumes[v.id] == v {
		delete(m.volumes, v.id)
		m.stateCounts[v.status.state()]--
		m.publishStatesLocked()
	}
	m.dropPodIndex(v)
	m.stopWatchLocked(v)
}

// cancelAndFence cancels v and waits for a WriteKeypair in flight; after it nothing writes for v.
func (m *Manager) cancelAndFence(v *volume) {
	v.cancel()
	v.fence.Lock()
	v.fenced = true
	v.fence.Unlock()
}

// DeleteVolumeMetricSeries deletes a volume's per-volume metric series. The node server calls
// it when the volume is gone for good (a successful NodeUnpublishVolume); a failed publish keeps
// them, because kubelet retries the same volume.
func (m *Manager) DeleteVolumeMetricSeries(volumeID string) {
	m.opts.Metrics.DeleteVolumeSeries(m.nodeNameHash, volumeID)
}

// IsVolumeReady reports whether a managed volume has a certificate that is not yet due for
// renewal: its NextIssuanceTime is set and the clock is not after it.
func (m *Manager) IsVolumeReady(volumeID string) bool {
	if !m.isManaged(volumeID) {
		return false
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil || meta.NextIssuanceTime == nil {
		return false
	}
	return !m.clock.Now().After(*meta.NextIssuanceTime)
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

func (m *Manager) isManaged(volumeID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.volumes[volumeID]
	return ok
}

func (m *Manager) isStopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// Requeue makes a managed volume re-evaluate now if it is waiting because its gate was closed or
// its certificate is not yet due. It never shortens the wait after an issuance error. A driver
// calls it when a gate condition may have changed.
func (m *Manager) Requeue(volumeID string) {
	m.mu.Lock()
	v := m.volumes[volumeID]
	m.mu.Unlock()
	if v != nil {
		select {
		case v.requeue <- struct{}{}:
		default:
		}
	}
}

// RequeuePod calls Requeue for every managed volume of the pod with the given UID, typically
// from a pod informer's update handler.
func (m *Manager) RequeuePod(podUID types.UID) {
	m.mu.Lock()
	ids := make([]string, 0, len(m.podVolumes[podUID]))
	for id := range m.podVolumes[podUID] {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.Requeue(id)
	}
}

// Stop stops every renewal loop and the informer. It waits for the manager's own goroutines,
// but never for a driver-supplied function: a loop inside one exits, touching nothing, as soon
// as the function returns. Volumes are not modified. After Stop, ManageVolume reports false and
// ManageVolumeImmediate an error. Stop may be called more than once.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.stopped = true
		vols := make([]*volume, 0, len(m.volumes))
		for _, v := range m.volumes {
			vols = append(vols, v)
			m.stopWatchLocked(v)
		}
		m.mu.Unlock()
		m.cancel()
		for _, v := range vols {
			// Not cancelAndFence: Stop must not wait for a WriteKeypair.
			v.cancel()
		}
		if m.stopSweptKeyExpiry != nil {
			m.stopSweptKeyExpiry()
		}
		m.active.closeAndWait()
		m.admission.close()
		m.factory.Shutdown()
	})
}

// waitForSync waits until the informer has synced or ctx ends. It reacts to the informer's own
// signal; no timer is involved.
func (m *Manager) waitForSync(ctx context.Context) error {
	select {
	case <-m.informer.HasSyncedChecker().Done():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func indexByVolumeHash(obj any) ([]string, error) {
	req, ok := obj.(*cmapi.CertificateRequest)
	if !ok {
		return nil, nil
	}
	if h, ok := req.Labels[api.VolumeIDHashLabelKey]; ok {
		return []string{h}, nil
	}
	return nil, nil
}
