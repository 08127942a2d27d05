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
	// issueTimeout bounds one issuance attempt, on the injected clock.
	issueTimeout = 60 * time.Second

	// volumeHashIndex indexes the informer's requests by the volume-hash label.
	volumeHashIndex = "volumeIDHash"

	podUIDKey  = "csi.storage.k8s.io/pod.uid"
	podNameKey = "csi.storage.k8s.io/pod.name"
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
	loops    sync.WaitGroup

	mu         sync.Mutex
	stopped    bool
	volumes    map[string]*volume
	podVolumes map[types.UID]map[string]struct{}
	// pendingKeys holds the private keys of submitted requests that are not yet issued, by
	// "namespace/name". They are never persisted.
	pendingKeys map[string]pendingKey
	// watchers are notified when the informer sees a change to a request, by "namespace/name".
	watchers map[string]map[chan struct{}]struct{}
}

type pendingKey struct {
	volumeID string
	key      any
}

// volume is the manager's state for one managed volume.
type volume struct {
	id        string
	podUID    types.UID
	log       logr.Logger
	managedAt time.Time

	ctx    context.Context // ends on UnmanageVolume or Stop
	cancel context.CancelFunc

	// requeue holds at most one pending Requeue.
	requeue chan struct{}
	// attempt is a one-slot semaphore: attempts for one volume never overlap.
	attempt chan struct{}
	// fallbackDue is the default next issuance time of the last success, used when
	// WriteKeypair did not persist a future NextIssuanceTime.
	fallbackDue atomic.Pointer[time.Time]

	loopStarted bool          // guarded by Manager.mu
	done        chan struct{} // closed when the loop has exited (or was never started)
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
		volumes:      make(map[string]*volume),
		podVolumes:   make(map[types.UID]map[string]struct{}),
		pendingKeys:  make(map[string]pendingKey),
		watchers:     make(map[string]map[chan struct{}]struct{}),
	}

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
	if err := waitForSync(ctx, m.informer.HasSynced); err != nil {
		m.Stop()
		return nil, fmt.Errorf("CertificateRequest informer did not sync: %w", err)
	}

	m.resumeMountedVolumes()
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
		if v, created := m.register(id, meta); created {
			m.startLoop(v, nil, &meta)
			resumed++
		}
	}
	m.log.Info("Resumed management of mounted volumes", "count", resumed, "stored", len(ids))
}

// CertificateRequestLister lists the node's CertificateRequests from the manager's informer
// cache, for example for metrics.New.
func (m *Manager) CertificateRequestLister() cmlisters.CertificateRequestLister { return m.lister }

// register adds a volume to the managed set without starting its loop. It returns the volume and
// whether this call created it; nil if the manager is stopped.
func (m *Manager) register(id string, meta metadata.Metadata) (*volume, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, false
	}
	if v, ok := m.volumes[id]; ok {
		return v, false
	}
	ctx, cancel := context.WithCancel(m.ctx)
	v := &volume{
		id:        id,
		podUID:    types.UID(meta.VolumeContext[podUIDKey]),
		log:       m.log.WithValues("volume_id", id, "pod", meta.VolumeContext[podNameKey]),
		managedAt: m.clock.Now(),
		ctx:       ctx,
		cancel:    cancel,
		requeue:   make(chan struct{}, 1),
		attempt:   make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	m.volumes[id] = v
	if v.podUID != "" {
		if m.podVolumes[v.podUID] == nil {
			m.podVolumes[v.podUID] = make(map[string]struct{})
		}
		m.podVolumes[v.podUID][id] = struct{}{}
	}
	return v, true
}

// startLoop starts the volume's renewal loop once. If first is non-nil it is the outcome of an
// attempt already made, which the loop classifies before anything else. If known is non-nil it
// is the volume's metadata, just read, which saves the loop its first read.
func (m *Manager) startLoop(v *volume, first *error, known *metadata.Metadata) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.volumes[v.id] != v || v.loopStarted {
		// Never start a goroutine after Stop has waited for them all.
		return false
	}
	v.loopStarted = true
	m.loops.Add(1)
	go m.run(v, first, known)
	return true
}

// ManageVolume starts managing a volume in the background: its loop issues a certificate when
// due. It returns false only if the manager is stopped.
func (m *Manager) ManageVolume(volumeID string) (managed bool) {
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		m.log.Error(err, "Cannot manage volume: reading metadata failed", "volume_id", volumeID)
		return false
	}
	v, _ := m.register(volumeID, meta)
	if v == nil {
		return false
	}
	m.startLoop(v, nil, &meta)
	return true
}

