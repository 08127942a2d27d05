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

// Package cancelctx is a context that ends when it is cancelled and for no other reason, and
// costs one channel for as long as it lives.
package cancelctx

import (
	"context"
	"sync"
	"time"
)

// Context is a context that ends when Cancel is called, and for no other reason: no parent,
// deadline or values. It is made for something idle most of its life, such as a managed volume:
// it costs one channel and no more. The contexts derived from it register through its AfterFunc
// (which the context package uses for a parent that offers it) and leave nothing behind once
// they are done, where a context.WithCancel would keep a map of children for the rest of its
// life.
type Context struct {
	done chan struct{}

	mu    sync.Mutex
	ended bool
	funcs []*func() // AfterFunc's, until called or stopped
}

var _ context.Context = (*Context)(nil)

// New returns a Context that has not ended.
func New() *Context {
	return &Context{done: make(chan struct{})}
}

func (c *Context) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *Context) Done() <-chan struct{} { return c.done }

func (c *Context) Value(any) any { return nil }

// Err is context.Canceled once cancel was called, nil before.
func (c *Context) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// AfterFunc calls f on a goroutine of its own once the context ends (at once if it has), unless
// the returned stop is called first; stop reports whether it prevented the call.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
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

// Cancel ends the context and calls the functions registered with AfterFunc. Only the first call
// does anything.
func (c *Context) Cancel() {
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
