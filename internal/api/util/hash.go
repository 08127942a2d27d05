// Package util computes the label values in package api.
package util

import (
	"fmt"
	"hash/fnv"

	"k8s.io/apimachinery/pkg/util/rand"
)

// HashIdentifier returns the label-safe hash of a node or volume ID: the FNV-1 32-bit hash as a
// decimal string, passed through rand.SafeEncodeString. It matches upstream, so requests created
// before an upgrade are still found.
func HashIdentifier(s string) string {
	h := fnv.New32()
	_, _ = h.Write([]byte(s))
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}