// ManageVolumeImmediate starts managing a volume and, if it has no certificate yet, makes one
// issuance attempt right away, returning its error (ErrNotReadyToRequest when the gate is
// closed) so the caller can decide what to do; the background loop starts either way. If the
// volume is already managed and has no certificate, it makes an attempt too (never overlapping
// the loop's), so a success always means the volume has a certificate.
func (m *Manager) ManageVolumeImmediate(ctx context.Context, volumeID string) (managed bool, err error) {
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		return false, fmt.Errorf("reading metadata of volume %q: %w", volumeID, err)
	}
	v, created := m.register(volumeID, meta)
	if v == nil {
		return false, errStopped
	}
	if !created {
		return true, m.attemptIfUnissued(ctx, v)
	}
	var first *error
	if meta.NextIssuanceTime == nil {
		err := m.attemptOnce(ctx, v)
		first = &err
	}
	m.startLoop(v, first, nil)
	if first != nil {
		return true, *first
	}
	return true, nil
}

// attemptIfUnissued makes an attempt for an already managed volume unless it has a certificate.
func (m *Manager) attemptIfUnissued(ctx context.Context, v *volume) error {
	release, err := m.acquireAttempt(ctx, v)
	if err != nil {
		return err
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(v.id)
	if err != nil {
		release()
		return err
	}
	if meta.NextIssuanceTime != nil {
		release()
		return nil
	}
	return m.attemptLocked(ctx, v, release)
}

// UnmanageVolume stops managing a volume and waits for its loop to exit, so that nothing
// writes to the volume once it returns. Pending keys of the volume are forgotten and its
// per-volume metric series deleted. Unmanaging an unknown volume does nothing.
func (m *Manager) UnmanageVolume(volumeID string) {
	v := m.forget(volumeID)
	if v == nil {
		return
	}
	<-v.done
}

// forget removes a volume from the managed set and cancels it, without waiting.
func (m *Manager) forget(volumeID string) *volume {
	m.mu.Lock()
	v, ok := m.volumes[volumeID]
	if !ok {
		m.mu.Unlock()
		return nil
	}
	delete(m.volumes, volumeID)
	if set := m.podVolumes[v.podUID]; set != nil {
		delete(set, volumeID)
		if len(set) == 0 {
			delete(m.podVolumes, v.podUID)
		}
	}
	for name, pk := range m.pendingKeys {
		if pk.volumeID == volumeID {
			delete(m.pendingKeys, name)
		}
	}
	if !v.loopStarted {
		close(v.done)
	}
	m.mu.Unlock()
	v.cancel()
	m.opts.Metrics.ForgetVolume(m.nodeNameHash, volumeID)
	return v
}

// IsVolumeReady reports whether a managed volume has a certificate that is not yet due for
// renewal.
func (m *Manager) IsVolumeReady(volumeID string) bool {
	if !m.isManaged(volumeID) {
		return false
	}
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil || meta.NextIssuanceTime == nil {
		return false
	}
	return m.clock.Now().Before(*meta.NextIssuanceTime)
}

// IsVolumeReadyToRequest asks the driver's ReadyToRequest about a stored volume.
func (m *Manager) IsVolumeReadyToRequest(volumeID string) (bool, string) {
	meta, err := m.opts.MetadataReader.ReadMetadata(volumeID)
	if err != nil {
		return false, fmt.Sprintf("reading metadata: %v", err)
	}
	return m.opts.ReadyToRequest(meta)
}

func (m *Manager) isManaged(volumeID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.volumes[volumeID]
	return ok
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

// Stop stops every renewal loop and the informer, and waits for them to exit. Volumes are not
// modified. Stop may be called more than once.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.stopped = true
		m.mu.Unlock()
		m.cancel()
		m.loops.Wait()
		m.factory.Shutdown()
	})
}

// syncPollInterval is how often waitForSync checks the informer (cache.WaitForCacheSync checks
// every 100 ms, which would dominate start-up).
const syncPollInterval = 5 * time.Millisecond

// waitForSync waits until synced reports true or ctx ends.
func waitForSync(ctx context.Context, synced cache.InformerSynced) error {
	for !synced() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(syncPollInterval):
		}
	}
	return nil
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
