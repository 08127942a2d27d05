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

package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

func pct(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return fmtDur(s[i])
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func serialOf(chain []byte) string {
	block, _ := pem.Decode(chain)
	if block == nil {
		return "?"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "?"
	}
	s := cert.SerialNumber.Text(16)
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

// readDataLink finds the ..data link of a volume in any of the demo's stores.
func readDataLink(workDir, volumeID string) string {
	matches, _ := filepath.Glob(filepath.Join(workDir, "base-*", "inmemfs", volumeID, "data", "..data"))
	for _, m := range matches {
		if t, err := os.Readlink(m); err == nil {
			return t
		}
	}
	return ""
}

// readVolumeFile reads a data file of a volume in any of the demo's stores ("" if there is
// none).
func readVolumeFile(workDir, volumeID, name string) []byte {
	matches, _ := filepath.Glob(filepath.Join(workDir, "base-*", "inmemfs", volumeID, "data", name))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil {
			return b
		}
	}
	return nil
}
