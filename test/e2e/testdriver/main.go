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

// Command testdriver is the driver the real node's stories (the e2e program, make e2e) run: the
// example driver (examples/csi-driver's package plugin) with the example's flags, the e2e's
// issuer as its default, and the knobs only the stories need, set through the plugin's hooks:
// a journal the e2e program measures the node by, upstream v0.12.0's gate settings to compare
// with, and a shorter issuance backoff.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/cert-manager/csi-lib/examples/csi-driver/plugin"
	"github.com/cert-manager/csi-lib/manager"
	"github.com/cert-manager/csi-lib/metadata"
)

func main() {
	// The example's flags (plugin.BindFlags), with the e2e's CA Issuer as the default issuer.
	cfg := plugin.Config{
		DriverName: "csi.example.com",
		NodeID:     os.Getenv("NODE_NAME"),
		Issuer:     cmmeta.IssuerReference{Kind: "Issuer", Name: "e2e-ca", Group: "cert-manager.io"},
	}
	plugin.BindFlags(flag.CommandLine, &cfg)
	var (
		verbosity = flag.Int("v", 2, "log verbosity")
		// The stories' own.
		journalPath = flag.String("journal", "", "append a JSON line per publish and per key pair written to this file")
		v012Gate    = flag.Bool("v0.12-gate", false, "v0.12.0's gate settings: the 1–10 s gate backoff, no gate poll")
		issueBase   = flag.Duration("issue-backoff", 0, "the issuance (renewal) backoff's first step (0: the library's default, 30 s)")
	)
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity)))
	klog.SetLogger(log)
	if cfg.NodeID == "" {
		log.Error(errors.New("--node-id is empty and NODE_NAME is not set"), "no node ID")
		os.Exit(2)
	}
	j, err := openJournal(*journalPath)
	if err != nil {
		log.Error(err, "opening the journal")
		os.Exit(1)
	}
	cfg.OnPublish = func(meta metadata.Metadata) { j.record("publish", meta) }
	cfg.OnWritten = func(meta metadata.Metadata) { j.record("written", meta) }
	cfg.TuneManager = backoffs(*v012Gate, *issueBase)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := plugin.Run(ctx, log, cfg); err != nil {
		log.Error(err, "driver failed")
		stop()
		os.Exit(1)
	}
}

// backoffs sets the manager's backoffs: the issuance backoff's first step (0: the library's),
// and with v012Gate upstream v0.12.0's gate settings, which are the library's defaults: the
// gate backoff 1 s doubling to 10 s, and no gate poll. (No RequeuePod is --requeue-pods=false.)
func backoffs(v012Gate bool, issue time.Duration) func(*manager.Options) {
	return func(o *manager.Options) {
		if issue > 0 {
			b := manager.DefaultRenewalBackoff()
			b.Duration = issue
			o.RenewalBackoffConfig = &b
		}
		if v012Gate {
			gate := manager.DefaultGateBackoff()
			o.GateBackoffConfig = &gate
			o.GatePollInterval = 0
		}
	}
}

// journal appends one JSON line per event: what the e2e program measures the node by.
type journal struct {
	mu sync.Mutex
	f  *os.File
}

// journalEntry is one line of the journal (test/e2e reads it as its journalEntry).
type journalEntry struct {
	Time   time.Time `json:"time"`
	Event  string    `json:"event"`
	Volume string    `json:"volume"`
	Pod    string    `json:"pod"`
	// Next is the NextIssuanceTime written with a key pair.
	Next *time.Time `json:"next,omitempty"`
}

func openJournal(path string) (*journal, error) {
	if path == "" {
		return &journal{}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	return &journal{f: f}, err
}

func (j *journal) record(event string, meta metadata.Metadata) {
	if j.f == nil {
		return
	}
	line, _ := json.Marshal(journalEntry{Time: time.Now(), Event: event, Volume: meta.VolumeID, Pod: meta.VolumeContext[metadata.PodNameVolumeContextKey], Next: meta.NextIssuanceTime})
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.Write(append(line, '\n'))
}
