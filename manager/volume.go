package manager

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// volume is the manager's state for one registration of a volume: from ManageVolume (or a
// publish, or the resumption at start-up) to UnmanageVolume, Stop or the loss of its metadata.
type volume struct {
	id        string
	managedAt time.Time

	// ctx ends with the registration; the contexts of its attempts derive from it.
	ctx volumeContext

	// requeue holds at most one pending Requeue.
	requeue chan struct{}
	// lastWrite is the last key pair written for this registration; nil before the first.
	lastWrite atomic.Pointer[keypairWrite]
	// log is the manager's logger; logger adds the volume's ID and its pod's name, known once
	// the metadata was read. Nothing more is kept per volume: a logger with values can cost
	// hundreds of bytes.
	log     logr.Logger
	podName atomic.Pointer[string]

	// fence is held while WriteKeypair runs; fenced is set under it by UnmanageVolume, after
	// which nothing writes for this registration any more.
	fence  sync.Mutex
	fenced bool

	// resumed: registered at start-up from stored state (a volume mounted before this
	// process), not by a publish or a ManageVolume call.
	resumed bool

	// Guarded by registry.mu.
	podUID      types.UID
	loopStarted bool

	// shown is what the board shows of the volume; guarded by board.mu.
	shown shownVolume
}

func newVolume(id string, now time.Time, log logr.Logger) *volume {
	v := &volume{id: id, managedAt: now, requeue: make(chan struct{}, 1), log: log}
	v.ctx.done = make(chan struct{})
	return v
}

// logger is the manager's logger with the volume's ID and, once known, its pod's name.
func (v *volume) logger() logr.Logger {
	if pod := v.podName.Load(); pod != nil {
		return v.log.WithValues("volume_id", v.id, "pod", *pod)
	}
	return v.log.WithValues("volume_id", v.id)
}

// volumeContext is a context that ends when cancel is called, and for no other reason: no
// parent, deadline or values. A volume is idle most of its life, so it costs one channel and no
// more: the contexts derived from it register through its AfterFunc (which the context package
// uses for a parent that offers it) and leave nothing behind once they are done, where a
// context.WithCancel would keep a map of children for the rest of the volume's life.
type volumeContext struct {
	done chan struct{}

	mu    sync.Mutex
	ended bool
	funcs []*func() // AfterFunc's, until called or stopped
}

var _ context.Context = (*volumeContext)(nil)

func (c *volumeContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *volumeContext) Done() <-chan struct{}       { return c.done }
func (c *volumeContext) Value(any) any               { return nil }

// Err is context.Canceled once cancel was called, nil before.
func (c *volumeContext) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// AfterFunc calls f on a goroutine of its own once the context ends (at once if it has), unless
// the returned stop is called first; stop reports whether it prevented the call.
func (c *volumeContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		go f()
		return func() bool { return false }
	}
	entry := &f
	c.funcs = append(c.funcs, entry)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, e := range c.funcs {
			if e == entry {
				c.funcs = append(c.funcs[:i], c.funcs[i+1:]...)
				if len(c.funcs) == 0 {
					c.funcs = nil
				}
				return true
			}
		}
		return false
	}
}

// cancel ends the context and calls the functions registered with AfterFunc. Only the first call
// does anything.
func (c *volumeContext) cancel() {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	close(c.done)
	funcs := c.funcs
	c.funcs = nil
	c.mu.Unlock()
	for _, f := range funcs {
		go (*f)()
	}
}
