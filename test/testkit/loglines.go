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
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogLines keeps every line logged through its Logger (funcr's text: the prefix, then the
// message and key-value pairs), for tests that check what an operator reads.
type LogLines struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger whose lines l keeps.
func (l *LogLines) Logger() logr.Logger {
	return l.LoggerV(0)
}

// LoggerV is Logger that also keeps the lines logged at verbosity up to v.
func (l *LogLines) LoggerV(v int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: v})
}

// Matching returns the lines that contain s, in the order they were logged.
func (l *LogLines) Matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}
