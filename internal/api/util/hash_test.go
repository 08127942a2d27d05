package util

import "testing"

func TestHashIdentifier(t *testing.T) {
	if got := HashIdentifier("test-node"); got != "f56fd9f8b" {
		t.Fatalf("HashIdentifier(test-node) = %q, want f56fd9f8b", got)
	}
	if HashIdentifier("a") == HashIdentifier("b") {
		t.Fatal("different IDs hash alike")
	}
}
