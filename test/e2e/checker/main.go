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

// Command checker runs in the e2e node's test containers. It reads the certificate volume
// mounted at its argument through the "..data" projection (one issuance at a time), checks that tls.key matches
// tls.crt and that the chain verifies to ca.crt, and prints one line per certificate it sees
// ("certificate ok serial=... not_after=..." or "certificate bad: <why>"), checking again every
// 200 ms until it is stopped.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cert-manager/csi-lib/test/testkit"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: checker <volume directory>")
		os.Exit(2)
	}
	dir := filepath.Join(os.Args[1], "..data")
	last := ""
	for {
		line := check(dir)
		if line != last {
			fmt.Println(line)
			last = line
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check reads the three files from the generation "..data" points to, so that they are of
// one issuance: a reader that followed the visible names one by one could mix two issuances
// across a swap. A generation removed while it is read (a swap) is read again from the new one.
func check(dataLink string) string {
	var problem string
	for attempt := 0; attempt < 5; attempt++ {
		files, err := readGeneration(dataLink)
		if err != nil {
			problem = "certificate missing: " + err.Error()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		leaf, err := testkit.VerifyKeyPair(files[0], files[1], files[2], time.Now())
		if err != nil {
			return "certificate bad: " + err.Error()
		}
		return fmt.Sprintf("certificate ok serial=%s not_after=%s", leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return problem
}

// readGeneration returns tls.key, tls.crt and ca.crt of the generation dataLink points to.
func readGeneration(dataLink string) ([3][]byte, error) {
	var out [3][]byte
	gen, err := os.Readlink(dataLink)
	if err != nil {
		return out, err
	}
	dir := filepath.Join(filepath.Dir(dataLink), gen)
	for i, name := range []string{"tls.key", "tls.crt", "ca.crt"} {
		if out[i], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return out, err
		}
	}
	return out, nil
}
