// Command checker runs in the e2e node's test containers. It reads the certificate volume
// mounted at its argument through the "..data" projection, checks that tls.key matches
// tls.crt and that the chain verifies to ca.crt, and prints one line per certificate it sees
// ("certificate ok serial=... not_after=..." or "certificate bad: <why>"), checking again every
// 200 ms until it is stopped.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cert-manager/csi-lib/internal/testkit"
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

func check(dir string) string {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	keyPEM, err := read("tls.key")
	if err != nil {
		return "certificate missing: " + err.Error()
	}
	chainPEM, err := read("tls.crt")
	if err != nil {
		return "certificate missing: " + err.Error()
	}
	caPEM, err := read("ca.crt")
	if err != nil {
		return "certificate missing: " + err.Error()
	}
	leaf, err := testkit.VerifyKeyPair(keyPEM, chainPEM, caPEM, time.Now())
	if err != nil {
		return "certificate bad: " + err.Error()
	}
	return fmt.Sprintf("certificate ok serial=%s not_after=%s", leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
}
