package manager

import (
	"context"
	"sync"
)

// lifetime is the manager's life: a context that ends on Stop, and a count of the manager's own
// goroutines so that Stop can wait for them, except while one is inside a driver-supplied
// function: Stop never waits for code it does not control. A goroutine that comes back from a
// driver function after Stop finds the manager closed and exits at once, touching nothing.
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   *sync.Cond
	n      int
	closed bool
}

func newLifetime() *lifetime {
	a := &lifetime{}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.idle = sync.NewCond(&a.mu)
	return a
}

// end ends the context, refuses further goroutines and waits until every registered one has
// left.
func (a *lifetime) end() {
	a.cancel()
	a.closeAndWait()
}

// enter registers a goroutine of the manager. It reports false once the manager is closed.
func (a *lifetime) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.n++
	return true
}

// leave unregisters a goroutine registered by enter.
func (a *lifetime) leave() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n--
	if a.n == 0 {
		a.idle.Broadcast()
	}
}

// closeAndWait refuses further enters and waits until every registered goroutine has left.
func (a *lifetime) closeAndWait() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for a.n > 0 {
		a.idle.Wait()
	}
}

// tracked is one goroutine's registration. Outside calls it releases its registration for the
// duration of a driver function.
type tracked struct {
	a      *lifetime
	inside bool
}

// track registers the calling goroutine; nil if the manager is closed.
func (a *lifetime) track() *tracked {
	if !a.enter() {
		return nil
	}
	return &tracked{a: a, inside: true}
}

// outside runs f (a driver-supplied function) without holding up Stop. It reports false if the
// manager was closed meanwhile: the goroutine no longer counts and must return without doing
// anything more.
func (t *tracked) outside(f func()) bool {
	if t == nil {
		f()
		return true
	}
	t.a.leave()
	t.inside = false
	f()
	if !t.a.enter() {
		return false
	}
	t.inside = true
	return true
}

// done ends the registration (if the goroutine still holds it).
func (t *tracked) done() {
	if t != nil && t.inside {
		t.inside = false
		t.a.leave()
	}
}
